"""The replay study's gpt-4o-mini development bed (``../shared/benchmarks/park_4omini_dev``):
settings learned on the bed's four tune agents, reported on exactly its four check agents, with
the shared agent's rows plus "exact repeats only", and the report's lines computed from them.
Skipped where the shared folder (or the committed standard runs the town bed needs) is absent.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from experiments._replay_report import replay_lines
from experiments._replay_study import (
    DEV_BED,
    EXACT_THRESHOLD,
    STATIC_THRESHOLD,
    TOWN_RUNS,
    replay_study,
)
from experiments._results import ReplayBed, ReplayStudyResult
from llmcache import EmbedMode
from llmcache.testing import HashEmbedder

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).parent / "data" / "replay_recording"

pytestmark = [
    pytest.mark.skipif(
        not DEV_BED.is_dir(),
        reason="the gpt-4o-mini bed (../shared/benchmarks/park_4omini_dev) is absent",
    ),
    pytest.mark.skipif(
        not (TOWN_RUNS / "run1.jsonl.gz").exists(), reason="the committed standard runs are absent"
    ),
]


def _park_calls() -> ModuleType:
    where = ROOT / "benchmarks" / "park_calls.py"
    spec = importlib.util.spec_from_file_location("park_calls", where)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> ReplayStudyResult:
    return replay_study(
        recording=FIXTURE,
        embedder=HashEmbedder(),
        embeddings=tmp_path_factory.mktemp("dev-bed"),
        park=None,
        modes=(EmbedMode.KEYWORD,),
        thresholds=(0.9, 0.98),
    )


def _dev(result: ReplayStudyResult) -> ReplayBed:
    beds = [b for b in result.beds if b.name == "development bed"]
    assert len(beds) == 1
    return beds[0]


def test_learned_on_the_tune_agents_and_reported_on_exactly_the_check_agents(
    study: ReplayStudyResult,
) -> None:
    park = _park_calls()
    bed = _dev(study)
    assert bed.model == park.BED_MODEL == "gpt-4o-mini"
    tune_calls = park.bed_calls(park.BED_TUNE_AGENTS)
    check_calls = park.bed_calls(park.BED_CHECK_AGENTS)
    assert (bed.tune_calls, bed.check_calls) == (len(tune_calls), len(check_calls))
    # Every configuration is reported on the check agents' calls, none of the tune agents'.
    for row in bed.rows:
        assert row.overall.calls == len(check_calls), row.config
        assert sum(f.calls for f in row.categories.values()) == len(check_calls)
    for agent in (*park.BED_TUNE_AGENTS, *park.BED_CHECK_AGENTS):
        assert agent in bed.split
    tuned_on, reported_on = bed.split.split("; reported on ")
    assert not any(a in tuned_on for a in park.BED_CHECK_AGENTS)
    assert not any(a in reported_on for a in park.BED_TUNE_AGENTS)


def test_the_shared_agents_rows_and_exact_repeats(study: ReplayStudyResult) -> None:
    bed = _dev(study)
    configs = [(r.mode, r.config) for r in bed.rows]
    assert configs == [
        ("keyword", "tuned"),
        ("keyword", "static"),
        ("keyword", "lead"),
        ("keyword", "exact"),
        ("keyword", "audit"),
        ("keyword", "prove"),
        ("keyword", "serve"),
        ("-", "random"),
    ]
    rows = {r.config: r for r in bed.rows}
    assert f"{EXACT_THRESHOLD:.3f}" in rows["exact"].settings["all"]
    assert rows["static"].settings["all"] == f"keyword mode, threshold {STATIC_THRESHOLD:g}"
    # A stricter threshold serves no more than the static default, serve mode the most.
    exact, static, serve = (rows[c].overall for c in ("exact", "static", "serve"))
    assert exact.served <= static.served <= serve.served
    assert exact.cost_cut <= serve.cost_cut
    # Repeats are served: the bed's agents rate the same memory text more than once.
    assert exact.served > 0
    # The other beds are as they were: the town's rows carry no exact row.
    town = study.beds[0]
    assert town.name == "town" and all(r.config != "exact" for r in town.rows)


def test_the_report_section_is_computed_from_the_run(study: ReplayStudyResult) -> None:
    bed = _dev(study)
    text = "\n".join(replay_lines(study))
    assert "### Development bed: gpt-4o-mini" in text
    rows = {r.config: r for r in bed.rows}
    exact, tuned = rows["exact"].overall, rows["tuned"].overall
    assert (
        f"keyword mode, exact repeats only (keyword mode, threshold {EXACT_THRESHOLD:.3f}): "
        f"cost cut {100 * exact.cost_cut:.1f}%, {exact.served} of {exact.calls} served"
    ) in text
    gain = 100 * (tuned.cost_cut - exact.cost_cut)
    if gain > 0:
        assert f"{gain:.1f} points more than exact repeats alone" in text
    elif gain < 0:
        assert f"{-gain:.1f} points less than exact repeats alone" in text
    assert f"| keyword | exact repeats only | all | {exact.calls} | {exact.served} |" in text
    # The check agents' serve-mode tables hold their first answer only (answers never cross
    # tables, and serve mode stores its misses alone): serve mode is the random answer there,
    # and the report says why rather than comparing the two.
    assert rows["serve"].categories == rows["random"].categories
    section = text.split("### Development bed")[1]
    # The proving guard's served answers, those of the very same prompt (served unproven) told.
    prove = rows["prove"]
    proved = [c for c, g in prove.guards.items() if g.moved_after[0] is not None]
    assert (
        f"keyword mode, proving guard: cost cut {100 * prove.overall.cost_cut:.1f}%, "
        f"{prove.overall.served} of {prove.overall.calls} served ({prove.overall.identical} of "
        "them answers stored for the very same prompt, served without a proof)"
    ) in section
    assert f"it proved a threshold for {len(proved)} of {len(prove.guards)} categories" in section
    assert "keyword serve mode served what a random same-table answer did" in section
    assert "each served its first answer to every later query" in section
    assert "serve mode cannot be told from a random" not in section


def test_without_the_shared_folder_the_bed_is_skipped_with_a_message(tmp_path: Path) -> None:
    said: list[str] = []
    result = replay_study(
        recording=FIXTURE,
        embedder=HashEmbedder(),
        park=None,
        dev_bed=tmp_path / "park_4omini_dev",
        modes=(),
        thresholds=(),
        progress=said.append,
    )
    assert [b.name for b in result.beds] == ["town"]
    assert any("gpt-4o-mini bed skipped" in line and "park_4omini_dev/" in line for line in said)
