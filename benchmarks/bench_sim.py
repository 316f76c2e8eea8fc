"""Simulation overhead and prompt volume of the town, with the ScriptedLLM test double.

    python benchmarks/bench_sim.py                    # 8 agents x 15 simulated days
    python benchmarks/bench_sim.py --days 3 --malformed-rate 0.04 --json out.json

Every prompt goes through llmcache's CachedLLM (off mode: validated and recorded, never
cached) to a deterministic double, so the wall time is the town's own overhead plus the
wrapper's: what a real run adds on top of the model's latency. The prompts per category per
simulated day are compared with the study's runs: ~20,500 prompts per 15 simulated days for
8 agents (17,201 / 23,600 / 20,994 / 18,908 / 21,715 in its five runs), about 1,370 per day.
Goal: 8 agents x 15 days in under 5 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_models import header_line, machine_info  # beside this file

from agent_core import GROUPS, TEMPLATES, Simulation, load_agents, open_town_llm
from agent_core.testing import ScriptedLLM
from llmcache.embedders import Embedder

STUDY_RUNS = (17_201, 23_600, 20_994, 18_908, 21_715)
STUDY_DAYS = 15


class TimedClient:
    """Wraps the double to measure how much of the wall time is spent answering."""

    def __init__(self, inner: ScriptedLLM) -> None:
        self.inner = inner
        self.seconds = 0.0
        self.chat = self
        self.completions = self

    def create(self, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return self.inner.chat.completions.create(**kwargs)
        finally:
            self.seconds += time.perf_counter() - started


def embedder_named(name: str) -> Embedder:
    if name == "hash":
        from llmcache.testing import HashEmbedder

        return HashEmbedder()
    from llmcache.embedders import default_embedder

    return default_embedder()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=float, default=15.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--agents", nargs="*", help="default: all eight")
    parser.add_argument("--malformed-rate", type=float, default=0.0)
    parser.add_argument(
        "--embedder",
        choices=["hash", "minilm"],
        default="hash",
        help="memory relevance embedder (minilm: the real local model)",
    )
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
    print(header_line(machine_info()), flush=True)

    fake = TimedClient(ScriptedLLM(seed=args.seed, malformed_rate=args.malformed_rate))
    with tempfile.TemporaryDirectory() as tmp:
        dataset = Path(tmp) / "run.jsonl"
        llm = open_town_llm(fake, model="scripted", record_to=dataset, superior_model="gpt-4o")
        seeds = load_agents(names=args.agents) if args.agents else None
        started = time.perf_counter()
        sim = Simulation(llm, embedder=embedder_named(args.embedder), seeds=seeds, seed=args.seed)
        summary = sim.run(args.days, progress=True)
        wall = time.perf_counter() - started
        llm.close()
        dataset_mb = dataset.stat().st_size / 1e6

    days = summary.days
    total = summary.total_calls
    n_agents = len(summary.agents)
    study_mean = sum(STUDY_RUNS) / len(STUDY_RUNS)
    study_per_day = study_mean / STUDY_DAYS * n_agents / 8

    print(
        f"\n{n_agents} agents x {days:g} simulated days, seed {args.seed}, "
        f"embedder {args.embedder}, malformed rate {args.malformed_rate}"
    )
    print(f"wall time          {wall:8.1f} s   ({wall / days:.2f} s per simulated day)")
    print(f"  in the LLM double {fake.seconds:7.1f} s   ({100 * fake.seconds / wall:.0f}%)")
    print(f"  town + llmcache  {wall - fake.seconds:8.1f} s")
    print(f"dataset            {dataset_mb:8.1f} MB JSONL")
    print(f"prompts            {total:8d}   ({total / days:.0f} per simulated day)")
    print(
        f"study (8 agents)   {study_mean:8.0f}   per 15 days, {study_per_day:.0f} per day "
        f"(runs {min(STUDY_RUNS)}-{max(STUDY_RUNS)})"
    )
    print(f"ours / study       {total / days / study_per_day:8.2f}")
    print()
    print(f"{'category':<26}{'group':<27}{'total':>7}{'per day':>9}{'share':>7}")
    by_group = {g: 0 for g in GROUPS}
    for t in TEMPLATES:
        n = summary.calls.get(t.category, 0)
        by_group[t.group] += n
        print(f"{t.category:<26}{t.group:<27}{n:7d}{n / days:9.1f}{100 * n / max(total, 1):6.1f}%")
    print()
    for group, n in by_group.items():
        print(f"{'':<26}{group:<27}{n:7d}{n / days:9.1f}{100 * n / max(total, 1):6.1f}%")
    resub = sum(summary.resubmissions.values())
    print(
        f"\nresubmissions {resub} ({100 * resub / max(total, 1):.2f}% of prompts; study 3.79%), "
        f"escalated {sum(summary.escalated.values())}, failed {sum(summary.failed.values())}"
    )
    observed = summary.observed_actors
    print(
        f"observed actors at the end: mean {sum(observed.values()) / len(observed):.0f}, "
        f"min {min(observed.values())}, max {max(observed.values())} (of 284)"
    )
    print(
        f"reflections {sum(summary.reflections.values())}, "
        f"conversations {sum(summary.conversations.values()) // 2}"
    )

    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "wall_seconds": wall,
                    "llm_seconds": fake.seconds,
                    "summary": summary.model_dump(exclude={"observed_history"}),
                    "study_per_day": study_per_day,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
