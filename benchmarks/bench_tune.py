"""Replay and tune on the shared agent's day: a development figure, and how fast replay is.

    python benchmarks/bench_tune.py [--synthetic 10000] [--skip-tune]

On ``../shared/benchmarks/park_demo_isabella`` (one agent's gpt-3.5-turbo importance ratings of
one simulated day, rendered through Park's poignancy prompts by ``park_calls.py``), the
replay table of:

- ``default``: keyword mode (the keywords are the memory), threshold 0.9;
- ``full``: full-prompt mode, threshold 0.9;
- ``budget``: the wrong-hit budget, ``wrong_hit_budget=0.05``, equivalence within 1;
- ``tuned``: ``tune`` on the first half of the day by time, checked on the second;

each on the second half of the day (the check part; the cache warmed by the first half, as in
use) and on the whole day. It is ONE agent of one run, a development set: these are
development figures, not a default tuned to it.

Then the timings (after the embeddings are computed, which is separate and printed too): ten
configurations replayed over the day, and one configuration over ``--synthetic`` synthetic
calls (20 categories x 5 agents, keywords drawn from 2,000 phrases, ratings as answers).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

from bench_models import header_line, machine_info  # a sibling script (benchmarks/ is on the path)
from park_calls import PARK, park_calls

from llmcache import CacheConfig, EmbedMode
from llmcache.embedders import StoredEmbedder, default_embedder
from llmcache.replay import (
    Figures,
    ReplayCall,
    ReplayReport,
    check_mask,
    embedding_texts,
    equivalences_for,
    replay,
    tune,
)
from llmcache.replay import figures as figures_of


def warm(embedder: StoredEmbedder, calls: list[ReplayCall], modes: list[EmbedMode]) -> int:
    return embedder.warm(embedding_texts(calls, modes))


def _check_part(report: ReplayReport, calls: list[ReplayCall], mask: list[bool]) -> str:
    """One row: the figures of the check part's calls, all categories together."""
    idx = [i for i, checked in enumerate(mask) if checked]
    f = figures_of(
        [report.results[i] for i in idx], [calls[i] for i in idx], equivalences_for(calls)
    )
    return _row(f)


def _row(f: Figures) -> str:
    if not f.served:
        interval = "nothing served"
    else:
        interval = f"{f.excess:+.1f} [{f.excess_low:+.1f}, {f.excess_upper:+.1f}]"
    return (
        f"{f.calls:>5} {f.served:>6} {100 * f.cost_cut:>8.1f}% "
        f"{f.acceptable:>4}/{f.served:<4} {interval}"
    )


def _synthetic(n: int, seed: int = 1) -> list[ReplayCall]:
    rng = random.Random(seed)
    words = [f"{a} {b}" for a in ("walk", "talk", "cook", "read", "paint", "plan", "clean",
             "meet", "write", "fix") for b in range(200)]  # fmt: skip
    out = []
    for i in range(n):
        phrase = rng.choice(words)
        out.append(
            ReplayCall(
                category=f"template {i % 20}",
                agent=f"agent {rng.randrange(5)}",
                messages=[{"role": "user", "content": f"Rate the poignancy of: {phrase}"}],
                keywords=[phrase],
                answer=str(1 + sum(map(ord, phrase)) % 10),
                time=float(i),
                params={"model": "gpt-4o-mini"},
            )
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--synthetic", type=int, default=10_000, help="calls (0: skip)")
    parser.add_argument("--skip-tune", action="store_true", help="no tuning (faster)")
    parser.add_argument(
        "--embeddings",
        type=Path,
        default=Path(tempfile.gettempdir()) / "llmcache-bench-replay",
        help="where the embeddings are kept between runs",
    )
    args = parser.parse_args()
    print(header_line(machine_info()))
    if not (PARK / "nodes.json").exists():
        print(f"skipped: {PARK} is absent (the shared development data beside the repository)")
        return 0
    embedder = StoredEmbedder(default_embedder(), args.embeddings)
    calls = park_calls()
    started = time.perf_counter()
    made = warm(embedder, calls, [EmbedMode.KEYWORD, EmbedMode.FULL])
    embedder.save()
    print(
        f"shared agent: {len(calls)} rated memories; {made} texts embedded in "
        f"{time.perf_counter() - started:.1f} s ({len(embedder)} kept)"
    )
    mask = check_mask(calls, "time", 0.5)
    configs = {
        "default (keyword, 0.9)": CacheConfig(),
        "full mode (0.9)": CacheConfig(embed=EmbedMode.FULL),
        "budget (delta 0.05, within 1)": CacheConfig(wrong_hit_budget=0.05),
    }
    if not args.skip_tune:
        started = time.perf_counter()
        result = tune(calls, delta=0.05, split="time", check_fraction=0.5, embedder=embedder)
        tuned_s = time.perf_counter() - started
        print(f"tuned in {tuned_s:.1f} s ({result.candidates} settings replayed):")
        for name, choice in sorted(result.choices.items()):
            chosen = "uncached" if choice.setting is None else choice.setting.describe()
            print(f"  {name}: {chosen} -- {choice.why}")
        configs["tuned (first half; DEVELOPMENT figure)"] = result.config
    print()
    print("DEVELOPMENT figures (one agent of one run), second half of the day (check part):")
    print(f"{'setting':<40} {'calls':>5} {'served':>6} {'cost cut':>9} acceptable excess [95%]")
    reports = {}
    for name, config in configs.items():
        reports[name] = replay(calls, config, embedder=embedder, seed=0)
        print(f"{name:<40} {_check_part(reports[name], calls, mask)}")
    print()
    print("the whole day:")
    for name, report in reports.items():
        print(f"{name:<40} {_row(report.overall)}")

    # Ten configurations over the day, embeddings computed.
    ten = [CacheConfig(threshold=t) for t in (0.85, 0.88, 0.9, 0.92, 0.95)] + [
        CacheConfig(embed=EmbedMode.FULL, threshold=t) for t in (0.9, 0.93, 0.95, 0.97, 0.99)
    ]
    started = time.perf_counter()
    for config in ten:
        replay(calls, config, embedder=embedder, seed=0)
    ten_s = time.perf_counter() - started
    print()
    print(
        f"ten configurations over the day ({len(calls)} calls each): {ten_s:.1f} s in all, "
        f"{ten_s / 10:.2f} s each"
    )
    if args.synthetic:
        synthetic = _synthetic(args.synthetic)
        started = time.perf_counter()
        made = warm(embedder, synthetic, [EmbedMode.KEYWORD])
        embedder.save()
        embed_s = time.perf_counter() - started
        started = time.perf_counter()
        report = replay(synthetic, CacheConfig(), embedder=embedder, seed=0)
        replay_s = time.perf_counter() - started
        print(
            f"one configuration over {len(synthetic):,} synthetic calls: {replay_s:.1f} s "
            f"({1000 * replay_s / len(synthetic):.2f} ms a call; "
            f"served {report.overall.served:,}); "
            f"embeddings before it: {made} texts in {embed_s:.1f} s"
        )
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
