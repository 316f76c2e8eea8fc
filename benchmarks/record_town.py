"""Record the town's prompts answered by a local model, twice each, in the replay format.

    python benchmarks/record_town.py --source docs/results/quick/data \\
        --model qwen2.5-coder-1.5b --temperature 0.3 --out docs/results/recording-qwen2.5-coder-1.5b

The committed town runs hold every prompt the town asked (``runN.jsonl.gz``, the study's
datasets). This script asks a local model those prompts again, for the categories given, in
the order the town asked them, and writes each as one :class:`llmcache.replay.ReplayCall`
line: the first answer is the call's ``answer`` (its truth in a replay), the second, asked with
another sampling seed, goes to ``other_answers`` (the model's own spread: what a twin, an
exploration or an audit draws). An answer the query's validator refuses is asked again with the
next seed, up to ``--attempts`` times, as the town retries; a call with no valid answer is left
out and counted. The prompts are the town's as it ran on its own model, so the recording is the
town's *traffic* answered by the stronger model; the town did not act on these answers.

Output, per source run: ``runN.jsonl.gz``, plus ``provenance.json`` (model, its pinned
SHA-256, the runtime, seeds, temperature, the command, counts, machine and date). Resumable: a
run whose ``runN.jsonl.gz`` exists is skipped; calls of the run in progress are kept in
``runN.partial.jsonl`` and not asked again.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shlex
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench_models import machine_info  # a sibling script (benchmarks/ is on the path)

from agent_core import TownCall
from agent_core.llm import town_options, town_request
from llmcache.llm import MODELS, LocalServer
from llmcache.replay import ReplayCall

ROOT = Path(__file__).resolve().parents[1]
CATEGORIES = ("importance score", "finding location", "actor reaction", "agent reaction")


def source_calls(
    path: Path, categories: tuple[str, ...], agents: tuple[str, ...] = ()
) -> list[tuple[TownCall, float]]:
    """The run's valid calls of ``categories`` (of ``agents``, when given), in the order the
    town asked them."""
    out = []
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            if record.get("kind") != "call" or record.get("category") not in categories:
                continue
            if not record.get("valid") or (agents and record.get("agent") not in agents):
                continue
            metadata = record.get("metadata") or {}
            when = float(metadata.get("sim_minute", 0)) * 60.0
            out.append((TownCall.from_record(record), when))
    return out


def _answer(
    client: Any, call: TownCall, model: str, temperature: float, seed: int, attempts: int
) -> tuple[str, int, int, int] | None:
    """A valid answer (text, prompt tokens, completion tokens, seed used), or ``None``."""
    validate = call.validator()
    for k in range(attempts):
        request = {
            **town_request(call, model),
            **town_options(call).constraints,
            "temperature": temperature,
            "seed": seed + k,
        }
        completion = client.chat.completions.create(**request)
        text = completion.choices[0].message.content or ""
        try:
            validate(text)
        except ValueError:
            continue
        usage = completion.usage
        return (
            text,
            usage.prompt_tokens if usage else 0,
            usage.completion_tokens if usage else 0,
            seed + k,
        )
    return None


def _seed(base: int, run: int, index: int) -> int:
    """The first ask's seed of call ``index`` of ``run``; the second ask's is 5 more, and an
    invalid answer's retries add 1 each (``attempts`` < 5)."""
    return base + 10 * (run * 100_000 + index)


