"""``collect``: runs simulated side by side record what they record one after another, and the
standard profile's town asks every category."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_core import Simulation, load_agents, open_town_llm
from agent_core.testing import ScriptedLLM
from experiments import STANDARD, Profile
from experiments._collect import collect, run_paths
from llmcache.recording import read_records
from llmcache.testing import HashEmbedder


def _profile(**changes: object) -> Profile:
    base = Profile(
        name="side-by-side",
        runs=3,
        days=0.2,
        agents=["Alice Wilson", "Mary Oliver"],
        max_attempts=2,
        escalate=False,
    )
    return base.model_copy(update=changes)


def _collect(profile: Profile, out: Path) -> list[tuple[dict[str, int], list[str]]]:
    result = collect(
        profile,
        out,
        client=ScriptedLLM(seed=4),  # no faults: answers depend on the request only
        model="scripted",
        superior_model=None,
        llm_report={"description": "scripted"},
        embedder=HashEmbedder(),
        progress=False,
    )
    recorded = []
    for info in result.runs:
        dataset, _ = run_paths(out, info.run)
        lines = sorted(
            json.dumps([r.category, r.agent, r.messages, r.response], sort_keys=True)
            for r in read_records(dataset)
        )
        recorded.append(({c: n.asked for c, n in info.categories.items()}, lines))
    return recorded


@pytest.mark.parametrize("rating_batch", [1, 8])
def test_runs_side_by_side_record_the_same_runs(tmp_path: Path, rating_batch: int) -> None:
    # With ratings asked together, which ratings share a prompt is decided by what the cache
    # answered, never by which thread ran first, so the runs are the same too.
    one_by_one = _collect(_profile(rating_batch=rating_batch), tmp_path / "a")
    side_by_side = _collect(
        _profile(parallel_runs=3, concurrency=3, rating_batch=rating_batch), tmp_path / "b"
    )
    assert one_by_one == side_by_side
    assert len({json.dumps(lines) for _, lines in one_by_one}) == 3  # three different runs


def test_the_standard_town_asks_all_fourteen_categories() -> None:
    assert STANDARD.agents is None and STANDARD.days >= 1.5 and STANDARD.runs == 3
    llm = open_town_llm(ScriptedLLM(seed=1), model="scripted")
    try:
        sim = Simulation(llm, embedder=HashEmbedder(), seeds=load_agents(), seed=1)
        summary = sim.run(STANDARD.days)
    finally:
        llm.close()
    assert len(summary.agents) == 8
    assert len(summary.calls) == 14, sorted(summary.calls)


def test_a_run_recorded_by_another_town_is_simulated_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import experiments._collect as collect_module

    profile = _profile(runs=3, days=0.05)
    _collect(profile, tmp_path)
    summary = run_paths(tmp_path, 1)[1]
    recorded = json.loads(summary.read_text())["settings"]
    assert recorded["town"] == collect_module.town_fingerprint()
    before = summary.stat().st_mtime_ns
    _collect(profile, tmp_path)  # the same town: kept
    assert summary.stat().st_mtime_ns == before
    monkeypatch.setattr(collect_module, "town_fingerprint", lambda: "another town")
    _collect(profile, tmp_path)  # another town: simulated again
    assert json.loads(summary.read_text())["settings"]["town"] == "another town"


def test_a_run_counts_the_placeholder_echoes_and_degenerate_answers_it_accepted() -> None:
    # Runs recorded before the town refused such answers hold some; the report counts them.
    from experiments._collect import _flaws
    from llmcache.recording import RecordedCall

    def call(category: str, response: str | None) -> RecordedCall:
        return RecordedCall.model_construct(category=category, response=response)

    counts = _flaws(
        [
            call(
                "new actor statuses",
                '{"status": "<a short phrase, e.g. being used to make coffee>"}',
            ),
            call("new actor statuses", '{"status": "making coffee"}'),
            call("memory summary", '{"summary": "1, 2, 2, 2, 2, 1, 1, 1, 3, 3, 3, 1, 1, 2"}'),
            call("memory summary", None),  # no answer: nothing to count
            call("not a town category", '{"x": "HH:MM"}'),
        ]
    )
    assert counts["new actor statuses"] == [1, 0]
    assert counts["memory summary"] == [0, 1]
    assert "not a town category" not in counts
