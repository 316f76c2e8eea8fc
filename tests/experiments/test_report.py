"""``report.md`` built from small synthetic typed results (test data, not findings): one section
per experiment present, in order, the side-by-side table gathering their rows, every reason
computed from the inputs, and the same text whether built in memory or from the JSON files."""

from __future__ import annotations

import json
from pathlib import Path

from experiments import Profile
from experiments._report import (
    ReportContext,
    Row,
    StudyResults,
    build_report,
    report_sections,
    write_report,
)
from experiments._results import (
    CategoryCounts,
    CollectResult,
    CostResult,
    GroupCost,
    ModeCost,
    ReplayCost,
    RunInfo,
    SaturationCurve,
    SaturationResult,
    save_result,
)

SMALL = Profile(name="small", runs=3, days=0.5, agents=["Ann Lee", "Bob Ray"], escalate=False)
STUDY_SIZED = Profile(name="big", runs=5, days=15.0)


def context(profile: Profile = SMALL, timings: dict[str, float] | None = None) -> ReportContext:
    return ReportContext(
        profile=profile,
        llm="a test model",
        judge_model="a judge",
        embedder="all-MiniLM-L6-v2:int8-onnx",
        timings={"collect": 12.5} if timings is None else timings,
        command="python -m experiments reproduce --profile small",
    )


def collect() -> CollectResult:
    return CollectResult(
        profile="small",
        runs=[
            RunInfo(
                run=r, seed=r, days=0.5, agents=["Ann Lee", "Bob Ray"], dataset=f"run{r}.jsonl",
                wall_seconds=30.0, prompts_recorded=110, prompts_kept=100 + r,
                per_category={"importance score": 60, "finding location": 40 + r},
                resubmitted=2, resubmission_rate=0.02, escalated=0, superior_rate=0.0,
                failed=r - 1, llm="a test model",
            )
            for r in (1, 2)
        ],
    )  # fmt: skip


def cost() -> CostResult:
    def mode(name: str, building: float, usage: float) -> ModeCost:
        total = building + usage
        return ModeCost(
            mode=name, building_usd=building, usage_usd=usage, total_usd=total,
            reduction=1 - total / 3.0, usage_reduction=1 - usage / 3.0,
        )  # fmt: skip

    return CostResult(
        chars_per_token=4.0,
        prices={"llm_in": 0.15, "llm_out": 0.6, "embed": 0.02},
        models={"llm": "gpt-4o-mini", "embed": "text-embedding-3-small"},
        groups=[
            GroupCost(group="importance", full_chars=1200.0, keyword_chars=40.0, reduction=0.97),
            GroupCost(
                group="finding location", full_chars=1500.0, keyword_chars=90.0, reduction=0.94
            ),
        ],
        description_reduction=0.95,
        study_prices=[mode("none", 0, 3.0), mode("full", 0.3, 0.9), mode("keyword", 0.1, 0.5)],
        local_embedder=[mode("none", 0, 3.0), mode("full", 0, 0.8), mode("keyword", 0, 0.45)],
        replay={
            "none": ReplayCost(spent_usd=3.0, calls=100),
            "full": ReplayCost(spent_usd=0.75, avoided_usd=2.2, calls=100, hits=95, revise_calls=4),
            "keyword": ReplayCost(
                spent_usd=0.5, avoided_usd=2.5, calls=100, hits=90, revise_calls=7
            ),
        },
        sim_days=0.5,
    )


def saturation() -> SaturationResult:
    days = [0.25, 0.5, 0.75, 1.0]
    return SaturationResult(
        thresholds_days=days,
        thresholds_hours_of_data=[d / 2.5 for d in days],
        queries=20,
        curves={
            "full": [
                SaturationCurve(
                    tables="combined",
                    mean=[0.9, 0.95, 0.97, 0.98],
                    std=[0.0] * 4,
                    entries=[1, 2, 3, 4],
                )
            ],
        },
        saturation_days={"full": 0.75, "keyword": None},
    )


def test_one_section_per_result_present_in_the_studys_order() -> None:
    results = StudyResults(collect=collect(), saturation=saturation(), cost=cost())
    titles = [s.title for s in report_sections(results, context())]
    assert titles == [
        "Side by side",
        "Data (`collect`)",
        "Saturation (Fig 3.6, 3.7, F.1-F.3)",
        "Cost (Fig 3.12, 3.13)",
        "Caveats",
    ]
    assert [s.title for s in report_sections(StudyResults(), context())] == [
        "Side by side",
        "Caveats",
    ]


