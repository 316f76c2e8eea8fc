"""The town on the default local model without a cache, with a cold cache and with a warm one.

    python benchmarks/bench_town_speed.py                      # Alice and Mary, 06:00-12:00
    python benchmarks/bench_town_speed.py --days 0.5 --agents Alice Mary Ethan --json speed.json

Three runs of the same simulated hours (same seed), one after another, against one local server:

- ``no cache``: every prompt goes to the model (``Mode.OFF``: validated and recorded only);
- ``cold``: ``Mode.ONLINE`` on an empty cache -- the run fills it as it goes;
- ``warm``: ``Mode.ONLINE`` on the cache the cold run left.

For each: wall time, prompts, the prompts the model answered (misses and bypassed categories),
hits and their share, and the cost at the study's prices (what llmcache's ledger records). The
speed-ups are ratios of wall times measured in this one run. The model samples, so the three
runs drift apart after the first differing answer: compare their prompts per second too, not
only their wall times.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_models import header_line, machine_info  # a sibling script (benchmarks/ is on the path)
from pydantic import BaseModel

from agent_core import Simulation, load_agents, open_town_llm
from llmcache import Mode
from llmcache.embedders import default_embedder
from llmcache.llm import open_llm
from llmcache.recording import read_records

MODES = {"no cache": Mode.OFF, "cold": Mode.ONLINE, "warm": Mode.ONLINE}


class SpeedRow(BaseModel):
    config: str
    wall_seconds: float
    prompts: int
    model_answered: int  # misses and bypassed categories: prompts the model answered
    hits: int
    cost_usd: float
    avoided_usd: float
    # Per category: prompts, hits, and the seconds the model's answers took (summed over
    # calls, which overlap when prompts are in flight together: a share, not a wall time).
    by_category: dict[str, tuple[int, int, float]] = {}

    @property
    def hit_rate(self) -> float:
        return self.hits / self.prompts if self.prompts else 0.0


def run_once(
    config: str, client: Any, model: str, cache_dir: Path, args: argparse.Namespace
) -> SpeedRow:
    dataset = cache_dir.parent / f"{config.replace(' ', '_')}.jsonl"
    embedder = default_embedder()
    llm = open_town_llm(
        client,
        model=model,
        cache_dir=cache_dir,
        mode=MODES[config],
        embedder=embedder,
        record_to=dataset,
        threshold=args.threshold,
        max_attempts=2,
        concurrency=args.concurrency,
        rating_batch=args.rating_batch,
    )
    try:
        seeds = load_agents(names=args.agents)
        started = time.perf_counter()
        Simulation(llm, embedder=embedder, seeds=seeds, seed=args.seed).run(
            args.days, progress=not args.quiet, desc=config
        )
        wall = time.perf_counter() - started
    finally:
        llm.close()
    calls = read_records(dataset)
    hits = sum(1 for c in calls if c.outcome == "hit")
    by_category: dict[str, tuple[int, int, float]] = {}
    for c in calls:
        n, h, seconds = by_category.get(c.category, (0, 0, 0.0))
        hit = c.outcome == "hit"
        by_category[c.category] = (n + 1, h + hit, seconds + (0.0 if hit else c.latency_s))
    return SpeedRow(
        config=config,
        wall_seconds=round(wall, 1),
        prompts=len(calls),
        model_answered=len(calls) - hits,
        hits=hits,
        cost_usd=sum(c.cost_usd or 0.0 for c in calls),
        avoided_usd=sum(c.avoided_usd or 0.0 for c in calls),
        by_category=by_category,
    )


def print_categories(rows: list[SpeedRow]) -> None:
    """Where the runs differ: prompts (hits) and the model's seconds per category and run."""
    categories = sorted(
        {name for r in rows for name in r.by_category},
        key=lambda name: -max(r.by_category.get(name, (0, 0, 0.0))[0] for r in rows),
    )
    print()
    print("per category: prompts (hits) / seconds the model spent answering, summed over calls")
    print(f"{'category':<24}" + "".join(f"{r.config:>22}" for r in rows))
    for name in categories:
        cells = []
        for r in rows:
            n, h, seconds = r.by_category.get(name, (0, 0, 0.0))
            cells.append(f"{f'{n} ({h}) / {seconds:.0f} s':>22}")
        print(f"{name:<24}" + "".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=float, default=0.25, help="simulated days per run")
    parser.add_argument("--agents", nargs="*", default=["Alice Wilson", "Mary Oliver"])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threshold", type=float, help="online threshold (default: the town's)")
    parser.add_argument("--concurrency", type=int, default=4, help="the town's prompts in flight")
    parser.add_argument(
        "--rating-batch",
        type=int,
        default=1,
        help="importance ratings of one moment in one prompt (1: one each)",
    )
    parser.add_argument("--json", help="write the rows here too")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args()

    info = machine_info()
    rows: list[SpeedRow] = []
    with open_llm() as conn, tempfile.TemporaryDirectory(prefix="town-speed-") as tmp:
        client, model = conn.client, conn.backend.model
        for config in MODES:
            # "warm" reuses the directory "cold" filled; "no cache" has one of its own.
            cache_dir = Path(tmp) / ("none" if config == "no cache" else "cache")
            rows.append(run_once(config, client, model, cache_dir, args))

    print(header_line(info))
    print(
        f"# {len(args.agents)} agents x {args.days:g} simulated days, seed {args.seed}, "
        f"model {model}, {args.concurrency} prompts in flight at most, "
        f"up to {args.rating_batch} ratings a prompt"
    )
    print(
        f"{'config':<10}{'wall s':>9}{'prompts':>9}{'prompts/s':>11}{'model':>7}{'hits':>6}"
        f"{'hit rate':>10}{'cost $':>10}{'speed-up':>10}"
    )
    base = rows[0]
    for r in rows:
        print(
            f"{r.config:<10}{r.wall_seconds:>9.1f}{r.prompts:>9}"
            f"{r.prompts / max(r.wall_seconds, 1e-9):>11.2f}{r.model_answered:>7}{r.hits:>6}"
            f"{r.hit_rate:>10.1%}{r.cost_usd:>10.4f}"
            f"{base.wall_seconds / max(r.wall_seconds, 1e-9):>9.2f}x"
        )
    print_categories(rows)
    if args.json:
        payload = {
            "machine": info.model_dump(),
            "args": vars(args),
            "rows": [r.model_dump() | {"hit_rate": r.hit_rate} for r in rows],
        }
        Path(args.json).write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
