"""The budget step's pieces: the equivalence that labels the tables is the query's own
tolerance, a twin's second ask reaches the model, second answers are shared by the
configurations, and the paired excess is read off the pairs."""

from __future__ import annotations

import json

import pytest

from agent_core import Requirements, TextAgreement, TownCall
from experiments._budget_study import (
    STATIC_THRESHOLD,
    _paired,
    _sample,
    _Served,
    _table_figures,
    _Tally,
    equivalence,
)
from experiments._data import ALL, Prompt
from experiments._replay import OutOfRevisions, RecordedAnswers
from llmcache.types import TableStats


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


def test_the_paired_excess_is_read_off_the_pairs() -> None:
    # 20 served answers, 6 of them unacceptable; the model's second answers: 4 unacceptable,
    # 3 of them on the same queries.
    pairs = [(True, True)] * 3 + [(True, False)] * 3 + [(False, True)] * 1 + [(False, False)] * 13
    p = _paired(pairs)
    assert (p.pairs, p.served_bad, p.reanswer_bad, p.both_bad) == (20, 6, 4, 3)
    assert p.excess == pytest.approx(0.1)
    assert p.low is not None and p.high is not None and p.low < 0.1 < p.high
    assert _paired([]).excess is None


def _prompt(index: int, content: str = "hi") -> Prompt:
    return Prompt(
        run=3,
        index=index,
        category="importance score",
        group="importance",
        agent="Alice",
        modifier="read",
        keywords=[f"k{index}"],
        options=None,
        messages=[{"role": "user", "content": f"{content} {index}"}],
        response='{"score": 5}',
        sim_minute=0,
        elapsed_minutes=0,
        observed_actors=0,
        metadata={},
        model="m",
        escalated=False,
        attempts=1,
        prompt_tokens=10,
        completion_tokens=3,
        cost_usd=0.0,
    )


def test_configurations_pair_the_same_queries_when_they_served_them() -> None:
    served = [_Served(_prompt(i), "x", True) for i in range(300)]
    first = _sample(served, 100, seed=0)
    # Another configuration that served a subset pairs the same queries where it can.
    subset = [s for s in served if s.query.index % 2 == 0]
    again = _sample(subset, 100, seed=0)
    shared = {s.query.index for s in first} & {s.query.index for s in again}
    assert len(first) == len(again) == 100 and len(shared) >= 40
    assert _sample(served[:10], 100, seed=0) == served[:10]


class _Live:
    def __init__(self) -> None:
        self.calls: list[dict[str, object]] = []
        self.chat = self
        self.completions = self

    def create(self, **kwargs: object) -> str:
        self.calls.append(kwargs)
        return "live"


def test_a_query_asked_again_within_its_call_goes_to_the_model() -> None:
    q = _prompt(1)
    live = _Live()
    answers = RecordedAnswers([q], live, "local", budget=0)
    answers.begin()
    first = answers.create(model="m", messages=q.messages)
    assert first.choices[0].message.content == q.response  # its recorded, true answer
    assert answers.create(model="m", messages=q.messages) == "live"  # a twin: fresh
    assert live.calls[0]["model"] == "local"
    answers.begin()  # the next query of the run: recorded again
    assert answers.create(model="m", messages=q.messages).choices[0].message.content == q.response
    revision = [{"role": "user", "content": "revise this"}]
    with pytest.raises(OutOfRevisions):  # a revision, with no revise budget
        answers.create(model="m", messages=revision)
    assert answers.refused and len(live.calls) == 1


def test_without_a_revise_budget_every_revision_goes_to_the_model() -> None:
    q = _prompt(1)
    live = _Live()
    answers = RecordedAnswers([q], live, "local")
    answers.begin()
    revision = [{"role": "user", "content": "revise this"}]
    assert [answers.create(model="m", messages=revision) for _ in range(3)] == ["live"] * 3
    assert answers.revise_calls == 3 and not answers.refused


def test_the_static_comparison_is_the_librarys_default() -> None:
    from llmcache import CacheConfig

    assert CacheConfig().threshold == STATIC_THRESHOLD


class _Stats:
    """A cache's stats as `_table_figures` reads them: two tables of one template."""

    def __init__(self, pooled: bool) -> None:
        def table(agent: str, differ: int, n: int) -> TableStats:
            return TableStats(
                category="importance score",
                agent=agent,
                model="m",
                key=f"importance score/{agent}",
                self_disagreement=differ / n,
                self_disagreement_pairs=n,
            )

        # Pooled, both tables show their pool's pairs (4 of 10 differ); alone, their own.
        self.tables = (
            [table("Alice", 4, 10), table("Bob", 4, 10)]
            if pooled
            else [table("Alice", 1, 2), table("Bob", 3, 8)]
        )

    def stats(self) -> _Stats:
        return self


@pytest.mark.parametrize("pooled", [True, False])
def test_a_groups_self_disagreement_counts_every_pair_once(pooled: bool) -> None:
    tally = _Tally()
    tally.add("importance", queries=1)
    _table_figures(_Stats(pooled), [_prompt(0)], tally, {}, pooled=pooled)  # type: ignore[arg-type]
    for group in ("importance", ALL):
        assert tally.groups[group].self_disagreement == pytest.approx(0.4)
        assert tally.groups[group].tables == 2