def test_the_side_by_side_table_gathers_every_sections_rows_in_order() -> None:
    sections = report_sections(StudyResults(collect=collect(), cost=cost()), context())
    side, *experiments, _ = sections
    rows = [row for s in experiments for row in s.rows]
    assert rows and rows[0].quantity.startswith("prompts per run")
    assert side.lines[2:] == [f"| {r.quantity} | {r.study} | {r.ours} | {r.why} |" for r in rows]


def test_the_text_is_the_header_then_the_sections() -> None:
    results = StudyResults(collect=collect(), saturation=saturation(), cost=cost())
    ctx = context()
    text = build_report(results, ctx)
    assert text.startswith("# Chapter-3 caching study, reproduced (small profile)\n\nGenerated by")
    assert "- Wall time per step (s): collect 12.5\n\n## Side by side\n\n| quantity |" in text
    assert text.endswith(report_sections(results, ctx)[-1].render() + "\n")
    assert "\n\n\n" not in text
    # Sections appear once each, in order, and nothing else starts a section.
    heads = [line[3:] for line in text.splitlines() if line.startswith("## ")]
    assert heads == [s.title for s in report_sections(results, ctx)]


def _row(results: StudyResults, quantity: str, ctx: ReportContext | None = None) -> Row:
    """The one side-by-side row about ``quantity``."""
    sections = report_sections(results, ctx or context())
    found = [r for s in sections for r in s.rows if r.quantity == quantity]
    assert len(found) == 1, quantity
    return found[0]


def test_the_cost_rows_read_the_typed_replay_and_the_summary() -> None:
    results = StudyResults(collect=collect(), cost=cost())
    replay = _row(results, "keyword: replay through CachedLLM (serve mode, measured tokens)")
    # 1 - 0.5 / 3.0 saved; the hits, calls and revisions of the keyword replay.
    assert replay.ours == "spent $0.50 vs $3.00 uncached (83.3% saved); 90/100 hits, 7 revised"
    local = _row(results, "full: total reduction with our local embedder")
    assert local.ours == "73.3%"  # 1 - 0.8 / 3.0
    summary = {row.mode: row for row in cost().summary()}
    assert summary["full"].replay_saving == 1 - 0.75 / 3.0
    assert summary["none"].replay_saving == 0.0


def test_every_reason_is_read_off_the_inputs() -> None:
    results = StudyResults(collect=collect(), cost=cost())
    descriptions = _row(results, "Fig 3.12 keyword description shorter than full by")
    assert "(1,200-1,500 characters on average per group)" in descriptions.why
    assert "only the slot values (40-90)" in descriptions.why
    scale = _row(results, "cost without caching, one held-out run")
    assert scale.why == "2 agents instead of 8; 0.50 simulated days instead of 15"
    assert "for 2 agents" in scale.ours
    volume = _row(results, "prompts per agent per simulated day")
    assert "first 12 simulated hours" in volume.why and "1 calls got no valid answer" in volume.why
    superior = _row(results, "prompts answered by the superior model")
    assert superior.why == "escalation is off in the small profile"
    # A study-sized run gives no reason of scale.
    big = cost().model_copy(update={"sim_days": 15.0})
    eight = collect().model_copy(
        update={"runs": [r.model_copy(update={"agents": [f"A{i}" for i in range(8)]})
                         for r in collect().runs]}
    )  # fmt: skip
    whole = StudyResults(collect=eight, cost=big)
    assert _row(whole, "cost without caching, one held-out run", context(STUDY_SIZED)).why == ""


def test_the_caveats_follow_the_run() -> None:
    small = report_sections(StudyResults(saturation=saturation()), context())[-1]
    text = "\n".join(small.lines)
    assert "the small profile is a scaled-down sample on the configured model" in text
    assert "Saturation points are read off our curves" in text
    assert "Candidates the modifier could not adapt" not in text  # nothing was judged
    assert "(small took the wall times above;" in text
    untimed = report_sections(StudyResults(), context(timings={}))[-1]
    assert "wall times" not in "\n".join(untimed.lines)
    big = report_sections(StudyResults(collect=collect()), context(STUDY_SIZED))[-1]
    text = "\n".join(big.lines)
    assert "runs at that scale on a test model" in text and "scaled-down" not in text
    assert "--profile full" not in text


def test_written_report_is_the_built_one_and_old_replay_files_load(tmp_path: Path) -> None:
    results = StudyResults(collect=collect(), saturation=saturation(), cost=cost())
    for name in ("collect", "saturation", "cost"):
        save_result(getattr(results, name), tmp_path / f"{name}.json")
    ctx = context()
    path = write_report(
        tmp_path,
        ctx.profile,
        llm=ctx.llm,
        judge_model=ctx.judge_model,
        embedder=ctx.embedder,
        timings=ctx.timings,
        command=ctx.command,
    )
    assert path.read_text(encoding="utf-8") == build_report(results, ctx)
    # A cost.json written before the replay was typed (floats for counts, no models) loads.
    old = json.loads((tmp_path / "cost.json").read_text())
    old.pop("models")
    old["replay"] = {"none": {"spent_usd": 3.0, "calls": 100.0}, "keyword": {"hits": 90.0}}
    loaded = CostResult.model_validate(old)
    assert loaded.replay["keyword"].hits == 90 and loaded.replay["none"].hits == 0


