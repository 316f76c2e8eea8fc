"""The opposites gate: what it refuses, what it keeps, and what it costs.

With the default embedder (the local MiniLM) and keyword texts:

- town pairs (``benchmarks/data/opposites/``: the development part and the held-back part, kept
  apart), one table per pair: ``a`` stored, ``b`` asked. Served counts at thresholds 0.80, 0.85,
  0.90 and 0.95, gate off and on, for opposite pairs (which must never be served) and paraphrase
  pairs (which should be).
- labelled Quora question pairs (``../shared/benchmarks/quora_pairs.jsonl.gz``, a seeded sample):
  every ``a`` stored in one table, each ``b`` asked; a hit on a duplicate's own ``a`` is correct,
  any other hit wrong. Correct and wrong hits at 0.85 and 0.90, gate off and on.
- the gate's own cost per candidate (µs, p50/p99), on every pair above: first sight of the texts
  (nothing cached) and again (the texts' analyses cached, as a table's stored texts are).

The embeddings are computed once (kept in the temp directory) and the threshold and gate are
applied to the cosines directly, which is what the cache's look-up does with its best candidate;
a few pairs are also run through the real ``CachedLLM`` + ``FakeOpenAI`` path to show the wiring
gives the same answers.

    .venv/bin/python benchmarks/bench_opposites.py                 # 2,000 Quora pairs
    .venv/bin/python benchmarks/bench_opposites.py --quora 0       # town pairs only
    .venv/bin/python benchmarks/bench_opposites.py --wiring 0      # no CachedLLM runs
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_models import header_line, machine_info  # beside this file
from dev_set import QUORA, embed_cached

from llmcache import CacheConfig, CachedLLM, CacheOptions, SemanticCache
from llmcache.testing import FakeOpenAI
from llmcache.verification import opposition

DATA = Path(__file__).resolve().parent / "data" / "opposites"
THRESHOLDS = (0.80, 0.85, 0.90, 0.95)


def load(name: str) -> list[dict[str, str]]:
    with open(DATA / name, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def cosines(a: list[str], b: list[str]) -> np.ndarray:
    _, va = embed_cached(a, "opposites")
    _, vb = embed_cached(b, "opposites")
    return np.einsum("ij,ij->i", va, vb)


def town(rows: list[dict[str, str]], label: str) -> None:
    cos = cosines([r["a"] for r in rows], [r["b"] for r in rows])
    refused = [opposition(r["b"], r["a"]) is not None for r in rows]
    groups = {
        "opposites": [i for i, r in enumerate(rows) if r["kind"] != "paraphrase"],
        "paraphrases": [i for i, r in enumerate(rows) if r["kind"] == "paraphrase"],
    }
    for group, members in groups.items():
        cells = []
        for t in THRESHOLDS:
            off = sum(1 for i in members if cos[i] >= t)
            on = sum(1 for i in members if cos[i] >= t and not refused[i])
            cells.append(f"{t:.2f}: {off:3d} -> {on:3d}")
        print(f"  {label:9s} {group:11s} ({len(members):3d})  " + "   ".join(cells))
    for i, r in enumerate(rows):
        if r["kind"] != "paraphrase" and not refused[i]:
            print(f"    not refused ({r['kind']}, cos {cos[i]:.3f}): {r['a']!r} / {r['b']!r}")
        if r["kind"] == "paraphrase" and refused[i]:
            why = opposition(r["b"], r["a"])
            print(f"    paraphrase refused ({why}): {r['a']!r} / {r['b']!r}")


def quora_candidates(
    n: int, seed: int
) -> tuple[list[dict[str, object]], list[tuple[str, str]], list[bool], np.ndarray]:
    """The sample, each asked ``b`` with its nearest stored ``a``, whether that is its own pair's
    ``a`` and a duplicate (a correct hit), and the cosine."""
    with gzip.open(QUORA, "rt", encoding="utf-8") as f:
        pairs = [json.loads(line) for line in f]
    pairs = [p for p in pairs if p["a"].strip() and p["b"].strip() and p["a"] != p["b"]]
    sample = random.Random(seed).sample(pairs, n)
    stored = list(dict.fromkeys(p["a"] for p in sample))
    asked = [p["b"] for p in sample]
    _, vs = embed_cached(stored, "opposites")
    _, vq = embed_cached(asked, "opposites")
    sims = vq @ vs.T
    best = sims.argmax(axis=1)
    best_cos = sims[np.arange(len(asked)), best]
    candidates = [(asked[i], stored[best[i]]) for i in range(len(asked))]
    correct = [bool(p["duplicate"]) and stored[best[i]] == p["a"] for i, p in enumerate(sample)]
    return sample, candidates, correct, best_cos


def quora(
    sample: list[dict[str, object]],
    candidates: list[tuple[str, str]],
    correct: list[bool],
    best_cos: np.ndarray,
    seed: int,
) -> None:
    refused = [opposition(q, c) is not None for q, c in candidates]
    stored = len({c for _, c in candidates})
    print(f"  Quora: {len(sample):,} pairs (seed {seed}), each b asked of the stored a's")
    del stored
    for t in (0.85, 0.90):
        line = []
        for gate in (False, True):
            hits = [i for i in range(len(sample)) if best_cos[i] >= t and not (gate and refused[i])]
            right = sum(1 for i in hits if correct[i])
            line.append(
                f"gate {'on ' if gate else 'off'}: {right:4d} correct, {len(hits) - right:4d} wrong"
            )
        print(f"    {t:.2f}   " + "   ".join(line))
    for i in range(len(sample)):
        if refused[i] and correct[i] and best_cos[i] >= 0.85:
            why = opposition(*candidates[i])
            print(f"    correct hit refused ({why}): {candidates[i][1]!r} / {candidates[i][0]!r}")


def cost(pairs: list[tuple[str, str]]) -> None:
    """Run first in the process: the first pass sees every text for the first time."""
    opposition("load", "the lexicon")  # loaded once per process, not per candidate
    for label in ("first sight", "texts seen"):
        wall, cpu = [], []
        for q, c in pairs:
            started, started_cpu = time.perf_counter_ns(), time.thread_time_ns()
            opposition(q, c)
            cpu.append((time.thread_time_ns() - started_cpu) / 1000)
            wall.append((time.perf_counter_ns() - started) / 1000)
        # The thread's CPU time beside the wall time: on a shared machine a call that loses its
        # core waits out another process's time slice, which the wall time's p99 shows.
        (p50, p99), (c50, c99) = np.percentile(wall, [50, 99]), np.percentile(cpu, [50, 99])
        print(
            f"  gate cost, {label:11s}: p50 {p50:6.1f} µs   p99 {p99:6.1f} µs   (CPU time "
            f"p50 {c50:6.1f} µs   p99 {c99:6.1f} µs; {len(wall):,} candidates)"
        )


def wiring(rows: list[dict[str, str]], count: int) -> None:
    """Pairs through the real path (CachedLLM + FakeOpenAI, the default embedder, keyword mode,
    threshold 0.80): one table per pair, ``a`` asked first (a miss, stored), then ``b``."""
    picked = [r for r in rows if r["kind"] != "paraphrase"][:count]
    picked += [r for r in rows if r["kind"] == "paraphrase"][:count]
    served = {"opposites": [0, 0], "paraphrases": [0, 0]}  # [gate off, gate on]
    named: list[str] = []
    with tempfile.TemporaryDirectory() as directory:
        for column, gate in enumerate((False, True)):
            cache = SemanticCache(
                Path(directory) / f"gate-{gate}",
                config=CacheConfig(threshold=0.80, opposites_gate=gate),
            )
            client = CachedLLM(FakeOpenAI(), cache=cache)
            for index, r in enumerate(picked):
                infos = [
                    client.chat.completions.create_with_info(
                        model="m",
                        messages=[{"role": "user", "content": f"React to: {text}"}],
                        cache=CacheOptions(category=f"pair {index}", keywords=[text]),
                    )[1]
                    for text in (r["a"], r["b"])
                ]
                group = "paraphrases" if r["kind"] == "paraphrase" else "opposites"
                served[group][column] += infos[1].outcome == "hit"
                if gate and infos[1].refused_pair and len(named) < 3:
                    named.append(f"{infos[1].refused_by}: {infos[1].refused_pair}")
            refused = client.cache.stats().total.refused_opposites
            client.close()
            if gate:
                print(f"  CachedLLM, gate on: stats() counts {refused} refused as opposite")
    for group, (off, on) in served.items():
        print(f"  CachedLLM at 0.80, {group:11s} ({count}): served {off} -> {on}")
    print(f"  CallInfo of the first refusals: {'; '.join(named)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quora", type=int, default=2000, help="Quora pairs sampled (0: none)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--wiring", type=int, default=20, help="dev pairs of each group run through CachedLLM"
    )
    args = parser.parse_args()
    print(header_line(machine_info()))
    dev, held = load("dev.jsonl"), load("heldback.jsonl")
    pairs = [(r["b"], r["a"]) for r in dev + held]
    found = None
    if args.quora and QUORA.exists():
        found = quora_candidates(args.quora, args.seed)
        pairs += found[1]
    elif args.quora:
        print(f"  Quora pairs skipped: {QUORA} is absent")
    cost(pairs)
    print("served, gate off -> on, one table per pair (a stored, b asked), keyword mode:")
    town(dev, "dev")
    town(held, "held-back")
    if found is not None:
        quora(*found, seed=args.seed)
    if args.wiring:
        wiring(dev, args.wiring)


if __name__ == "__main__":
    main()