def record_run(
    server: LocalServer,
    run: int,
    calls: list[tuple[TownCall, float]],
    partial: Path,
    args: argparse.Namespace,
    counts: Counter[str],
) -> list[dict[str, Any]]:
    done: list[dict[str, Any]] = []
    if partial.exists():
        done = [json.loads(x) for x in partial.read_text(encoding="utf-8").splitlines() if x]
    client = server.client()
    started = time.perf_counter()
    asked = 0
    finished = {int(d["index"]) for d in done}
    # One agent's calls after another: consecutive prompts then share the agent's persona
    # block, which the server's prompt cache keeps, so a first ask costs about a third. The
    # lines are put back in the town's order at the end (each keeps its index).
    order = sorted(range(len(calls)), key=lambda i: (calls[i][0].agent or "", i))
    with partial.open("a", encoding="utf-8") as out:
        for i in order:
            if i in finished:
                continue
            call, when = calls[i]
            # A seed of its own for every ask: with one seed for all, llama.cpp draws identical
            # prompts' answers from the same random numbers, so a prompt asked again gets the
            # same answer, and a cached answer agrees with the truth far more often than the
            # model's second answer does (seen on the first recording: 23 of 30 repeats).
            seed = _seed(args.seed, run, i)
            first = _answer(client, call, server.model, args.temperature, seed, args.attempts)
            second = (
                _answer(client, call, server.model, args.temperature, seed + 5, args.attempts)
                if first
                else None
            )
            line: dict[str, Any] = {"skipped": True, "category": call.category}
            if first is None:
                counts[f"no valid answer: {call.category}"] += 1
            else:
                rc = ReplayCall(
                    category=call.category,
                    agent=call.agent,
                    messages=call.messages(),
                    keywords=call.keywords(),
                    answer=first[0],
                    time=when,
                    params={"model": server.model, "temperature": args.temperature},
                    prompt_tokens=first[1],
                    completion_tokens=first[2],
                )
                line = rc.model_dump(mode="json", exclude_defaults=True)
                line["other_answers"] = [second[0]] if second else []
                counts[f"recorded: {call.category}"] += 1
                counts["second answer missing"] += second is None
            out.write(json.dumps({**line, "index": i}, ensure_ascii=False) + "\n")
            out.flush()
            done.append({**line, "index": i})
            asked += 1
            if asked % 10 == 0:
                rate = (time.perf_counter() - started) / asked
                progress = f"{len(done)}/{len(calls)} ({rate:.1f} s a call)"
                sys.stderr.write(f"{partial.name}: {progress}\n")
    done.sort(key=lambda d: int(d["index"]))
    return [{k: v for k, v in d.items() if k != "index"} for d in done if not d.get("skipped")]


def _relative(path: Path) -> str:
    """A path as the repository names it (no machine's paths in a committed file)."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return path.name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=ROOT / "docs/results/quick/data")
    parser.add_argument("--runs", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--category", action="append", help="repeatable (default: four)")
    parser.add_argument("--agent", action="append", help="repeatable (default: every agent)")
    parser.add_argument("--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--temperature", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--attempts", type=int, default=3, choices=range(1, 5))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--threads", type=int, help="server threads (default: every core; 1 beside other work)"
    )
    args = parser.parse_args()
    categories = tuple(args.category or CATEGORIES)
    agents = tuple(args.agent or ())
    args.out.mkdir(parents=True, exist_ok=True)
    counts: Counter[str] = Counter()
    spec = MODELS[args.model]
    began = time.time()
    with LocalServer(
        args.model, parallel=1, threads=args.threads, threads_batch=args.threads
    ) as server:
        for run in args.runs:
            target = args.out / f"run{run}.jsonl.gz"
            if target.exists():
                continue
            calls = source_calls(args.source / f"run{run}.jsonl.gz", categories, agents)
            partial = args.out / f"run{run}.partial.jsonl"
            lines = record_run(server, run, calls, partial, args, counts)
            with gzip.open(target, "wt", encoding="utf-8") as out:
                for line in lines:
                    out.write(json.dumps(line, ensure_ascii=False) + "\n")
            partial.unlink()
    provenance = {
        "model": args.model,
        "weights_sha256": spec.sha256,
        "server": server.model,
        "temperature": args.temperature,
        "seeds": "call i of run r: first answer seed + 10 * (r * 100000 + i), second 5 more",
        "seed": args.seed,
        "attempts": args.attempts,
        "categories": list(categories),
        "agents": list(agents) or "every agent",
        "source": _relative(args.source),
        "runs": args.runs,
        "command": "python benchmarks/record_town.py " + shlex.join(sys.argv[1:]),
        "counts": dict(sorted(counts.items())),
        "seconds": round(time.time() - began),
        "machine": machine_info().model_dump(),
    }
    (args.out / "provenance.json").write_text(json.dumps(provenance, indent=1) + "\n")
    print(json.dumps(provenance["counts"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