def test_a_step_run_again_records_its_time_and_command(tmp_path: Path) -> None:
    from experiments.__main__ import _record_rerun

    _record_rerun(tmp_path, "budget", 5.0, "python -m experiments budget")  # no study.json: no-op
    assert not (tmp_path / "study.json").exists()
    meta = {"llm": "m", "timings": {"collect": 1.0, "budget": 2.0}, "command": "reproduce"}
    (tmp_path / "study.json").write_text(json.dumps(meta))
    _record_rerun(tmp_path, "budget", 5.0, "python -m experiments budget")
    _record_rerun(tmp_path, "quality", 7.0, "python -m experiments quality")
    got = json.loads((tmp_path / "study.json").read_text())
    assert got["timings"] == {"collect": 1.0, "budget": 5.0, "quality": 7.0}
    assert got["reruns"] == ["python -m experiments budget", "python -m experiments quality"]
    assert got["command"] == "reproduce"


def test_ratings_asked_together_are_counted_from_the_runs() -> None:
    plain = report_sections(StudyResults(collect=collect()), context())[1]
    assert not any("Asked together" in line for line in plain.lines)
    col = collect()
    for r, (batched, batches) in zip(col.runs, ((40, 12), (35, 11)), strict=True):
        r.categories = {
            "importance score": CategoryCounts(asked=60, batched=batched, batches=batches),
            "finding location": CategoryCounts(asked=40),
        }
    data = report_sections(StudyResults(collect=col), context())[1]
    sentence = [line for line in data.lines if line.startswith("Asked together")]
    assert sentence == [
        "Asked together: 75 of 120 importance score calls (62.5%) were answered 3.3 to a "
        "prompt, in 23 prompts. Each is still recorded and cached as its own call; the model "
        "read one prompt per moment (`agent_core.rating_batch`)."
    ]


def test_a_collect_step_that_reused_earlier_runs_says_so() -> None:
    line = "- The runs simulated in earlier invocations are reused"
    assert line not in build_report(StudyResults(collect=collect()), context())
    col = collect()
    for r in col.runs:
        r.wall_seconds = 1000.0
    text = build_report(StudyResults(collect=col), context(timings={"collect": 12.5}))
    assert (
        "- The runs simulated in earlier invocations are reused: the collect step took 12.5 s "
        "here, the runs' own wall times add up to 2000 s (Data table)"
    ) in text


def test_the_machines_the_runs_were_simulated_on_are_named() -> None:
    def lines(machines: list[str]) -> list[str]:
        col = collect()
        for r, m in zip(col.runs, machines, strict=True):
            r.machine = m
        data = report_sections(StudyResults(collect=col), context())[1]
        return [line for line in data.lines if "simulated on" in line.lower()]

    assert lines(["", ""]) == []
    assert lines(["2026-11-24, X (AVX2), 2 cores"] * 2) == [
        "Every run was simulated on 2026-11-24, X (AVX2), 2 cores."
    ]
    assert lines(["2026-11-24, X (AVX2), 2 cores", "2026-11-25, Y (AVX-512), 2 cores"]) == [
        "Simulated on different machines or days: run 1 on 2026-11-24, X (AVX2), 2 cores; "
        "run 2 on 2026-11-25, Y (AVX-512), 2 cores."
    ]


def test_flaws_not_counted_are_shown_as_not_counted_not_as_none() -> None:
    from experiments._report import _answer_table

    col = collect()
    col.runs[0].categories = {"importance score": CategoryCounts(asked=5, echoes=1, degenerate=0)}
    # Run 2 was described before the flaws were counted: its counts are unknown, not zero.
    col.runs[1].categories = {"importance score": CategoryCounts(asked=5)}
    text = "\n".join(_answer_table(col))
    assert "| importance score | 10 | 0 (0.0%) | 0 | 0 | 0 | - | - |" in text
    col.runs[1].categories = {"importance score": CategoryCounts(asked=5, echoes=0, degenerate=2)}
    text = "\n".join(_answer_table(col))
    assert "| importance score | 10 | 0 (0.0%) | 0 | 0 | 0 | 1 | 2 |" in text
    assert "| all | 10 | 0 (0.0%) | 0 | 0 | 0 (0.0%) | 1 | 2 |" in text
