"""The budget step's pieces: the equivalence that labels the tables is the query's own
tolerance, and the rates of a group are read off its counts."""

from __future__ import annotations

import json

import pytest

from agent_core import Requirements, TextAgreement, TownCall
from experiments._budget_study import STATIC_THRESHOLD, equivalence, summarise
from experiments._results import BudgetGroup


def _call(category: str, options: list[str] | None = None) -> TownCall:
    return TownCall(
        category=category,
        agent="Alice",
        summary_block="Name: Alice",
        slots={},
        requirements=Requirements(options=options) if options else Requirements(),
    )


def _exact(a: str, b: str) -> float:
    return 1.0 if a == b else 0.0


def test_the_equivalence_is_the_querys_tolerance() -> None:
    same = equivalence(_call("importance score"), TextAgreement(_exact, 0.9))
    assert same(json.dumps({"score": 5}), json.dumps({"score": 6}))  # within ±1
    assert not same(json.dumps({"score": 2}), json.dumps({"score": 6}))
    assert not same(json.dumps({"score": 11}), json.dumps({"score": 10}))  # out of range
    assert not same("not json", json.dumps({"score": 5}))  # unreadable: not the same


def test_the_equivalence_checks_the_querys_own_requirements() -> None:
    here = ["Cafe: Counter", "Park: Bench"]
    same = equivalence(_call("finding location", here), TextAgreement(_exact, 0.9))
    loc = lambda x: json.dumps({"location": x})  # noqa: E731
    assert same(loc("Cafe: Counter"), loc("Cafe: Counter"))
    assert not same(loc("Park: Bench"), loc("Cafe: Counter"))
    # An answer fitting another query's options (not this one's) is never the same answer.
    assert not same(loc("Wilson Family House: Kitchen"), loc("Cafe: Counter"))


def test_a_groups_rates_come_from_its_counts() -> None:
    row = summarise(BudgetGroup(queries=10, hits=4, wrong=1, baseline_usd=2.0, spent_usd=0.5))
    assert row.wrong_rate == pytest.approx(0.25)
    assert 0.0 < row.wrong_low < 0.25 < row.wrong_high < 1.0
    assert row.cost_reduction == pytest.approx(0.75)
    empty = summarise(BudgetGroup(queries=3))
    assert empty.wrong_rate is None and empty.cost_reduction is None
    assert (empty.wrong_low, empty.wrong_high) == (0.0, 1.0)


def test_the_static_comparison_is_the_librarys_default() -> None:
    from llmcache import CacheConfig

    assert CacheConfig().threshold == STATIC_THRESHOLD
