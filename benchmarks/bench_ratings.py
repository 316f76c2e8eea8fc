"""Importance ratings of one moment: each in its own prompt against all in one
(agent_core.rating_batch).

    python benchmarks/bench_ratings.py runs/demo.jsonl --groups 40 --rounds 2

A town run's dataset (``python -m agent_core run --llm local``) keeps every rating as its own
call, with the moment it belongs to (agent, summary block, simulated time). This benchmark takes
the first ``--groups`` moments that rated two or more memories and answers their ratings on a
fresh :class:`~llmcache.llm.LocalServer` per way and round:

- ``alone``: each rating as its own request, exactly as the town sends it (the query's schema
  and ``max_tokens``), up to ``--concurrency`` in flight, as ``TownLLM.send_many`` does;
- ``batched``: one request per moment, built by :func:`agent_core.rating_batch.batch_request`.

Every request carries the same sampling ``seed``. Ways alternate within a round, so a change in
the machine's load hits both alike. Printed per way and round: wall seconds, ratings per second,
requests, and the prompt tokens the server read and the tokens it generated (its ``timings``);
then the wall-time ratio of ``batched`` to ``alone`` and how the two ways' scores compare with
each other and with the run's recorded ones (equal, within the template's tolerance of ±1, mean
score). The recorded scores come from the run's own sampling, so ``alone`` against recorded is
the model's own spread: ``batched`` is no worse when it sits as close to the recorded scores.
Last, each way's scores as a histogram, and the mean score of the memories the rating prompt's
own scale names as mundane: an item that is idle ("an idle chair" is the scale's example of 1).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
from bench_models import header_line, machine_info  # a sibling script (benchmarks/ is on the path)

from agent_core import TownCall
from agent_core.llm import town_options, town_request
from agent_core.rating_batch import BATCHED_CATEGORY, batch_request
from llmcache.llm import LocalServer


@dataclass
class Moment:
    calls: list[TownCall]
    recorded: list[int]


@dataclass
class WayRun:
    way: str
    round: int
    wall: float = 0.0
    requests: int = 0
    prompt_read: int = 0
    generated: int = 0
    scores: list[int | None] = field(default_factory=list)


def load_moments(path: Path, groups: int) -> list[Moment]:
    """The first ``groups`` moments with two or more valid ratings, in the run's order."""
    moments: dict[tuple[str, str, str], Moment] = {}
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            if record.get("kind") != "call" or record.get("category") != BATCHED_CATEGORY:
                continue
            if not record.get("valid"):
                continue
            try:
                call = TownCall.from_record(record)
                score = int(json.loads(record["response"])["score"])
            except (ValueError, KeyError, TypeError):
                continue
            key = (call.agent, call.time or "", call.summary_block)
            moment = moments.setdefault(key, Moment([], []))
            moment.calls.append(call)
            moment.recorded.append(score)
    return [m for m in moments.values() if len(m.calls) >= 2][:groups]


def _request(call: TownCall, model: str, seed: int) -> dict[str, Any]:
    return {
        **town_request(call, model),
        **town_options(call).constraints,
        "seed": seed,
    }


def _send(client: openai.OpenAI, request: dict[str, Any]) -> tuple[str, int, int]:
    completion = client.chat.completions.create(**request)
    timings = (completion.model_extra or {}).get("timings") or {}
    content = completion.choices[0].message.content or ""
    return content, int(timings.get("prompt_n", 0)), int(timings.get("predicted_n", 0))


def _score(content: str, key: str = "score") -> Any:
    try:
        return json.loads(content)[key]
    except (ValueError, KeyError, TypeError):
        return None


def run_way(
    way: str, moments: list[Moment], server: LocalServer, seed: int, concurrency: int, rnd: int
) -> WayRun:
    client = server.client()
    out = WayRun(way, rnd)
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        for moment in moments:
            requests = [_request(c, server.model, seed) for c in moment.calls]
            if way == "alone":
                answers = list(pool.map(lambda r: _send(client, r), requests))
                out.scores.extend(_score(content) for content, _, _ in answers)
            else:
                answer = _send(client, batch_request(moment.calls, requests[0]))
                answers = [answer]
                scores = _score(answer[0], "scores")
                if not isinstance(scores, list) or len(scores) != len(moment.calls):
                    scores = [None] * len(moment.calls)
                out.scores.extend(scores)
            out.requests += len(answers)
            out.prompt_read += sum(a[1] for a in answers)
            out.generated += sum(a[2] for a in answers)
    out.wall = time.perf_counter() - started
    return out


