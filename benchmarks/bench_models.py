"""Model choice by measurement: every model answers the same town prompts, one at a time.

    python benchmarks/bench_models.py --model smollm2-135m --model qwen2.5-coder-0.5b
    python benchmarks/bench_models.py --model smollm2-135m --prompts 24 --json models.json
    python benchmarks/bench_models.py --model path/to/other.gguf     # a file not in the registry

For each ``--model`` a fresh :class:`~llmcache.llm.LocalServer` (the town's defaults) answers
the same prompts of the town mix (``town_mix.py``: one simulated day of the bundled town, the
categories in that day's shares), sequentially, each sent as the town sends it on a cache miss:
the call's messages, its own JSON schema and its own ``max_tokens`` (``agent_core.llm``'s
``town_request`` and ``town_options``). Per prompt it records whether the answer is valid at the
first try -- the call's own parser (``TownCall.parse``) accepts it, as the town's validator
would -- the latency and the completion tokens. It prints, per model, valid-first-try % per
analysis group and overall prompts/s, mean latency and completion tokens per prompt, with the
model's size and licence from the registry; ``--json`` writes the same figures and every
prompt's record.

The prompt mix is fixed (the town's seed and the mix's own shuffle), so every model, and every
run, gets identical prompts; ``--pass-index`` draws another sample of the same shares. The town
sends no ``temperature``, so neither does this benchmark unless ``--temperature`` is given; a
fixed sampling ``seed`` is sent with each request so a rerun reproduces the answers. Figures
depend on how busy the machine is: the header prints the load average at start and end.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import openai
from pydantic import BaseModel

from agent_core import GROUPS, TownCall
from agent_core.llm import town_options, town_request
from llmcache.llm import DEFAULT_MODEL, MODELS, LocalServer, cpu_model, find_model, vector_isa

Prompt = dict[str, Any]

#: Prompts per model by default: about 3-5 minutes for SmolLM2-135M on a shared 2-core machine.
DEFAULT_PROMPTS = 80


# ----------------------------------------------------------------------------- records


class PromptResult(BaseModel):
    """One prompt's answer, as the benchmark recorded it."""

    category: str
    group: str
    agent: str
    valid: bool
    """The call's own parser accepted the answer (valid at the first try)."""
    latency_s: float
    completion_tokens: int = 0
    prompt_tokens: int = 0
    finish_reason: str | None = None
    error: str | None = None
    """Why the answer is invalid (the parser's message, or the request's error)."""


class GroupFigures(BaseModel):
    group: str
    prompts: int
    valid: int
    valid_pct: float
    mean_latency_s: float
    completion_tokens_per_prompt: float


class ModelReport(BaseModel):
    """One model's figures over the prompt mix."""

    model: str
    title: str
    license: str
    size_bytes: int | None
    start_s: float | None
    prompts: int
    valid: int
    valid_pct: float
    wall_s: float
    prompts_per_s: float
    mean_latency_s: float
    completion_tokens_per_prompt: float
    groups: list[GroupFigures]
    results: list[PromptResult]


class MachineInfo(BaseModel):
    date: str
    cpu: str
    cores: int
    load_average: tuple[float, float, float]
    # The widest vector instructions the CPU offers: onnxruntime and pgvector choose their
    # kernels by it at run time, so the same model runs at different speeds on one CPU class.
    vector_isa: str = "unknown"


class BenchReport(BaseModel):
    machine: MachineInfo
    settings: dict[str, Any]
    models: list[ModelReport]
    load_average_end: tuple[float, float, float] | None = None


# ----------------------------------------------------------------------------- pure figures


def _pct(part: int, whole: int) -> float:
    return 100.0 * part / whole if whole else 0.0


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def _group_order(group: str) -> tuple[int, str]:
    # The study's order for the town's groups; anything else after them, alphabetically.
    return (GROUPS.index(group), "") if group in GROUPS else (len(GROUPS), group)


