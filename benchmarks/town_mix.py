"""The town's own prompts, in the town's proportions, as a mix for ``bench_local_llm.py``.

    python benchmarks/bench_local_llm.py --mix town_mix:town_mix --sequential-only

One simulated day of the bundled town (8 agents, seed 1) is run with the scripted double, and
every prompt an agent sends through ``TownLLM.ask`` is kept, rendered by the template exactly
as the town renders it (summary block, slots, answer format) with the template's strict JSON
schema. A pass of the benchmark draws ``agents x questions`` of them, split over the 14
categories in the shares that day produced (largest remainder; about 52% importance, 20%
finding location, 11% new actor statuses, 5% plan decomposition, ...), from the first
``agents`` agents, in the order the town asked them. Each pass draws other prompts of the same
agents, so a warm pass reuses agent prefixes, not whole prompts.

Rare categories (initial plans, reflection, dialogue: under 1% each) only appear in a pass of
a few hundred prompts; a smaller pass measures the bulk of the town's traffic, which is what
decides a run's duration. ``max_tokens`` per category leaves room for the longest valid answer.
"""

from __future__ import annotations

import functools
import random
import tempfile
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel

from agent_core import Requirements, Simulation, Template, TownLLM
from agent_core.llm import cache_config
from agent_core.templates import TEMPLATES, SlotValue
from agent_core.testing import ScriptedLLM
from llmcache import CachedLLM, SemanticCache
from llmcache.testing import HashEmbedder

__all__ = ["MAX_TOKENS", "day_shares", "town_mix", "town_prompts"]

R = TypeVar("R", bound=BaseModel)
Prompt = dict[str, Any]

#: Answer length caps per category (constrained decoding stops at the closing brace).
MAX_TOKENS = {t.category: t.max_tokens for t in TEMPLATES}


@dataclass(frozen=True)
class _Asked:
    index: int
    category: str
    agent: str
    messages: list[dict[str, str]]
    schema: dict[str, Any]


class _Recording(TownLLM):
    """A TownLLM that keeps every prompt as rendered, then answers it as usual."""

    def __init__(self, llm: CachedLLM) -> None:
        super().__init__(llm, model="scripted")
        self.asked: list[_Asked] = []

    def ask(
        self,
        t: Template[R],
        *,
        agent: str,
        summary_block: str,
        slots: Mapping[str, SlotValue],
        requirements: Requirements | None = None,
        context: Mapping[str, str] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> R | None:
        self.asked.append(
            _Asked(
                index=len(self.asked),
                category=t.category,
                agent=agent,
                messages=t.render(summary_block, agent, slots),
                schema=t.json_schema(),
            )
        )
        return super().ask(
            t,
            agent=agent,
            summary_block=summary_block,
            slots=slots,
            requirements=requirements,
            context=context,
            metadata=metadata,
        )


@functools.cache
def _recorded_day(seed: int, days: float) -> tuple[tuple[_Asked, ...], tuple[str, ...]]:
    with tempfile.TemporaryDirectory(prefix="town-mix-") as tmp:
        cache = SemanticCache(tmp, embedder=HashEmbedder(), config=cache_config())
        llm = _Recording(CachedLLM(ScriptedLLM(seed=seed), cache=cache))
        sim = Simulation(llm, embedder=HashEmbedder(), seed=seed)
        sim.run(days)
        llm.close()
    return tuple(llm.asked), tuple(a.name for a in sim.agents)


def town_prompts(seed: int = 1, days: float = 1.0) -> list[Prompt]:
    """Every prompt of ``days`` simulated days of the town, in the order it was asked."""
    asked, _ = _recorded_day(seed, days)
    return [_prompt(a) for a in asked]


def day_shares(seed: int = 1, days: float = 1.0) -> dict[str, float]:
    """Each category's share of the town's prompts over ``days`` simulated days."""
    asked, _ = _recorded_day(seed, days)
    counts = Counter(a.category for a in asked)
    return {c: n / len(asked) for c, n in counts.most_common()}


def _allocate(shares: Mapping[str, float], n: int) -> dict[str, int]:
    """``n`` prompts split by ``shares`` (largest remainder, ties by share)."""
    exact = {c: s * n for c, s in shares.items()}
    counts = {c: int(x) for c, x in exact.items()}
    rest = sorted(shares, key=lambda c: (exact[c] - counts[c], shares[c]), reverse=True)
    for c in rest[: n - sum(counts.values())]:
        counts[c] += 1
    return {c: k for c, k in counts.items() if k}


def _prompt(a: _Asked) -> Prompt:
    return {
        "category": a.category,
        "agent": a.agent,
        "messages": a.messages,
        "schema": a.schema,
        "max_tokens": MAX_TOKENS[a.category],
    }


def town_mix(pass_index: int, agents: int, questions: int) -> list[Prompt]:
    """``agents x questions`` town prompts in the town's category shares (``--mix`` hook)."""
    asked, names = _recorded_day(1, 1.0)
    wanted = set(names[: max(1, agents)])
    chosen: list[_Asked] = []
    for category, k in _allocate(day_shares(), agents * questions).items():
        pool = [a for a in asked if a.category == category and a.agent in wanted]
        pool = pool or [a for a in asked if a.category == category]
        # One fixed shuffle per category; pass p takes the next k of it, so passes differ.
        order = random.Random(f"town-mix:{category}").sample(pool, len(pool))
        chosen += [order[(pass_index * k + i) % len(order)] for i in range(min(k, len(pool)))]
    return [_prompt(a) for a in sorted(chosen, key=lambda a: a.index)]


if __name__ == "__main__":
    for name, share in day_shares().items():
        print(f"{name:26} {100 * share:5.1f}%")
    print(f"{len(town_prompts())} prompts in one simulated day")
