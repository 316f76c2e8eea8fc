"""The replay study on a small committed recording (tests/experiments/data/replay_recording: two
agents of the committed standard runs, their answers one each; its provenance.json says how it
was cut), with the hash embedder: tuned on runs 1-2, reported on run 3, every configuration's
figures consistent with the calls, and the report's section computed from them."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from experiments._profiles import QUICK, STANDARD
from experiments._replay_report import headline, replay_lines
from experiments._replay_study import (
    LEAD_WORDS,
    RECORDING_EMBEDDINGS,
    STATIC_THRESHOLD,
    TOWN_RUNS,
    read_recording_dir,
    replay_study,
)
from experiments._report import StudyResults, report_sections
from experiments._results import ReplayStudyResult
from llmcache import EmbedMode
from llmcache.errors import ReplayInputError
from llmcache.replay import ReplayCall
from llmcache.testing import HashEmbedder

FIXTURE = Path(__file__).parent / "data" / "replay_recording"
ECHO = '{"score": "<an integer from 1 to 10>"}'  # the format's placeholder, copied
NUMBERS = '{"score": "1, 2, 3, 4, 5, 6, 7"}'  # a list of numbers

pytestmark = pytest.mark.skipif(
    not (TOWN_RUNS / "run1.jsonl.gz").exists(), reason="the committed standard runs are absent"
)


def _recording(tmp_path: Path) -> Path:
    """The fixture with two of run 3's importance answers broken (an echo, a degenerate one)
    and run 1's importance ratings asked twice (the second answer the same: pairs that agree)."""
    where = tmp_path / "recording"
    shutil.copytree(FIXTURE, where)
    runs, _ = read_recording_dir(where)
    broken = iter([ECHO, NUMBERS])
    rewritten: dict[int, list[ReplayCall]] = {}
    for n, calls in runs.items():
        out = []
        for call in calls:
            if call.category == "importance score" and n == 1:
                call = call.model_copy(update={"other_answers": [call.answer]})
            elif call.category == "importance score" and n == 3:
                replacement = next(broken, None)
                if replacement is not None:
                    call = call.model_copy(update={"answer": replacement})
            out.append(call)
        rewritten[n] = out
        with gzip.open(where / f"run{n}.jsonl.gz", "wt", encoding="utf-8") as f:
            for call in out:
                f.write(call.model_dump_json() + "\n")
    return where


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[ReplayStudyResult, Path]:
    recording = _recording(tmp_path_factory.mktemp("replay"))
    return replay_study(
        recording=recording, embedder=HashEmbedder(), park=None, dev_bed=None
    ), recording


def test_tuned_on_the_first_runs_and_reported_on_the_last(
    study: tuple[ReplayStudyResult, Path],
) -> None:
    result, recording = study
    runs, _ = read_recording_dir(recording)
    (town,) = result.beds
    assert town.model == "smollm2-135m-q4_0"  # named by the provenance
    assert town.requirements_found == town.tune_calls + town.check_calls
    assert (town.tune_calls, town.check_calls) == (len(runs[1]) + len(runs[2]), len(runs[3]))
    configs = [(r.mode, r.config) for r in town.rows]
    assert configs == [
        ("keyword", "tuned"),
        ("keyword", "static"),
        ("keyword", "lead"),
        ("keyword", "audit"),
        ("keyword", "prove"),
        ("keyword", "serve"),
        ("full", "tuned"),
        ("full", "static"),
        ("full", "audit"),
        ("full", "prove"),
        ("full", "serve"),
        ("-", "random"),
    ]
    # The leading words are a keyword-mode row only: a whole prompt leads with its template.
    leads = [r for r in town.rows if r.config == "lead"]
    assert [r.mode for r in leads] == ["keyword"]
    (lead,) = leads
    assert lead.lead_words == LEAD_WORDS
    assert lead.settings == {
        "all": f"keyword mode, threshold {STATIC_THRESHOLD:g}, the first {LEAD_WORDS} words exact"
    }
    assert all(r.lead_words == 0 for r in town.rows if r.config != "lead")
    categories = {c.category for c in runs[3]}
    for row in town.rows:
        # Every row reports run 3 only, per category and overall.
        assert row.overall.calls == len(runs[3]), row.config
        assert set(row.categories) == categories
        assert sum(f.calls for f in row.categories.values()) == row.overall.calls
        assert 0 <= row.overall.acceptable <= row.overall.served <= row.overall.calls
    # Runs 1-2 fill every table of run 3: serve mode and a random answer serve every query.
    for row in town.rows:
        if row.config in ("serve", "random"):
            assert row.overall.served == len(runs[3]) and row.overall.cost_cut == 1.0
        if row.config == "tuned":
            assert set(row.settings) == categories
    # The guards: a story per category over the whole stream (one seed), the audit guard's
    # asks its audits (counted in its figures), the proving guard's its explorations.
    for row in town.rows:
        if row.config in ("audit", "prove"):
            assert set(row.guards) == {c.category for calls in runs.values() for c in calls}
            assert all(len(g.asked) == 1 for g in row.guards.values())
            held_out = row.overall.audited if row.config == "audit" else row.overall.explored
            assert held_out <= sum(g.asked[0] for g in row.guards.values())
            assert row.asked_share is not None and 0.0 <= row.asked_share <= 1.0
            assert (row.asked_share > 0) == (held_out > 0)
        else:
            assert not row.guards
    # Serve mode (nearest) and a random answer differ in what they serve.
    serve = next(r for r in town.rows if r.config == "serve" and r.mode == "keyword")
    rnd = next(r for r in town.rows if r.config == "random")
    assert serve.overall.acceptable != rnd.overall.acceptable


