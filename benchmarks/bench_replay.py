"""Server settings A/B on a recorded run's own prompts: the same calls, several thread counts
or constraints.

    python benchmarks/bench_replay.py runs/demo.jsonl --threads 1,2
    python benchmarks/bench_replay.py runs/demo.jsonl --category "high-level insights" \
        --category "importance score" --per-category 6 --threads 1,2 --rounds 2
    python benchmarks/bench_replay.py runs/demo.jsonl --threads 2 --constraints recorded,none

A dataset written by ``python -m agent_core run`` (or ``experiments`` collect) keeps every
call's messages, model and constraints (the query's JSON schema and ``max_tokens``). This
benchmark sends the first ``--per-category`` calls of each chosen category again, one at a
time, exactly as recorded (plus a fixed sampling ``seed``), to a fresh
:class:`~llmcache.llm.LocalServer` per configuration (generation threads as given, prompt
threads ``--threads-batch``, by default every core). Unlike two town runs, which diverge as soon
as one answer differs, every configuration gets identical prompts, so the ratio of wall times
is the effect of the setting alone. Configurations alternate within each round, so a change in
the machine's load hits them alike; the header prints the load average.

``--constraints`` sends each call under its recorded JSON schema, under llama.cpp's generic
JSON grammar (``json_object``) or unconstrained (``none``): what constrained decoding costs.
Answers then differ in length, so compare the generation speed, not the wall times.

``--biases`` chooses what the client adds on the way: ``none`` (a plain client) or ``end``
(:class:`~llmcache.llm.JSONEndTransport`'s end-of-answer bias, as ``LocalServer.client()``
sends).

Per configuration and round: wall seconds, completion tokens, the server's own generation
speed (its ``timings``) and how many answers the recorded query accepts (its town call's
validator); then each configuration's total wall time as a ratio of the first's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx2
import openai
from bench_models import header_line, machine_info  # a sibling script (benchmarks/ is on the path)

from agent_core import TownCall
from llmcache.llm import JSONEndTransport, LocalServer


def load_calls(path: Path, categories: list[str], per_category: int) -> list[dict[str, Any]]:
    """The first ``per_category`` recorded calls of each category (all categories if none)."""
    picked: dict[str, list[dict[str, Any]]] = defaultdict(list)
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            if record.get("kind") != "call" or not record.get("messages"):
                continue
            category = record.get("category") or ""
            if categories and category not in categories:
                continue
            if len(picked[category]) < per_category:
                picked[category].append(record)
    return [record for group in picked.values() for record in group]


#: How a replayed call is constrained: as recorded (the query's own JSON schema), by any JSON
#: (llama.cpp's generic JSON grammar), or not at all -- what the grammar itself costs.
CONSTRAINTS = ("recorded", "json_object", "none")


def request_constraints(record: dict[str, Any], constraint: str) -> dict[str, Any]:
    """The recorded call's constraints (``response_format``, ``max_tokens``), with its response
    format replaced as ``constraint`` says; ``max_tokens`` stays, so answers stay bounded."""
    if constraint not in CONSTRAINTS:
        raise ValueError(f"constraint must be one of {CONSTRAINTS}, not {constraint!r}")
    out = dict(record.get("constraints") or {})
    if constraint == "json_object":
        out["response_format"] = {"type": "json_object"}
    elif constraint == "none":
        out.pop("response_format", None)
    return out


#: What the client adds to each request on its way to the server.
BIASES = ("none", "end")


def _valid(record: dict[str, Any], content: str) -> bool:
    try:
        TownCall.from_record(record).parse(content)
    except ValueError:
        return False
    return True


def replay(
    server: LocalServer,
    calls: list[dict[str, Any]],
    seed: int,
    constraint: str = "recorded",
    bias: str = "none",
) -> dict[str, float]:
    # The router now and then drops a kept-alive connection before a request reaches it; the
    # client's retries resend such a request (it was never processed).
    http_client = None
    if bias != "none":
        transport = JSONEndTransport(server.root_url)
        http_client = httpx2.Client(transport=transport, timeout=600.0)
    client = openai.OpenAI(
        base_url=server.base_url, api_key="local", max_retries=2, http_client=http_client
    )
    valid = 0
    tokens = 0
    generated_ms = 0.0
    generated_n = 0
    started = time.perf_counter()
    for record in calls:
        constraints = request_constraints(record, constraint)
        params = {k: v for k, v in (record.get("params") or {}).items() if k != "model"}
        completion = client.chat.completions.create(
            model=server.models[0],
            messages=record["messages"],
            seed=seed,
            **{**params, **constraints},
        )
        tokens += completion.usage.completion_tokens if completion.usage else 0
        valid += _valid(record, completion.choices[0].message.content or "")
        timings = (completion.model_extra or {}).get("timings") or {}
        generated_ms += float(timings.get("predicted_ms", 0.0))
        generated_n += int(timings.get("predicted_n", 0))
    wall = time.perf_counter() - started
    speed = generated_n / (generated_ms / 1000) if generated_ms else float("nan")
    return {"wall": wall, "tokens": tokens, "generation_tps": speed, "valid": valid}


Config = tuple[int, str, str]  # generation threads, constraint, bias


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dataset", type=Path, help="JSONL written by a town run")
    parser.add_argument("--category", action="append", default=[], help="repeatable")
    parser.add_argument("--per-category", type=int, default=6)
    parser.add_argument("--threads", default="1,2", help="generation thread counts to compare")
    parser.add_argument(
        "--threads-batch", type=int, default=None, help="prompt threads (default: every core)"
    )
    parser.add_argument(
        "--constraints",
        default="recorded",
        help=f"comma-separated, of {', '.join(CONSTRAINTS)}: how each call is constrained",
    )
    parser.add_argument(
        "--biases",
        default="none",
        help=f"comma-separated, of {', '.join(BIASES)}: what the client adds to each request",
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    calls = load_calls(args.dataset, args.category, args.per_category)
    if not calls:
        sys.exit(f"no recorded calls with messages in {args.dataset}")
    threads = [int(t) for t in args.threads.split(",")]
    constraints = args.constraints.split(",")
    for constraint in constraints:
        request_constraints({}, constraint)  # an unknown name fails before any server starts
    biases = args.biases.split(",")
    unknown = [b for b in biases if b not in BIASES]
    if unknown:
        sys.exit(f"--biases: unknown {unknown}; choose from {', '.join(BIASES)}")
    configs: list[Config] = [(t, c, b) for t in threads for c in constraints for b in biases]
    print(header_line(machine_info()))
    print(f"# {len(calls)} recorded calls from {args.dataset.name}, sent one at a time")
    totals: dict[Config, float] = defaultdict(float)
    for round_index in range(args.rounds):
        for config in configs:
            count, constraint, bias = config
            with LocalServer(threads=count, threads_batch=args.threads_batch) as server:
                result = replay(server, calls, args.seed, constraint, bias)
            totals[config] += result["wall"]
            print(
                f"round {round_index + 1}  threads {count}, {constraint}, bias {bias}: "
                f"{result['wall']:7.1f} s  {result['tokens']:6d} completion tokens  "
                f"{result['generation_tps']:6.1f} tokens/s generating  "
                f"{int(result['valid'])}/{len(calls)} valid"
            )
    base = totals[configs[0]]
    for config in configs:
        print(
            f"threads {config[0]}, {config[1]}, bias {config[2]}: {totals[config]:7.1f} s in "
            f"all, {base / totals[config]:.2f}x the speed of threads {configs[0][0]}, "
            f"{configs[0][1]}, bias {configs[0][2]}"
        )
    print(header_line(machine_info()))


if __name__ == "__main__":
    main()
