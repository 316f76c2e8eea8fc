"""End to end: the town through a real CachedLLM over the ScriptedLLM double, recorded to JSONL;
reproducibility; the cache's hit path; the command line."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_core import Requirements, RunSummary, Simulation, TownLLM, load_agents, template
from agent_core.__main__ import main
from llmcache import Mode
from llmcache.recording import RecordedCall, read_records
from llmcache.testing import HashEmbedder

MakeLLM = Callable[..., TownLLM]


def run(llm: TownLLM, days: float, seed: int = 7, agents: list[str] | None = None) -> RunSummary:
    seeds = load_agents(names=agents) if agents else None
    return Simulation(llm, embedder=HashEmbedder(), seeds=seeds, seed=seed).run(days)


def recorded(llm: TownLLM) -> Path:
    assert llm.llm.recorder is not None
    return llm.llm.recorder.path


def check_valid(rec: RecordedCall) -> None:
    """Raise unless the recorded answer is a valid answer to its own query."""
    requirements = Requirements.model_validate(rec.metadata.get("requirements") or {})
    template(rec.category).parse(rec.response or "", requirements)


def test_one_day_of_eight_agents_records_every_category(make_llm: MakeLLM) -> None:
    llm = make_llm(record=True, malformed_rate=0.05, seed=3)
    summary = run(llm, days=1)
    calls = read_records(recorded(llm))
    everything = read_records(recorded(llm), include_invalid=True)
    assert {r.category for r in calls} == {t for t in summary.calls}
    assert len(summary.calls) == 14  # every category occurs within one day
    assert Counter(r.category for r in calls) == Counter(summary.calls)
    assert summary.failed == {}
    for rec in calls:
        assert rec.kind == "call" and not rec.resubmission
        assert rec.metadata["group"] == template(rec.category).group
        assert rec.metadata["sim_time"].startswith("2024-02-1")
        assert rec.metadata["observed_actors"] >= 1
        assert rec.agent in summary.agents
        assert rec.keywords
        check_valid(rec)  # never an invalid answer recorded as valid
    invalid = [r for r in everything if r.kind == "invalid_attempt"]
    assert invalid and all(r.resubmission and not r.valid for r in invalid)
    for rec in invalid:
        with pytest.raises(ValueError):
            check_valid(rec)
    assert sum(summary.resubmissions.values()) == len(invalid)


def test_observed_actors_are_tracked_and_only_grow(make_llm: MakeLLM) -> None:
    summary = run(make_llm(), days=1, agents=["Alice Wilson", "Mary Oliver"])
    for name in summary.agents:
        series = [p.observed_actors for p in summary.observed_history if p.agent == name]
        assert len(series) == 24
        assert series == sorted(series)
        assert series[-1] == summary.observed_actors[name] > series[0]


def _trace(path: Path) -> list[tuple[Any, ...]]:
    return [
        (r.category, r.agent, json.dumps(r.messages), r.response, r.metadata.get("sim_time"))
        for r in read_records(path, include_invalid=True)
    ]


def test_runs_are_reproducible_given_the_seed(make_llm: MakeLLM) -> None:
    agents = ["Alice Wilson", "Ethan Wilson", "Noah Smith"]
    traces = []
    for seed in (5, 5, 6):
        llm = make_llm(record=True, malformed_rate=0.05)
        run(llm, days=0.5, seed=seed, agents=agents)
        traces.append(_trace(recorded(llm)))
    assert traces[0] == traces[1]
    assert traces[0] != traces[2]


def test_online_cache_hits_without_serving_invalid_answers(make_llm: MakeLLM) -> None:
    llm = make_llm(mode=Mode.ONLINE, record=True, threshold=0.8, malformed_rate=0.05)
    summary = run(llm, days=1, agents=["Alice Wilson", "Ethan Wilson", "Mary Oliver"])
    calls = read_records(recorded(llm))
    hits = Counter(r.modifier for r in calls if r.outcome == "hit")
    assert hits["read"] > 0 and hits["choose"] > 0 and hits["revise"] > 0
    for rec in calls:
        if template(rec.category).bypass:
            assert rec.outcome == "bypass"
        check_valid(rec)
    assert summary.failed == {}


def test_command_line_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "runs" / "cli.jsonl"
    args = [
        "run",
        "--days",
        "0.25",
        "--seed",
        "2",
        "--out",
        str(out),
        "--quiet",
        "--agents",
        "Alice",
        "Ethan Wilson",
        "--malformed-rate",
        "0.1",
    ]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "prompts in 0.25 simulated days" in printed
    calls = read_records(out)
    assert {r.agent for r in calls} == {"Alice Wilson", "Ethan Wilson"}
    summary = RunSummary.model_validate_json(out.with_suffix(".summary.json").read_text())
    assert summary.total_calls == len(calls)
    with pytest.raises(SystemExit):
        main(args)  # never overwrite a dataset by accident
    # Every call carried its query's own schema, answer cap and sampling seed (drawn from
    # --seed), outside the table key; the summary table says how each category was answered.
    assert all(set(r.constraints) == {"response_format", "max_tokens", "seed"} for r in calls)
    assert all("response_format" not in r.params for r in calls)
    assert "first try" in printed and "fell back" in printed
    assert (
        sum(summary.first_try.values()) + sum(summary.resubmitted.values()) == summary.total_calls
    )

    plain = tmp_path / "runs" / "plain.jsonl"
    assert main([*args[:6], str(plain), *args[7:], "--template-schemas"]) == 0
    plain_calls = read_records(plain)
    assert plain_calls and all(set(r.constraints) == {"seed"} for r in plain_calls)
    assert all("response_format" in r.params and "max_tokens" in r.params for r in plain_calls)


def test_command_line_lists_templates(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["templates", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 14
    assert {r["modifier"] for r in rows} == {"read", "choose", "revise", "bypass"}


def test_command_line_leaves_every_spec_but_scripted_to_llmcache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import argparse
    import contextlib

    from agent_core.__main__ import _client

    for name in ("LLMCACHE_CONFIG", "LLMCACHE_MODEL", "LLMCACHE_SUPERIOR_MODEL", "LLMCACHE_LLM"):
        monkeypatch.delenv(name, raising=False)
    out = str(tmp_path / "x.jsonl")
    # llmcache's own refusals, named after the option that carried them.
    with pytest.raises(SystemExit, match=r"--llm anthropic: .*local, openai, url"):
        main(["run", "--days", "0.1", "--llm", "anthropic", "--embedder", "hash", "--out", out])
    with pytest.raises(SystemExit, match="LLMCACHE_MODEL"):
        main(["run", "--days", "0.1", "--llm", "http://127.0.0.1:9/v1", "--embedder", "hash",
              "--out", out])  # fmt: skip
    args = argparse.Namespace(llm="http://127.0.0.1:9/v1", model="m", superior_model=None)
    with contextlib.ExitStack() as stack:
        client, model, superior = _client(args, stack)
        assert str(client.base_url).startswith("http://127.0.0.1:9/v1")
        assert (model, superior) == ("m", None)  # one model: nothing to escalate to