def test_the_held_out_run_s_echoes_and_degenerate_answers_are_counted_and_sampled(
    study: tuple[ReplayStudyResult, Path],
) -> None:
    result, recording = study
    runs, _ = read_recording_dir(recording)
    assert result.placeholder_echoes["importance score"] == 1
    assert result.degenerate["importance score"] == 1
    assert sum(result.placeholder_echoes.values()) == 1 and sum(result.degenerate.values()) == 1
    assert result.answers == {
        c: sum(1 for x in runs[3] if x.category == c) for c in {x.category for x in runs[3]}
    }
    for category, samples in result.samples.items():
        assert len(samples) == 3
        assert {s.agent for s in samples} <= {c.agent for c in runs[3]}, category
    lines = "\n".join(replay_lines(result))
    assert "1 echo their format's placeholder" in lines and "1 are degenerate" in lines


def test_the_report_s_headline_is_the_replay_study_s(
    study: tuple[ReplayStudyResult, Path], tmp_path: Path
) -> None:
    result, _ = study
    from experiments._plots import plot_replay_study

    figure = plot_replay_study(result, tmp_path / "replay_study.png")
    assert figure.stat().st_size > 1000
    town = result.beds[0]
    best = max((r for r in town.rows if r.config == "tuned"), key=lambda r: r.overall.cost_cut)
    top = headline(result)
    assert top is not None and town.model in top
    assert f"{100 * best.overall.cost_cut:.1f}%" in top and f"{best.mode} mode" in top
    from experiments._report import ReportContext

    ctx = ReportContext(profile=QUICK, llm="m", judge_model="j", embedder="e", command="c")
    sections = report_sections(StudyResults(replay_study=result), ctx)
    assert sections[1].title.startswith("Replay study")
    text = sections[1].render()
    assert text.count("**Headline**") == 1 and top in text
    # The goal sentence follows the figures: the committed SmolLM2 answers miss it.
    assert "misses the goal" in text or "meets the goal" in text
    # Serve mode is set beside a random answer in one of three sentences, by their intervals.
    rnd = next(r for r in town.rows if r.config == "random").overall
    for serve in (r for r in town.rows if r.config == "serve"):
        s = serve.overall
        assert s.excess_low is not None and s.excess_upper is not None
        assert rnd.excess_low is not None and rnd.excess_upper is not None
        word = (
            "worse than"
            if s.excess_low > rnd.excess_upper
            else "better than"
            if s.excess_upper < rnd.excess_low
            else "cannot be told from"
        )
        assert f"{serve.mode} serve mode {word} a random same-table answer" in text
    for row in town.rows:
        for name, f in row.categories.items():
            if f.served:
                assert f"| {name} | {f.calls} | {f.served} |" in text
    # The lead row is read beside the static default, in the headline and in its own line.
    lead = next(r for r in town.rows if r.config == "lead")
    static = next(r for r in town.rows if r.config == "static" and r.mode == "keyword")
    assert f"| keyword | static default, first {LEAD_WORDS} words exact | all |" in text
    assert (
        f"keyword mode, static default, first {LEAD_WORDS} words exact: "
        f"cost cut {100 * lead.overall.cost_cut:.1f}%"
    ) in text
    assert f"the static default alone: {100 * static.overall.cost_cut:.1f}%" in text
    if best.mode == "keyword":
        assert f"the same with the first {LEAD_WORDS} words exact" in top


