"""The budget section's sentences are computed from the run, and say nothing they cannot."""

from __future__ import annotations

from experiments._report import _budget_goals
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
