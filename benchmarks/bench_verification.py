"""Wrong hits at static thresholds and under a wrong-hit budget, on labelled question pairs.

The development set is ``../shared/benchmarks/quora_pairs.jsonl.gz`` (relative to the
repository root; see its README): question pairs ``a``/``b`` labelled duplicate or not. A sample
of pairs is turned into a cache benchmark as that README says: every ``a`` is stored (its answer
names its pair), then every ``b`` is asked through ``CachedLLM`` (online mode, so a miss is
answered and stored like any miss). The answer to ``b`` is its pair's answer when the pair is a
duplicate and an answer of its own when not, so a hit is *correct* when the served answer is
the true one and *wrong* otherwise (its non-duplicate partner, or any other stored question).
Questions joined by duplicate labels, and the same words asked twice, share one answer; two
questions nobody labelled are taken to differ (the labels are incomplete, so a few "wrong" hits
may be right).

Operating points: static cosine thresholds, and ``wrong_hit_budget`` at several δ. The budget
learns as the stream goes (labels from misses, explorations); figures are given over the whole
stream and over the asks after a warm-up. ``explored`` asks were would-be hits also sent to the
LLM (counted as misses: the paid answer is served). Latency is the mean wall time of one hit
and of one miss (the LLM is a fake that answers at once, embeddings are precomputed), so the
difference from a static row is what the budget adds per lookup (a miss also labels its
nearest entry; a miss stores its answer in every row).

Two streams: ``mixed``, the sample as drawn (duplicates and hard non-duplicates), and
``paraphrases``, its duplicate pairs alone (the issue's setting: a wrong hit is then a hit on
another stored question).

Embeddings come from the default local MiniLM model and are kept in the temp directory between
runs. Figures are development figures.

    .venv/bin/python benchmarks/bench_verification.py --pairs 3000 --warmup 1000
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import platform
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmcache import CacheConfig, CachedLLM, CacheOptions, MiniLMEmbedder, Mode, SemanticCache
from llmcache.testing import FakeOpenAI

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "benchmarks" / "quora_pairs.jsonl.gz"
STATIC = (0.80, 0.85, 0.90, 0.95)
BUDGETS = (0.01, 0.02, 0.05)


class Precomputed:
    """The MiniLM vectors of the sample, computed once: the benchmark times the cache, not the
    model."""

    def __init__(self, model_id: str, table: dict[str, NDArray[np.float32]]) -> None:
        self.model_id = model_id
        self.table = table
        self.dim = len(next(iter(table.values())))

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        return np.stack([self.table[t] for t in texts])


def load_pairs(path: Path, n: int, seed: int) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        pairs = [json.loads(line) for line in f]
    # Stripped as the cache strips keywords (its embedding text); a blank question is no prompt.
    pairs = [
        {**p, "a": p["a"].strip(), "b": p["b"].strip()}
        for p in pairs
        if p["a"].strip() and p["b"].strip()
    ]
    return random.Random(seed).sample(pairs, n)


def embeddings(texts: list[str]) -> tuple[str, dict[str, NDArray[np.float32]]]:
    model = MiniLMEmbedder()
    unique = sorted(set(texts))
    digest = hashlib.sha256("\n".join([model.model_id, *unique]).encode()).hexdigest()[:16]
    cache = Path(tempfile.gettempdir()) / "llmcache-bench-verification" / f"{digest}.npy"
    if cache.exists():
        vectors = np.load(cache)
    else:
        started = time.perf_counter()
        vectors = np.concatenate(
            [model.embed(unique[i : i + 256]) for i in range(0, len(unique), 256)]
        )
        print(f"embedded {len(unique)} texts in {time.perf_counter() - started:.0f} s")
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.save(cache, vectors)
    return model.model_id, dict(zip(unique, vectors, strict=True))


def _answers(pairs: list[dict[str, Any]]) -> dict[str, str]:
    """The true answer of every question of the sample: questions joined by a duplicate label
    (directly or through others) share one, every other question has its own."""
    parent: dict[str, str] = {}

    def root(q: str) -> str:
        parent.setdefault(q, q)
        while parent[q] != q:
            parent[q] = parent[parent[q]]
            q = parent[q]
        return q

    for pair in pairs:
        a, b = root(pair["a"]), root(pair["b"])
        if pair["duplicate"] and a != b:
            parent[b] = a
    return {q: f"the answer to {root(q)!r}" for q in parent}


def run(
    pairs: list[dict[str, Any]],
    embedder: Precomputed,
    warmup: int,
    *,
    threshold: float | None = None,
    budget: float | None = None,
) -> dict[str, Any]:
    # The fake LLM knows each question's true answer by the id in its message. One answer per
    # question, shared by its labelled duplicates and by the same words asked again (a question
    # that is word for word another pair's is the same question, and hitting it is right).
    answers = _answers(pairs)
    truth: dict[str, str] = {}
    for i, pair in enumerate(pairs):
        truth[f"{i}a"] = answers[pair["a"]]
        truth[f"{i}b"] = answers[pair["b"]]

    def answer(request: dict[str, Any]) -> str:
        return truth[request["messages"][0]["content"].rsplit("#", 1)[1]]

    config = CacheConfig(
        threshold=threshold if threshold is not None else 0.9, wrong_hit_budget=budget
    )
    with tempfile.TemporaryDirectory() as tmp:
        cache = SemanticCache(Path(tmp) / "c", embedder=embedder, config=config)
        client = CachedLLM(FakeOpenAI(answer), cache=cache)

        def ask(question: str, ident: str, mode: Mode | None = None) -> tuple[str, Any]:
            response, info = client.chat.completions.create_with_info(
                model="gpt-4o-mini",
                messages=[{"role": "user", "content": f"{question}\n#{ident}"}],
                cache=CacheOptions(category="qqp", keywords=[question], mode=mode),
            )
            return response.choices[0].message.content or "", info

        for i, pair in enumerate(pairs):
            ask(pair["a"], f"{i}a", Mode.COLLECT)
        rows: list[tuple[str, bool, float, bool]] = []
        for i, pair in enumerate(pairs):
            started = time.perf_counter()
            content, info = ask(pair["b"], f"{i}b")
            elapsed = time.perf_counter() - started
            kind = "miss"
            if info.outcome == "hit":
                kind = "correct" if content == truth[f"{i}b"] else "wrong"
            rows.append((kind, info.explored, elapsed, info.outcome == "hit"))
        stats = cache.stats().tables[0]
        cache.close()

    def tally(part: list[tuple[str, bool, float, bool]]) -> dict[str, Any]:
        counts = {k: sum(r[0] == k for r in part) for k in ("correct", "wrong", "miss")}
        hits = counts["correct"] + counts["wrong"]
        return {
            **counts,
            "explored": sum(r[1] for r in part),
            "wrong_rate": counts["wrong"] / hits if hits else 0.0,
            "ms_hit": 1000 * float(np.mean([r[2] for r in part if r[3]] or [np.nan])),
            "ms_miss": 1000 * float(np.mean([r[2] for r in part if not r[3]] or [np.nan])),
        }

    return {
        "all": tally(rows),
        "after": tally(rows[warmup:]),
        "threshold": stats.threshold_in_force if budget is not None else threshold,
        "labels": stats.labels,
    }


def report(name: str, pairs: list[dict[str, Any]], embedder: Precomputed, warmup: int) -> None:
    duplicates = sum(p["duplicate"] for p in pairs)
    print(f"\n{name}: {len(pairs)} pairs ({duplicates} duplicates), warm-up {warmup} asks")
    header = (
        f"{'operating point':<15} {'thresh':>6} | {'correct':>7} {'wrong':>5} {'miss':>5} "
        f"{'wrong%':>6} {'expl':>4} | after warm-up {'correct':>7} {'wrong':>5} {'miss':>5} "
        f"{'wrong%':>6} {'expl':>4} | {'ms/hit':>6} {'ms/miss':>7}"
    )
    print(header)
    print("-" * len(header))
    points: list[tuple[str, dict[str, Any]]] = [
        (f"cos >= {t:.2f}", {"threshold": t}) for t in STATIC
    ] + [(f"budget d={d:.2f}", {"budget": d}) for d in BUDGETS]
    for label, kwargs in points:
        result = run(pairs, embedder, warmup, **kwargs)
        a, w = result["all"], result["after"]
        print(
            f"{label:<15} {result['threshold']:>6.3f} | {a['correct']:>7} {a['wrong']:>5} "
            f"{a['miss']:>5} {100 * a['wrong_rate']:>5.1f}% {a['explored']:>4} | "
            f"{'':>13} {w['correct']:>7} {w['wrong']:>5} {w['miss']:>5} "
            f"{100 * w['wrong_rate']:>5.1f}% {w['explored']:>4} | "
            f"{a['ms_hit']:>6.2f} {a['ms_miss']:>7.2f}"
        )
        sys.stdout.flush()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--pairs", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not args.data.exists():
        print(
            f"skipped: the development set is absent ({args.data}); it lives in "
            "../shared/benchmarks/ beside the repository"
        )
        return 0
    pairs = load_pairs(args.data, args.pairs, args.seed)
    model_id, table = embeddings([p[k] for p in pairs for k in ("a", "b")])
    embedder = Precomputed(model_id, table)
    print(
        f"bench_verification: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"{platform.machine()} {os.cpu_count()} cpus, Python {platform.python_version()}, "
        f"load {os.getloadavg()[0]:.1f}; {model_id}; sample seed {args.seed}. "
        "Development figures."
    )
    report("mixed", pairs, embedder, args.warmup)
    paraphrases = [p for p in pairs if p["duplicate"]]
    report("paraphrases", paraphrases, embedder, min(args.warmup, len(paraphrases) // 3))
    print(
        "\nthresh: the static threshold, or the budget's learned one at the end of the stream "
        "(1.000: exact repeats only); expl: would-be hits explored (paid, served as misses)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