def summarise(
    model: str,
    results: Sequence[PromptResult],
    wall_s: float,
    *,
    start_s: float | None = None,
    title: str | None = None,
    license: str | None = None,
    size_bytes: int | None = None,
) -> ModelReport:
    """A model's figures from its per-prompt records and the wall time they took.

    Registry models fill ``title``, ``license`` and ``size_bytes`` from :data:`MODELS` unless
    given; a model outside the registry (a ``.gguf`` path) shows ``?`` for what it cannot know.
    """
    spec = MODELS.get(model)
    by_group: dict[str, list[PromptResult]] = {}
    for result in results:
        by_group.setdefault(result.group, []).append(result)
    groups = [
        GroupFigures(
            group=group,
            prompts=len(rows),
            valid=sum(r.valid for r in rows),
            valid_pct=_pct(sum(r.valid for r in rows), len(rows)),
            mean_latency_s=_mean([r.latency_s for r in rows]),
            completion_tokens_per_prompt=_mean([r.completion_tokens for r in rows]),
        )
        for group, rows in sorted(by_group.items(), key=lambda item: _group_order(item[0]))
    ]
    valid = sum(r.valid for r in results)
    return ModelReport(
        model=model,
        title=title or (spec.title if spec else Path(model).name),
        license=license or (spec.license if spec else "?"),
        size_bytes=size_bytes if size_bytes is not None else (spec.size if spec else None),
        start_s=start_s,
        prompts=len(results),
        valid=valid,
        valid_pct=_pct(valid, len(results)),
        wall_s=wall_s,
        prompts_per_s=len(results) / wall_s if wall_s > 0 else 0.0,
        mean_latency_s=_mean([r.latency_s for r in results]),
        completion_tokens_per_prompt=_mean([r.completion_tokens for r in results]),
        groups=groups,
        results=list(results),
    )


def _size(size_bytes: int | None) -> str:
    if size_bytes is None:
        return "?"
    if size_bytes >= 1 << 30:
        return f"{size_bytes / (1 << 30):.1f} GiB"
    return f"{size_bytes / (1 << 20):.0f} MiB"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table: columns padded to their widest cell."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [" | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("-+-".join("-" * w for w in widths))
    lines += [
        " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    return "\n".join(lines)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table, columns padded to their widest cell (to paste into the docs)."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
        for row in [header, ["-" * w for w in widths], *rows]
    )


GROUP_HEADER = ["group", "n", "valid 1st try", "mean latency s", "completion tok/prompt"]


def model_table(report: ModelReport) -> str:
    """One model's table: a row per analysis group, a row for all prompts, then its totals."""
    rows = [
        [
            g.group,
            str(g.prompts),
            f"{g.valid_pct:.0f}% ({g.valid}/{g.prompts})",
            f"{g.mean_latency_s:.2f}",
            f"{g.completion_tokens_per_prompt:.1f}",
        ]
        for g in report.groups
    ]
    rows.append(
        [
            "all",
            str(report.prompts),
            f"{report.valid_pct:.0f}% ({report.valid}/{report.prompts})",
            f"{report.mean_latency_s:.2f}",
            f"{report.completion_tokens_per_prompt:.1f}",
        ]
    )
    start = f", server start {report.start_s:.1f} s" if report.start_s is not None else ""
    lines = [
        f"## {report.model}: {report.title}, {_size(report.size_bytes)}, licence {report.license}",
        table(GROUP_HEADER, rows),
        f"{report.prompts_per_s:.3f} prompts/s ({report.prompts} prompts in "
        f"{report.wall_s:.1f} s{start})",
    ]
    return "\n".join(lines)


COMPARISON_HEADER = [
    "model", "size", "licence", "valid 1st try", "prompts/s", "mean latency s", "tok/prompt",
]  # fmt: skip


def comparison_table(reports: Sequence[ModelReport]) -> str:
    """One row per model, for the choice between them."""
    return table(
        COMPARISON_HEADER,
        [
            [
                r.model,
                _size(r.size_bytes),
                r.license,
                f"{r.valid_pct:.0f}%",
                f"{r.prompts_per_s:.3f}",
                f"{r.mean_latency_s:.2f}",
                f"{r.completion_tokens_per_prompt:.1f}",
            ]
            for r in reports
        ],
    )


def machine_info() -> MachineInfo:
    return MachineInfo(
        date=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        cpu=cpu_model(),
        cores=os.cpu_count() or 1,
        load_average=os.getloadavg(),
        vector_isa=vector_isa(),
    )


def header_line(info: MachineInfo) -> str:
    load = ", ".join(f"{x:.2f}" for x in info.load_average)
    return (
        f"# {info.date} | {info.cpu} ({info.vector_isa}) | {info.cores} cores | load average {load}"
    )


# ----------------------------------------------------------------------------- measuring


def bench_prompts(prompts: int, agents: int, pass_index: int) -> list[Prompt]:
    """At least ``prompts`` town prompts (rounded up to a multiple of ``agents``), each with its
    ``TownCall`` under ``"call"``; the same for every model."""
    from town_mix import town_mix  # beside this file; runs a simulated day on first use

    return town_mix(pass_index, agents, max(1, math.ceil(prompts / max(1, agents))))