def agreement(a: list[int | None], b: list[int | None]) -> tuple[float, float]:
    """Shares of ratings equal and within ±1 (the template's tolerance), over pairs both have."""
    pairs = [(x, y) for x, y in zip(a, b, strict=True) if x is not None and y is not None]
    if not pairs:
        return float("nan"), float("nan")
    equal = sum(x == y for x, y in pairs) / len(pairs)
    within = sum(abs(x - y) <= 1 for x, y in pairs) / len(pairs)
    return equal, within


def _mean(scores: list[int | None]) -> float:
    valid = [s for s in scores if s is not None]
    return statistics.fmean(valid) if valid else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", type=Path, help="a town run's JSONL dataset")
    parser.add_argument("--groups", type=int, default=40, help="moments to replay")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=4, help="ratings in flight (alone)")
    parser.add_argument("--seed", type=int, default=1, help="sampling seed of every request")
    parser.add_argument("--model", help="registered model name (default: the default model)")
    args = parser.parse_args()

    moments = load_moments(args.dataset, args.groups)
    if not moments:
        sys.exit(f"{args.dataset}: no moment rated two or more memories")
    ratings = sum(len(m.calls) for m in moments)
    recorded = [s for m in moments for s in m.recorded]
    rows: list[WayRun] = []
    for rnd in range(1, args.rounds + 1):
        for way in ("alone", "batched"):
            kwargs = {"model": args.model} if args.model else {}
            with LocalServer(**kwargs) as server:
                rows.append(run_way(way, moments, server, args.seed, args.concurrency, rnd))
                model = server.model

    print(header_line(machine_info()))
    print(
        f"# {args.dataset.name}: {len(moments)} moments, {ratings} ratings "
        f"({ratings / len(moments):.1f} a moment); model {model}, seed {args.seed}, "
        f"{args.concurrency} in flight when alone"
    )
    print(
        f"{'way':8s} {'round':>5s} {'wall s':>8s} {'ratings/s':>9s} {'requests':>8s} "
        f"{'read tok':>8s} {'gen tok':>8s}"
    )
    for r in rows:
        print(
            f"{r.way:8s} {r.round:5d} {r.wall:8.1f} {ratings / r.wall:9.2f} {r.requests:8d} "
            f"{r.prompt_read:8d} {r.generated:8d}"
        )
    wall = {w: sum(r.wall for r in rows if r.way == w) for w in ("alone", "batched")}
    print(
        f"batched / alone wall time: {wall['batched'] / wall['alone']:.2f} "
        f"({wall['alone'] / wall['batched']:.2f}x as many ratings per second)"
    )
    last = {r.way: r.scores for r in rows if r.round == args.rounds}
    invalid = {w: sum(s is None for s in last[w]) for w in last}
    print(f"unparsed answers (last round): alone {invalid['alone']}, batched {invalid['batched']}")
    for name, a, b in (
        ("alone vs recorded", last["alone"], recorded),
        ("batched vs recorded", last["batched"], recorded),
        ("batched vs alone", last["batched"], last["alone"]),
    ):
        equal, within = agreement(a, b)
        print(f"{name:20s} equal {equal:6.1%}  within ±1 {within:6.1%}")
    print(
        f"mean score: recorded {_mean(recorded):.2f}, alone {_mean(last['alone']):.2f}, "
        f"batched {_mean(last['batched']):.2f}"
    )
    memories = [str(c.slots["memory"]) for m in moments for c in m.calls]
    idle = [i for i, text in enumerate(memories) if text.rstrip(". ").lower().endswith(" idle")]
    print(f"scores 1..10 (last round; {len(idle)} of the ratings are of an idle item):")
    for name, scores in (
        ("recorded", recorded),
        ("alone", last["alone"]),
        ("batched", last["batched"]),
    ):
        counts = [sum(s == v for s in scores) for v in range(1, 11)]
        idle_mean = _mean([scores[i] for i in idle])
        print(
            f"  {name:9s} {' '.join(f'{c:3d}' for c in counts)}   idle items' mean {idle_mean:.2f}"
        )


if __name__ == "__main__":
    main()
