"""Savings a user can trust: every setting on the gpt-4o-mini development bed, in one table.

The bed (``../shared/benchmarks/park_4omini_dev/``, relative to the repository root; skipped
with a message when absent) is eight agents of one gpt-4o-mini run of Park et al.'s code, 1,457
rated memories, rebuilt into Park's importance prompts by ``park_calls.bed_calls``. Settings
are learned on four agents (``BED_TUNE_AGENTS``) and reported on the other four
(``BED_CHECK_AGENTS``: 765 calls), keyword mode, "within 1 point" as the equivalence, every
replay through the public :mod:`llmcache.replay` API (the real cache, the recording as the
model). Rows:

- exact repeats only (threshold 0.999), static 0.95, the static default 0.9;
- the proving guard (``wrong_hit_budget=δ``) on the check agents alone, and after the tune
  agents were replayed into the same cache directory (their evidence pooled and kept, as a
  cache reopened for a second run keeps it);
- the audit guard (``guard="audit"``, from 0.9);
- ``tune --delta δ`` learned on the tune agents and confirmed on the check agents (its check
  part's figures);
- a random same-agent answer, and the model's own second answer (identical descriptions
  rated twice by one agent), for scale.

Columns: the cost cut, the calls served (of them answers to the very same prompt), the excess
of wrong answers over the model's own variability in points with its 95% interval, and the
one-sided 95% bound of the *expected* excess that ``tune`` keeps within δ (answers to the very
same prompt at their excess of 0, near neighbours at their own bound: docs/promise.md).

``--runs N`` adds the sequence: the whole bed cut by time into N parts, each replayed into one
cache directory after the one before (a cache that lives through N runs), and the cut and the
excess of each part under the safe settings.

    python benchmarks/bench_savings.py                # the table, about 2 minutes on 2 cores
    python benchmarks/bench_savings.py --runs 4 --json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from park_calls import BED_CHECK_AGENTS, BED_TUNE_AGENTS, bed_calls, bed_embedder

from llmcache import CacheConfig, EmbedMode
from llmcache.embedders import StoredEmbedder
from llmcache.replay import Figures, ReplayCall, replay, tune

WITHIN = 1  # points of the 1-10 rating within which two ratings agree


def _agree(a: str, b: str) -> bool:
    return abs(int(a) - int(b)) <= WITHIN


def row(name: str, f: Figures) -> dict[str, Any]:
    return {
        "setting": name,
        "cost_cut": f.cost_cut,
        "served": f.served,
        "identical": f.identical,
        "excess": f.excess,
        "excess_low": f.excess_low,
        "excess_upper": f.excess_upper,
        "bound": f.bound,
    }


def _own_and_random(calls: Sequence[ReplayCall], seed: int) -> tuple[dict[str, Any], ...]:
    """The model's own second answer (consecutive ratings of one description by one agent)
    and a random earlier rating of the same agent, each as a row of excess figures."""
    rng = random.Random(seed)
    last: dict[tuple[str, str], str] = {}
    seen: dict[str, list[str]] = {}
    pairs = agree = 0
    n = wrong = 0
    for call in calls:
        key = (call.agent, call.prompt_key())
        if key in last:
            pairs += 1
            agree += _agree(last[key], call.answer)
        last[key] = call.answer
        earlier = seen.setdefault(call.agent, [])
        if earlier:
            n += 1
            wrong += not _agree(rng.choice(earlier), call.answer)
        earlier.append(call.answer)
    own = (pairs - agree) / pairs
    # A normal interval of a difference of two independent rates: plenty at these counts.
    rate = wrong / n
    half = 1.96 * ((rate * (1 - rate)) / n + (own * (1 - own)) / pairs) ** 0.5
    random_row = {
        "setting": "a random same-agent answer",
        "served": n,
        "excess": 100 * (rate - own),
        "excess_low": 100 * (rate - own - half),
        "excess_upper": 100 * (rate - own + half),
    }
    own_row = {
        "setting": f"the model's own second answer ({agree} of {pairs} pairs within 1)",
        "served": pairs,
        "excess": 0.0,
    }
    return own_row, random_row


def _points(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}"


def render(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"{'setting':<58} {'cost cut':>8} {'served':>7} {'identical':>9} "
        f"{'excess, points [95%]':>22} {'bound':>6}"
    ]
    for r in rows:
        cut = "-" if r.get("cost_cut") is None else f"{100 * r['cost_cut']:.1f}%"
        served = str(r.get("served", "-"))
        identical = "-" if r.get("identical") is None else str(r["identical"])
        interval = (
            f"{_points(r.get('excess'))} [{_points(r.get('excess_low'))}, "
            f"{_points(r.get('excess_upper'))}]"
            if r.get("excess_low") is not None
            else _points(r.get("excess"))
        )
        lines.append(
            f"{r['setting']:<58} {cut:>8} {served:>7} {identical:>9} {interval:>22} "
            f"{_points(r.get('bound')):>6}"
        )
    return "\n".join(lines)


def tuned(
    embedder: StoredEmbedder, delta: float, seed: int, lead_words: Sequence[int] | None = None
) -> Figures:
    """The check agents' figures under the file ``tune`` writes from the tune agents (keyword
    mode; ``lead_words``: the leading words it tries, ``None``: its default)."""
    tune_calls, check_calls = bed_calls(BED_TUNE_AGENTS), bed_calls(BED_CHECK_AGENTS)
    # tune splits by agents in the order agents first appear: the tune agents' calls first,
    # and a check fraction a hair under the check agents' share, so that it takes just them.
    result = tune(
        tune_calls + check_calls,
        delta=delta,
        split="agents",
        check_fraction=(len(check_calls) - 0.5) / (len(tune_calls) + len(check_calls)),
        embeds=(EmbedMode.KEYWORD,),
        embedder=embedder,
        seed=seed,
        **({} if lead_words is None else {"lead_words": lead_words}),
    )
    # The file tune writes, run on the check agents' traffic as a new cache would.
    return replay(check_calls, result.config, embedder=embedder, seed=seed).overall


def table(embedder: StoredEmbedder, delta: float, seed: int) -> list[dict[str, Any]]:
    tune_calls, check_calls = bed_calls(BED_TUNE_AGENTS), bed_calls(BED_CHECK_AGENTS)
    rows = []
    static = [("exact repeats only (0.999)", 0.999), ("static 0.95", 0.95)]
    static.append(("static default (0.9)", 0.9))
    for name, threshold in static:
        f = replay(check_calls, CacheConfig(threshold=threshold), embedder=embedder, seed=seed)
        rows.append(row(name, f.overall))
    prove = CacheConfig(wrong_hit_budget=delta)
    f = replay(check_calls, prove, embedder=embedder, seed=seed)
    rows.append(row(f"proving guard (δ = {delta:g}), check agents alone", f.overall))
    with tempfile.TemporaryDirectory(prefix="bench-savings-") as where:
        replay(tune_calls, prove, embedder=embedder, seed=seed, cache_dir=where)
        f = replay(check_calls, prove, embedder=embedder, seed=seed, cache_dir=where)
    rows.append(row("proving guard, the tune agents' evidence kept", f.overall))
    audit = CacheConfig(guard="audit", wrong_hit_budget=delta)
    f = replay(check_calls, audit, embedder=embedder, seed=seed)
    rows.append(row(f"audit guard (from 0.9, δ = {delta:g})", f.overall))
    f = tuned(embedder, delta, seed)
    rows.append(row(f"the file tune --delta {delta:g} writes, run on them", f))
    rows.extend(_own_and_random(check_calls, seed))
    return rows


def runs(embedder: StoredEmbedder, parts: int, delta: float, seed: int) -> list[dict[str, Any]]:
    """The whole bed cut by time into ``parts`` runs, replayed one after another into one
    cache directory per setting: each run's cut and excess."""
    calls = bed_calls()
    times = sorted(c.time or 0.0 for c in calls)
    edges = [times[round(len(times) * i / parts)] for i in range(1, parts)]
    chunks: list[list[ReplayCall]] = [[] for _ in range(parts)]
    for call in calls:
        chunks[sum((call.time or 0.0) >= e for e in edges)].append(call)
    settings = {
        "exact repeats only (0.999)": CacheConfig(threshold=0.999),
        "static default (0.9)": CacheConfig(),
        f"proving guard (δ = {delta:g})": CacheConfig(wrong_hit_budget=delta),
        f"audit guard (δ = {delta:g})": CacheConfig(guard="audit", wrong_hit_budget=delta),
    }
    out = []
    for name, config in settings.items():
        with tempfile.TemporaryDirectory(prefix="bench-savings-runs-") as where:
            for number, chunk in enumerate(chunks, start=1):
                f = replay(chunk, config, embedder=embedder, seed=seed, cache_dir=where).overall
                out.append({"run": number, "calls": len(chunk), **row(name, f)})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delta", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=0, help="also the sequence of N runs")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--embeddings", type=Path, help="keep the embeddings in this directory")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    embedder = bed_embedder("bench_savings", args.embeddings)
    if embedder is None:
        return 2
    rows = table(embedder, args.delta, args.seed)
    sequence = runs(embedder, args.runs, args.delta, args.seed) if args.runs else []
    embedder.save()
    seconds = time.perf_counter() - started
    if args.json:
        print(json.dumps({"rows": rows, "runs": sequence, "seconds": seconds}))
        return 0
    print(
        f"{len(bed_calls(BED_CHECK_AGENTS))} calls of {', '.join(BED_CHECK_AGENTS)}; settings "
        f"learned on {', '.join(BED_TUNE_AGENTS)}; keyword mode, within {WITHIN} point"
    )
    print(render(rows))
    if sequence:
        print(
            f"\nthe bed cut by time into {args.runs} runs, each into the cache of the ones before:"
        )
        print(
            f"{'setting':<34} "
            + " ".join(f"{'run ' + str(i):>20}" for i in range(1, args.runs + 1))
        )
        for name in dict.fromkeys(r["setting"] for r in sequence):
            cells = [
                f"{100 * r['cost_cut']:.1f}% {_points(r['excess']):>6}"
                for r in sequence
                if r["setting"] == name
            ]
            print(f"{name:<34} " + " ".join(f"{c:>20}" for c in cells))
        print("(each cell: cost cut, excess in points over the model's own variability)")
    print(f"\n{seconds:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