def test_a_study_s_figures_follow_the_model_s_own_second_answers(tmp_path: Path) -> None:
    # Run 3 asked twice with the second answer far off: the model disagrees with itself, and
    # the excess of the same served answers falls by as much.
    where = tmp_path / "rec"
    shutil.copytree(FIXTURE, where)
    runs, _ = read_recording_dir(where)
    with gzip.open(where / "run3.jsonl.gz", "wt", encoding="utf-8") as f:
        for call in runs[3]:
            other = '{"score": 1}' if call.category == "importance score" else call.answer
            f.write(call.model_copy(update={"other_answers": [other]}).model_dump_json() + "\n")
    spread = replay_study(
        recording=where, embedder=HashEmbedder(), park=None, dev_bed=None, modes=(), thresholds=()
    )
    rnd = spread.beds[0].rows[-1].categories["importance score"]
    assert rnd.pairs >= sum(1 for c in runs[3] if c.category == "importance score")
    assert rnd.agreement is not None and rnd.agreement < 1.0


def test_vectors_shipped_with_a_recording_are_not_embedded_again(tmp_path: Path) -> None:
    recording = _recording(tmp_path)
    kwargs = {"recording": recording, "embedder": HashEmbedder(), "park": None, "dev_bed": None}
    small = {"modes": (EmbedMode.KEYWORD,), "thresholds": (0.9,)}
    first = replay_study(embeddings=tmp_path / "first", **kwargs, **small)
    assert first.embedded and first.embeddings_at_hand == 0
    # The first run's store, shipped beside the recording: a new directory embeds nothing.
    shutil.copytree(tmp_path / "first", recording / RECORDING_EMBEDDINGS)
    again = replay_study(embeddings=tmp_path / "again", **kwargs, **small)
    assert (again.embedded, again.embeddings_at_hand) == (0, first.embedded)
    assert [r.overall for r in again.beds[0].rows] == [r.overall for r in first.beds[0].rows]
    assert "0 texts embedded" in "\n".join(replay_lines(again))
    # ... and keeps them in its own store, so the next run there needs no recording's.
    third = replay_study(embeddings=tmp_path / "again", **kwargs, **small)
    assert (third.embedded, third.embeddings_at_hand) == (0, first.embedded)


def test_a_malformed_recording_is_refused_with_its_line(tmp_path: Path) -> None:
    where = tmp_path / "rec"
    shutil.copytree(FIXTURE, where)
    with gzip.open(where / "run2.jsonl.gz", "at", encoding="utf-8") as f:
        f.write(json.dumps({"category": "importance score", "answer": "3"}) + "\n")
    with pytest.raises(ReplayInputError, match="no 'messages'"):
        read_recording_dir(where)
    with pytest.raises(FileNotFoundError, match="holds no recording"):
        read_recording_dir(tmp_path)
    # A recording asked for by name is never replaced by the town's own answers.
    with pytest.raises(FileNotFoundError, match="holds no recording"):
        replay_study(
            recording=tmp_path / "missing", embedder=HashEmbedder(), park=None, dev_bed=None
        )


def test_only_the_quick_profile_leaves_the_live_budget_step_out() -> None:
    assert not QUICK.runs_step("budget") and QUICK.runs_step("replay_study")
    assert STANDARD.runs_step("budget") and STANDARD.runs_step("replay_study")
    assert QUICK.replay_modes == ["keyword"] and STANDARD.replay_modes == ["keyword", "full"]


def test_calls_not_found_in_the_town_s_runs_are_said(study: tuple[ReplayStudyResult, Path]) -> None:
    result, _ = study
    town = result.beds[0]
    assert "were found in the town's runs" not in "\n".join(replay_lines(result))
    fewer = result.model_copy(update={"beds": [town.model_copy(update={"requirements_found": 7})]})
    calls = town.tune_calls + town.check_calls
    assert f"Only 7 of the {calls} calls were found" in "\n".join(replay_lines(fewer))


def test_a_town_run_converts_to_the_calls_of_the_recorded_categories() -> None:
    from experiments._data import load_run
    from experiments._replay_study import RECORDED_CATEGORIES, town_calls

    prompts = load_run(TOWN_RUNS / "run1.jsonl.gz", 1)
    calls = town_calls(prompts)
    kept = [p for p in prompts if p.category in RECORDED_CATEGORIES]
    assert [(c.category, c.agent, c.answer) for c in calls] == [
        (p.category, p.agent, p.response) for p in kept
    ]
    assert all(
        c.model == p.model and c.messages == p.messages for c, p in zip(calls, kept, strict=True)
    )
    assert len(town_calls(prompts, None)) == len(prompts)
    # The committed fixture is such a conversion, cut to two agents (its provenance says how).
    runs, provenance = read_recording_dir(FIXTURE)
    converted = {(c.agent, json.dumps(c.messages), c.answer) for c in calls}
    assert all((c.agent, json.dumps(c.messages), c.answer) in converted for c in runs[1])
    assert provenance["model"] == calls[0].model
