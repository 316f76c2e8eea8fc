"""The town's own prompts, in the town's proportions, as a mix for ``bench_local_llm.py``.

    python benchmarks/bench_local_llm.py --mix town_mix:town_mix --sequential-only

    python benchmarks/bench_local_llm.py --mix town_mix:town_mix_template_schema --sequential-only

One simulated day of the bundled town (8 agents, seed 1) is run with the scripted double, and
every call an agent sends through ``TownLLM.send`` is kept and rendered exactly as the town
renders it, with the query's own JSON schema (``town_mix``) or the template's plain one
(``town_mix_template_schema``, how the town asked before per-query schemas). A pass of the
benchmark draws ``agents x questions`` of them, split over the 14 categories in the shares
that day produced (largest remainder; about 52% importance, 20% finding location, 11% new actor
statuses, 5% plan decomposition, ...), from the first ``agents`` agents, in the order the town
asked them. Each pass draws other prompts of the same
agents, so a warm pass reuses agent prefixes, not whole prompts.

Each prompt dict also carries its ``TownCall`` under ``"call"``, so a benchmark can send the
request exactly as the town does and check the answer with the call's own parser
(``bench_models.py``).

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

from agent_core import Simulation, TownCall, TownLLM
from agent_core.llm import cache_config
from agent_core.templates import TEMPLATES
from agent_core.testing import ScriptedLLM
from llmcache import CachedLLM, SemanticCache
from llmcache.testing import HashEmbedder

__all__ = ["MAX_TOKENS", "day_shares", "town_mix", "town_mix_template_schema", "town_prompts"]

R = TypeVar("R", bound=BaseModel)
Prompt = dict[str, Any]

#: Answer length caps per category (constrained decoding stops at the closing brace).
MAX_TOKENS = {t.category: t.max_tokens for t in TEMPLATES}


@dataclass(frozen=True)
class _Asked:
    index: int
    call: TownCall

    @property
    def category(self) -> str:
        return self.call.category

    @property
    def agent(self) -> str:
        return self.call.agent


class _Recording(TownLLM):
    """A TownLLM that keeps every call it sends, then answers it as usual."""

    def __init__(self, llm: CachedLLM) -> None:
        super().__init__(llm, model="scripted")
        self.asked: list[_Asked] = []

    def send(self, call: TownCall) -> Any:
        self.asked.append(_Asked(index=len(self.asked), call=call))
        return super().send(call)


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


def _prompt(a: _Asked, *, query_schema: bool = True) -> Prompt:
    call = a.call
    fmt = call.response_format() if query_schema else call.template.response_format()
    return {
        "category": call.category,
        "agent": call.agent,
        "messages": call.messages(),
        "schema": fmt["json_schema"]["schema"],
        "max_tokens": call.max_tokens,
        "call": call,
    }


def town_mix(pass_index: int, agents: int, questions: int) -> list[Prompt]:
    """``agents x questions`` town prompts in the town's category shares (``--mix`` hook), each
    with its query's own JSON schema, as the town sends them."""
    return _mix(pass_index, agents, questions, query_schema=True)


def town_mix_template_schema(pass_index: int, agents: int, questions: int) -> list[Prompt]:
    """The same prompts with the template's plain schema (how the town asked before per-query
    schemas): ``--mix town_mix:town_mix_template_schema`` measures the difference."""
    return _mix(pass_index, agents, questions, query_schema=False)


def _mix(pass_index: int, agents: int, questions: int, *, query_schema: bool) -> list[Prompt]:
    asked, names = _recorded_day(1, 1.0)
    wanted = set(names[: max(1, agents)])
    chosen: list[_Asked] = []
    for category, k in _allocate(day_shares(), agents * questions).items():
        pool = [a for a in asked if a.category == category and a.agent in wanted]
        pool = pool or [a for a in asked if a.category == category]
        # One fixed shuffle per category; pass p takes the next k of it, so passes differ.
        order = random.Random(f"town-mix:{category}").sample(pool, len(pool))
        chosen += [order[(pass_index * k + i) % len(order)] for i in range(min(k, len(pool)))]
    return [_prompt(a, query_schema=query_schema) for a in sorted(chosen, key=lambda a: a.index)]


if __name__ == "__main__":
    for name, share in day_shares().items():
        print(f"{name:26} {100 * share:5.1f}%")
    print(f"{len(town_prompts())} prompts in one simulated day")