def request_for(call: TownCall, model: str, params: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``create`` the town sends for ``call`` on a cache miss."""
    return {**town_request(call, model), **town_options(call).constraints, **params}


def ask(client: Any, call: TownCall, model: str, params: dict[str, Any]) -> PromptResult:
    """Send one call and judge its answer with the call's own parser."""
    started = time.perf_counter()
    common = {"category": call.category, "group": call.group, "agent": call.agent}
    try:
        reply = client.chat.completions.create(**request_for(call, model, params))
    except openai.APIError as exc:
        return PromptResult(
            **common, valid=False, latency_s=time.perf_counter() - started, error=str(exc)[:300]
        )
    latency = time.perf_counter() - started
    choice = reply.choices[0] if reply.choices else None
    content = (choice.message.content if choice else None) or ""
    error: str | None = None
    try:
        call.parse(content)
    except ValueError as exc:
        error = str(exc)[:300]
    usage = reply.usage
    return PromptResult(
        **common,
        valid=error is None,
        latency_s=latency,
        completion_tokens=usage.completion_tokens if usage else 0,
        prompt_tokens=usage.prompt_tokens if usage else 0,
        finish_reason=choice.finish_reason if choice else None,
        error=error,
    )


def run_model(model: str, prompts: Sequence[Prompt], params: dict[str, Any]) -> ModelReport:
    """One fresh server for ``model``; every prompt in order, one at a time."""
    size = None if model in MODELS else find_model(model).stat().st_size
    results: list[PromptResult] = []
    with LocalServer(model) as server:
        client = server.client()
        started = time.perf_counter()
        for i, prompt in enumerate(prompts, 1):
            result = ask(client, prompt["call"], server.model, params)
            results.append(result)
            mark = "ok " if result.valid else "BAD"
            _say(
                f"  {model} {i:>4}/{len(prompts)} {mark} {result.latency_s:6.2f}s "
                f"{result.completion_tokens:>4} tok  {result.category}"
            )
        wall = time.perf_counter() - started
        return summarise(model, results, wall, start_s=server.start_seconds, size_bytes=size)


def _say(text: str = "") -> None:
    print(text, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"registered models: {', '.join(MODELS)}",
    )
    parser.add_argument(
        "--model",
        action="append",
        help=f"a registered model name or a .gguf path; repeat for several ({DEFAULT_MODEL})",
    )
    parser.add_argument(
        "--prompts",
        type=int,
        default=DEFAULT_PROMPTS,
        help=f"prompts per model, rounded up to a multiple of --agents (default {DEFAULT_PROMPTS})",
    )
    parser.add_argument("--agents", type=int, default=8, help="agents the prompts come from")
    parser.add_argument(
        "--pass-index", type=int, default=0, help="which sample of the town mix (default 0)"
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="sent with every request; default: none, as the town sends none",
    )
    parser.add_argument("--seed", type=int, default=1, help="sampling seed sent with each request")
    parser.add_argument("--json", help="write the figures and every prompt's record here")
    args = parser.parse_args(argv)
    models: list[str] = args.model or [DEFAULT_MODEL]

    info = machine_info()
    _say(header_line(info))
    prompts = bench_prompts(args.prompts, args.agents, args.pass_index)
    params: dict[str, Any] = {"seed": args.seed}
    if args.temperature is not None:
        params["temperature"] = args.temperature
    counts = Counter(p["category"] for p in prompts)
    _say(
        f"{len(prompts)} town prompts per model (pass {args.pass_index}, "
        f"{len({p['agent'] for p in prompts})} agents): "
        + ", ".join(f"{category} {n}" for category, n in counts.most_common())
    )
    _say(f"request parameters beyond the town's: {params}")
    reports: list[ModelReport] = []
    for model in models:
        _say(f"\n{model}: {find_model(model)}")
        reports.append(run_model(model, prompts, params))
    _say()
    for report in reports:
        _say(model_table(report) + "\n")
    if len(reports) > 1:
        _say(comparison_table(reports) + "\n")
    end = os.getloadavg()
    _say(f"load average at end: {', '.join(f'{x:.2f}' for x in end)}")
    if args.json:
        settings = {k: v for k, v in vars(args).items() if k not in ("json", "model")}
        bench = BenchReport(
            machine=info,
            settings=settings | {"models": models},
            models=reports,
            load_average_end=end,
        )
        Path(args.json).write_text(bench.model_dump_json(indent=2) + "\n", encoding="utf-8")
        _say(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
