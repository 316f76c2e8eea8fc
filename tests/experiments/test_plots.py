"""Every figure and both notebooks, drawn from small synthetic results (test data, not findings)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from pydantic import BaseModel

from experiments._notebooks import NOTEBOOKS, execute_notebooks, repo_root
from experiments._plots import (
    plot_all,
    plot_budget,
    plot_collect,
    plot_compare,
    plot_correlation,
    plot_correlation_groups,
    plot_cost,
    plot_observed,
    plot_saturation,
    plot_similarity,
)
from experiments._results import (
    BudgetGroup,
    BudgetResult,
    BudgetRun,
    CollectResult,
    CompareResult,
    CorrelationResult,
    CostResult,
    GroupCost,
    JudgeReliability,
    ModeCost,
    ObservedResult,
    PairedExcess,
    RatingTable,
    RunInfo,
    SaturationCurve,
    SaturationResult,
    SimilarityResult,
    SkillRating,
    save_result,
)

# --- synthetic results (test data) -----------------------------------------------------------

GROUPS = ["importance", "plan making and revision", "finding location"]
FULL_REGIONS = ["(0.9,0.925]", "(0.925,0.95]", "(0.95,0.975]", "(0.975,1]"]
KEYWORD_REGIONS = ["(0.5,0.625]", "(0.625,0.75]", "(0.75,0.875]", "(0.875,1]"]


def _rating(mu: float, sigma: float = 2.0) -> SkillRating:
    return SkillRating(mu=mu, sigma=sigma, games=10)


def _table(judge: str, labels: list[str], *, skip_group: str | None = None) -> RatingTable:
    overall = {lab: _rating(20.0 + 2 * i) for i, lab in enumerate(labels)}
    per_group = {
        g: {lab: _rating(19.0 + i + k) for i, lab in enumerate(labels)}
        for k, g in enumerate(GROUPS)
        if g != skip_group
    }
    return RatingTable(judge=judge, overall=overall, per_group=per_group, judgements=30, failures=1)


def _reliability(judge: str) -> JudgeReliability:
    return JudgeReliability(
        judge=judge,
        shuffle_agreement=0.8 if judge == "llm" else None,
        agreement_with={"llm" if judge != "llm" else "similarity": 0.7},
        true_mean_rank=1.4,
        true_first_rate=0.6,
    )


def collect_result() -> CollectResult:
    runs = [
        RunInfo(
            run=r, seed=r, days=2.0, agents=["Ann", "Bob"], dataset=f"run{r}.jsonl",
            wall_seconds=60.0, prompts_recorded=120, prompts_kept=100,
            per_category={"importance": 40, "daily_plan": 30 + r, "location": 30 - r},
            resubmitted=6, resubmission_rate=0.05, escalated=1, superior_rate=0.01, failed=0,
            llm="scripted",
        )
        for r in (1, 2)
    ]  # fmt: skip
    return CollectResult(profile="test", runs=runs)


def similarity_result() -> SimilarityResult:
    full = {g: [0.93 + 0.01 * (i % 5) for i in range(12)] for g in GROUPS}
    keyword = {g: [0.6 + 0.03 * (i % 7) for i in range(12)] for g in GROUPS}
    keyword["finding location"] = []  # a group with no queries
    return SimilarityResult(
        query_run=1, table_run=2, embedder="fake", means={"full": full, "keyword": keyword}
    )


def correlation_result() -> CorrelationResult:
    labels = {"full": [*FULL_REGIONS, "true"], "keyword": [*KEYWORD_REGIONS, "true"]}
    ratings = {
        "llm": {m: _table("llm", labs) for m, labs in labels.items()},
        # a judge that rated only full mode, and only some regions
        "similarity": {"full": _table("similarity", FULL_REGIONS[1:], skip_group="importance")},
    }
    return CorrelationResult(
        regions={"full": FULL_REGIONS, "keyword": KEYWORD_REGIONS},
        queries={"full": 40, "keyword": 38},
        filled={"full": dict.fromkeys(FULL_REGIONS, 10), "keyword": {KEYWORD_REGIONS[0]: 3}},
        modifier_failures={"full": 1, "keyword": 0},
        ratings=ratings,
        reliability={j: _reliability(j) for j in ratings},
    )


def saturation_result() -> SaturationResult:
    days = [0.5, 1.0, 1.5, 2.0, 2.5]
    curves = {
        mode: [
            SaturationCurve(
                tables=t,
                mean=[base + 0.01 * i + 0.002 * k for i in range(5)],
                std=[0.01] * 5,
                entries=[10 * (i + 1) for i in range(5)],
            )
            for k, t in enumerate(["run 2", "run 3", "combined"])
        ]
        for mode, base in (("full", 0.93), ("keyword", 0.7))
    }
    return SaturationResult(
        thresholds_days=days,
        thresholds_hours_of_data=[d / 2.5 for d in days],
        queries=50,
        curves=curves,
        saturation_days={"full": 2.0, "keyword": None},
    )


def observed_result() -> ObservedResult:
    return ObservedResult(
        thresholds_days=[0.5, 1.0, 1.5, 2.0],
        observed_mean=[3.0, 5.0, 6.5, 7.0],
        similarity_mean={"full": [0.93, 0.95, 0.96, 0.965], "keyword": [0.7, 0.7, 0.7, 0.7]},
        pearson_r={"full": 0.98, "keyword": None},
        pearson_p={"full": 0.02, "keyword": None},
    )


def compare_result() -> CompareResult:
    labels = ["full", "keyword", "random", "true"]
    return CompareResult(
        query_run=4,
        table_run=2,
        queries={"importance": 10, "plan making and revision": 8, "finding location": 0},
        modifier_failures={"full": 0, "keyword": 2},
        ratings={
            "llm": _table("llm", labels, skip_group="finding location"),
            "similarity": _table("similarity", labels, skip_group="finding location"),
        },
        reliability={"llm": _reliability("llm"), "similarity": _reliability("similarity")},
    )


def cost_result() -> CostResult:
    def mode(name: str, building: float, usage: float) -> ModeCost:
        base = 3.0
        total = building + usage
        red = None if name == "none" else 1 - total / base
        usage_red = None if name == "none" else 1 - usage / base
        return ModeCost(mode=name, building_usd=building, usage_usd=usage, total_usd=total,
                        reduction=red, usage_reduction=usage_red)  # fmt: skip

    return CostResult(
        chars_per_token=4.0,
        prices={"llm_in": 0.15, "llm_out": 0.6, "embed": 0.02},
        groups=[
            GroupCost(group=g, full_chars=3000.0 + 100 * i, keyword_chars=300.0, reduction=0.9)
            for i, g in enumerate(GROUPS)
        ],
        description_reduction=0.9,
        study_prices=[mode("none", 0, 3.0), mode("full", 0.3, 0.8), mode("keyword", 0.1, 0.5)],
        local_embedder=[mode("none", 0, 3.0), mode("full", 0, 0.7), mode("keyword", 0, 0.49)],
        replay={"keyword": {"spent_usd": 0.5, "avoided_usd": 2.5, "calls": 100, "hits": 90}},
        sim_days=2.0,
    )


RESULTS: dict[str, BaseModel] = {
    "collect": collect_result(),
    "similarity": similarity_result(),
    "correlation": correlation_result(),
    "saturation": saturation_result(),
    "observed": observed_result(),
    "compare": compare_result(),
    "cost": cost_result(),
}


def _write_results(directory: Path) -> Path:
    for name, result in RESULTS.items():
        save_result(result, directory / f"{name}.json")
    return directory


def _is_png(path: Path) -> bool:
    return (
        path.is_file()
        and path.stat().st_size > 1000
        and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    )


# --- tests -----------------------------------------------------------------------------------


def test_public_api() -> None:
    import experiments._notebooks as notebooks
    import experiments._plots as plots

    assert sorted(plots.__all__) == [
        "plot_all",
        "plot_budget",
        "plot_collect",
        "plot_compare",
        "plot_correlation",
        "plot_correlation_groups",
        "plot_cost",
        "plot_observed",
        "plot_quality",
        "plot_replay_study",
        "plot_saturation",
        "plot_similarity",
    ]
    assert sorted(notebooks.__all__) == ["NOTEBOOKS", "execute_notebooks", "repo_root"]


def test_every_plot_writes_a_png(tmp_path: Path) -> None:
    written = [
        plot_collect(collect_result(), tmp_path / "collect.png"),
        plot_similarity(similarity_result(), tmp_path / "similarity.png"),
        plot_correlation(correlation_result(), tmp_path / "correlation.png"),
        plot_correlation_groups(correlation_result(), tmp_path / "groups.png"),
        plot_saturation(saturation_result(), tmp_path / "deep" / "saturation.png"),
        plot_observed(observed_result(), tmp_path / "observed.png"),
        plot_compare(compare_result(), tmp_path / "compare.png"),
        plot_cost(cost_result(), tmp_path / "cost.png"),
    ]
    assert all(_is_png(p) for p in written), written
    assert written[4] == tmp_path / "deep" / "saturation.png"


def test_the_budget_plot_draws_each_configuration(tmp_path: Path) -> None:
    def group(hits: int, excess: float, cut: float) -> BudgetGroup:
        paired = PairedExcess(pairs=hits, excess=excess, low=excess - 0.05, high=excess + 0.05)
        return BudgetGroup(queries=50, hits=hits, paired=paired, cost_reduction=cut)

    result = BudgetResult(
        query_run=3,
        table_run=1,
        runs=[
            BudgetRun(mode="keyword", config="budget", budget=0.05,
                      groups={"importance": group(20, 0.01, 0.4)}),
            BudgetRun(mode="keyword", config="budget", budget=0.05, pooled=False,
                      groups={"importance": group(5, 0.0, 0.1)}),
            BudgetRun(mode="keyword", config="audit", budget=0.05, threshold=0.9,
                      groups={"importance": group(30, 0.02, 0.6)}),
            BudgetRun(mode="keyword", config="static", threshold=0.9,
                      groups={"importance": group(40, 0.2, 0.8), "memory": group(0, 0.0, 0.0)}),
            BudgetRun(mode="keyword", config="serve", groups={"importance": group(49, 0.3, 0.9)}),
            BudgetRun(mode="keyword", config="random", groups={"importance": group(49, 0.3, 0.9)}),
        ],
    )  # fmt: skip
    assert _is_png(plot_budget(result, tmp_path / "budget.png"))
    assert _is_png(plot_budget(BudgetResult(query_run=3, table_run=1, runs=[]), tmp_path / "e.png"))


def test_plots_survive_empty_results(tmp_path: Path) -> None:
    empty_table = RatingTable(judge="llm", overall={}, per_group={}, judgements=0, failures=3)
    written = [
        plot_collect(CollectResult(profile="p", runs=[]), tmp_path / "a.png"),
        plot_similarity(
            SimilarityResult(query_run=1, table_run=2, embedder="e", means={"full": {}}),
            tmp_path / "b.png",
        ),
        plot_correlation(
            CorrelationResult(
                regions={"full": FULL_REGIONS}, queries={}, filled={}, modifier_failures={},
                ratings={"llm": {"full": empty_table}}, reliability={},
            ),
            tmp_path / "c.png",
        ),
        plot_correlation_groups(
            CorrelationResult(regions={}, queries={}, filled={}, modifier_failures={},
                              ratings={}, reliability={}),
            tmp_path / "d.png",
        ),
        plot_saturation(
            SaturationResult(thresholds_days=[], thresholds_hours_of_data=[], queries=0,
                             curves={"full": []}, saturation_days={"full": None}),
            tmp_path / "e.png",
        ),
        plot_observed(
            ObservedResult(thresholds_days=[], observed_mean=[], similarity_mean={"full": []},
                           pearson_r={"full": None}, pearson_p={"full": None}),
            tmp_path / "f.png",
        ),
        plot_compare(
            CompareResult(query_run=1, table_run=2, queries={}, modifier_failures={},
                          ratings={}, reliability={}),
            tmp_path / "g.png",
        ),
        plot_cost(
            CostResult(chars_per_token=4, prices={}, groups=[], description_reduction=0.0,
                       study_prices=[], local_embedder=[], replay={}, sim_days=0.0),
            tmp_path / "h.png",
        ),
    ]  # fmt: skip
    assert all(p.is_file() and p.stat().st_size > 0 for p in written)


def test_plot_all(tmp_path: Path) -> None:
    assert plot_all(tmp_path) == []  # nothing there: nothing drawn, no error
    _write_results(tmp_path)
    (tmp_path / "observed.json").unlink()  # a missing result is skipped
    written = plot_all(tmp_path)
    names = sorted(p.name for p in written)
    assert names == [
        "collect.png",
        "compare.png",
        "correlation.png",
        "correlation_groups.png",
        "cost.png",
        "saturation.png",
        "similarity.png",
    ]
    assert all(p.parent == tmp_path / "figures" and _is_png(p) for p in written)


def test_committed_notebooks_are_clean() -> None:
    for name in NOTEBOOKS:
        nb = nbformat.read(repo_root() / "notebooks" / name, as_version=4)
        nbformat.validate(nb)
        assert nb.nbformat == 4
        assert nb.metadata["kernelspec"]["name"] == "python3"
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert code, name
        assert all(c.outputs == [] and c.execution_count is None for c in code), name
        assert any("EXPERIMENTS_RESULTS" in c.source for c in code), name


@pytest.mark.slow
def test_notebooks_execute_on_synthetic_results(tmp_path: Path) -> None:
    results = _write_results(tmp_path / "results")
    out = execute_notebooks(results, tmp_path / "executed", timeout=300)
    assert [p.name for p in out] == list(NOTEBOOKS)
    for path in out:
        nb = nbformat.read(path, as_version=4)
        outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
        assert not [o for o in outputs if o.output_type == "error"]
        images = [o for o in outputs if "image/png" in o.get("data", {})]
        assert images, f"{path.name} showed no figure"
        text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
        text += "".join(o["data"].get("text/markdown", "") for o in outputs if "data" in o)
        # The notebook read the directory it was given; it names one outside the repository
        # by its last part only (an executed copy is committed, so no machine's paths).
        assert f"results: {results.name}\n" in text
    saturation = nbformat.read(out[0], as_version=4)
    printed = "".join(
        o.get("text", "") for c in saturation.cells if c.cell_type == "code" for o in c.outputs
    )
    assert "r = 0.98" in printed and "saturates at 2 days" in printed


@pytest.mark.slow
def test_failing_notebook_names_itself(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("raise RuntimeError('boom')")]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    notebooks = tmp_path / "nbs"
    notebooks.mkdir()
    for name in NOTEBOOKS:
        nbformat.write(nb, notebooks / name)
    with pytest.raises(RuntimeError, match=NOTEBOOKS[0]):
        execute_notebooks(tmp_path, tmp_path / "out", notebooks_dir=notebooks, timeout=60)
