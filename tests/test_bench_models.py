"""The model benchmark's pure parts: figures and tables from recorded answers, one request.

The benchmark itself needs llama-server and minutes per model; these tests feed it recorded
per-prompt results and a fake client instead.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent_core import GROUPS, TownCall
from llmcache.llm import MODELS
from llmcache.testing import FakeOpenAI

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_models as bm  # noqa: E402  (a script beside the benchmarks, not a package)


def _result(group: str, valid: bool, latency: float, tokens: int) -> bm.PromptResult:
    return bm.PromptResult(
        category=f"a {group} category",
        group=group,
        agent="Alice",
        valid=valid,
        latency_s=latency,
        completion_tokens=tokens,
    )


RESULTS = [
    _result("finding location", True, 2.0, 10),
    _result("importance", True, 1.0, 4),
    _result("importance", False, 3.0, 8),
    _result("importance", True, 2.0, 6),
    _result("finding location", False, 4.0, 20),
]


def test_figures_per_group_and_overall() -> None:
    report = bm.summarise("smollm2-135m", RESULTS, wall_s=20.0)
    by_group = {g.group: g for g in report.groups}
    importance = by_group["importance"]
    assert (importance.prompts, importance.valid) == (3, 2)
    assert importance.valid_pct == pytest.approx(200 / 3)
    assert importance.mean_latency_s == pytest.approx(2.0)
    assert importance.completion_tokens_per_prompt == pytest.approx(6.0)
    location = by_group["finding location"]
    assert (location.prompts, location.valid, location.valid_pct) == (2, 1, 50.0)
    assert location.mean_latency_s == pytest.approx(3.0)
    # Groups come in the study's order, whatever order the prompts were asked in.
    assert [g.group for g in report.groups] == [g for g in GROUPS if g in by_group]
    assert (report.prompts, report.valid, report.valid_pct) == (5, 3, 60.0)
    assert report.prompts_per_s == pytest.approx(5 / 20.0)
    assert report.mean_latency_s == pytest.approx(12.0 / 5)
    assert report.completion_tokens_per_prompt == pytest.approx(48 / 5)


def test_registry_models_carry_their_size_and_licence() -> None:
    spec = MODELS["smollm2-135m"]
    report = bm.summarise("smollm2-135m", RESULTS, wall_s=1.0)
    assert (report.title, report.license, report.size_bytes) == (
        spec.title,
        spec.license,
        spec.size,
    )
    other = bm.summarise("/models/other.gguf", RESULTS, wall_s=1.0, size_bytes=123)
    assert (other.title, other.license, other.size_bytes) == ("other.gguf", "?", 123)


def test_no_prompts_and_unknown_groups_do_not_break_the_figures() -> None:
    empty = bm.summarise("smollm2-135m", [], wall_s=0.0)
    assert (empty.prompts, empty.valid_pct, empty.prompts_per_s, empty.groups) == (0, 0.0, 0.0, [])
    odd = bm.summarise("smollm2-135m", [_result("zzz", True, 1, 1), *RESULTS], wall_s=1.0)
    assert odd.groups[-1].group == "zzz"  # after the study's groups


def test_tables_show_every_group_every_model_and_the_totals() -> None:
    first = bm.summarise("smollm2-135m", RESULTS, wall_s=20.0, start_s=0.5)
    text = bm.model_table(first)
    lines = text.splitlines()
    assert lines[0].startswith("## smollm2-135m") and first.license in lines[0]
    rows = [line.split(" | ") for line in lines[3:-1]]
    assert [r[0].strip() for r in rows] == [g.group for g in first.groups] + ["all"]
    assert rows[-1][2].strip() == "60% (3/5)"
    assert "0.250 prompts/s" in lines[-1] and "server start 0.5 s" in lines[-1]
    second = bm.summarise("qwen2.5-coder-0.5b", RESULTS[:2], wall_s=4.0)
    comparison = bm.comparison_table([first, second]).splitlines()
    assert [line.split(" | ")[0].strip() for line in comparison[2:]] == [
        "smollm2-135m",
        "qwen2.5-coder-0.5b",
    ]
    assert comparison[3].split(" | ")[3].strip() == "100%"


def test_json_report_round_trips() -> None:
    report = bm.summarise("smollm2-135m", RESULTS, wall_s=20.0)
    bench = bm.BenchReport(machine=bm.machine_info(), settings={"prompts": 5}, models=[report])
    data = json.loads(bench.model_dump_json())
    assert data["models"][0]["groups"][0]["group"] == report.groups[0].group
    assert len(data["models"][0]["results"]) == len(RESULTS)
    assert bm.BenchReport.model_validate(data) == bench
    assert bm.header_line(bench.machine).startswith(f"# {bench.machine.date} | ")


def _importance_call() -> TownCall:
    return TownCall(
        category="importance score",
        agent="Alice",
        summary_block="Name: Alice",
        slots={"memory": "Alice is brushing her teeth"},
    )


def test_a_request_is_sent_as_the_town_sends_it_and_judged_by_the_call() -> None:
    call = _importance_call()
    answers = iter(['{"score": 3}', '{"score": 42}'])
    fake = FakeOpenAI(lambda request: next(answers))
    good = bm.ask(fake, call, "m", {"seed": 1})
    request = fake.calls[0]
    assert request["messages"] == call.messages()
    assert request["response_format"] == call.response_format()
    assert request["max_tokens"] == call.answer_tokens()
    assert (request["model"], request["seed"]) == ("m", 1)
    assert "temperature" not in request  # the town sends none
    assert good.valid and good.error is None and good.group == call.group
    assert good.completion_tokens > 0 and good.latency_s >= 0
    bad = bm.ask(fake, call, "m", {"seed": 1})
    assert not bad.valid and bad.error


def test_the_town_mix_carries_each_prompts_call() -> None:
    from town_mix import town_mix

    prompts = town_mix(0, 2, 2)
    assert prompts
    for prompt in prompts:
        call = prompt["call"]
        assert isinstance(call, TownCall)
        assert (prompt["category"], prompt["agent"]) == (call.category, call.agent)
        assert prompt["messages"] == call.messages()


def test_help_works_from_the_command_line() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_models.py"), "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "--model" in out and "--prompts" in out and "--json" in out


def test_a_markdown_table_pads_each_column_to_its_widest_cell() -> None:
    text = bm.markdown_table(["bed", "cut"], [["park", "48.6%"], ["town recording", "5%"]])
    assert text.splitlines() == [
        "| bed            | cut   |",
        "| -------------- | ----- |",
        "| park           | 48.6% |",
        "| town recording | 5%    |",
    ]
