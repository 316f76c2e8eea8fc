"""The budget section's sentences are computed from the run, and say nothing they cannot."""

from __future__ import annotations

from experiments._report import _audit_line, _budget_goals, _config_name, _pooling_line
from experiments._results import BudgetGroup, BudgetResult, BudgetRun, PairedExcess


def _run(hits: int, high: float | None) -> BudgetRun:
    paired = PairedExcess() if high is None else PairedExcess(excess=0.0, low=-high, high=high)
    return BudgetRun(
        mode="full",
        config="budget",
        budget=0.05,
        groups={"all": BudgetGroup(queries=235, hits=hits, cost_reduction=-0.16, paired=paired)},
    )


def test_nothing_served_is_not_called_within_the_budget() -> None:
    run = _run(0, None)
    lines = _budget_goals(BudgetResult(query_run=3, table_run=1, runs=[run]), run, [])
    assert any("no excess to bound: 0 answers served" in line for line in lines)
    assert not any("within δ" in line for line in lines)


def test_an_excess_whose_upper_bound_passes_is_within_and_one_over_is_over() -> None:
    within, over = _run(120, 0.04), _run(120, 0.09)
    result = BudgetResult(query_run=3, table_run=1, runs=[within, over])
    assert any("within δ = +5 points" in line for line in _budget_goals(result, within, []))
    assert any(
        "over δ in all (upper bound +9.0)" in line for line in _budget_goals(result, over, [])
    )


def _firsts(pooled: bool, firsts: dict[str, int], never: dict[str, int]) -> BudgetRun:
    run = _run(len(firsts), None)
    return run.model_copy(
        update={"pooled": pooled, "first_hit_labels": firsts, "never_served_labels": never}
    )


def test_pooling_line_says_which_evidence_served() -> None:
    nothing = _firsts(True, {}, {"a / x": 9, "b / x": 4})
    assert "no table served under either evidence" in _pooling_line(nothing, nothing)
    alone = _firsts(False, {"a / x": 11}, {"b / x": 4})
    line = _pooling_line(nothing, alone)
    assert "no table served with pooled evidence" in line
    assert "1 served, after a median of 11 labels" in line
    assert "either evidence" not in line


def test_pooling_line_bounds_the_unserved_by_their_own_labels() -> None:
    pooled = _firsts(True, {"a / x": 2, "b / x": 3}, {})
    alone = _firsts(False, {}, {"a / x": 40, "b / x": 30, "c / x": 1})
    line = _pooling_line(pooled, alone)
    assert "2 of them never served" in line
    # The median of a's 40 and b's 30, not c's 1: c never served with pooling either.
    assert "it is at least 35 (at least 14.0× fewer with pooling)" in line
    mixed = _firsts(False, {"a / x": 5}, {"b / x": 30})
    assert "at least 17.5 (at least 7.0× fewer" in _pooling_line(pooled, mixed)
    both = _firsts(False, {"a / x": 8, "b / x": 12}, {})
    assert "(4.0× fewer; 0 never served alone)" in _pooling_line(pooled, both)


def test_the_audit_line_prices_the_audits_against_the_uncached_bill() -> None:
    total = BudgetGroup(
        queries=400,
        hits=300,
        audits=25,
        audit_usd=0.02,
        baseline_usd=1.0,
        tables=8,
        tables_tightened=2,
        tables_closed=1,
    )
    run = BudgetRun(
        mode="keyword", config="audit", budget=0.05, threshold=0.9, groups={"all": total}
    )
    assert _config_name(run) == "audit guard δ = 0.05 from 0.90"
    line = _audit_line(run)
    assert line is not None
    assert "25 would-be hits audited, costing 2.0% of the uncached bill" in line
    assert "2 of 8 tables tightened by their audits, 1 closed" in line
