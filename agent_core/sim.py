"""The simulation loop: a clock, a world, the agents, and what a run reports.

A run is reproducible given its seed and an LLM that answers one (prompt, seed) the same way
every time: agents act in a fixed order, every random draw comes from a per-agent
``random.Random`` seeded from the run seed and the agent's name, nothing iterates over unordered
collections, and a :class:`~agent_core.llm.TownLLM` given the run's seed sends every call a
sampling seed drawn from it (llama.cpp's server honours it; OpenAI's is best effort).
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from llmcache.embedders import Embedder

from .agent import Agent, Town
from .clock import MINUTES_PER_DAY, Clock
from .config import SimConfig
from .llm import TownLLM
from .memory import EmbeddingMemo
from .persona import AgentSeed, load_agents
from .templates import TEMPLATES
from .world import World, load_world

__all__ = ["ObservedPoint", "RunSummary", "Simulation"]

logger = logging.getLogger("agent_core")

_GROUP_OF = {t.category: t.group for t in TEMPLATES}


class ObservedPoint(BaseModel):
    """One agent's number of observed actors at one simulated time."""

    sim_minute: int
    agent: str
    observed_actors: int


class RunSummary(BaseModel):
    """What a run did: prompts per category and group, failures, observed actors over time."""

    seed: int
    days: float
    agents: list[str]
    wall_seconds: float
    calls: dict[str, int]
    calls_per_day: dict[str, float]
    groups: dict[str, int]
    outcomes: dict[str, int]
    attempts: dict[str, int]
    resubmissions: dict[str, int]  # extra attempts, summed
    # Calls the model answered validly at its first attempt; calls that needed more than one.
    first_try: dict[str, int] = Field(default_factory=dict)
    resubmitted: dict[str, int] = Field(default_factory=dict)
    escalated: dict[str, int]
    failed: dict[str, int]
    # Calls answered inside a prompt that asked several, and those prompts
    # (agent_core.rating_batch).
    batched: dict[str, int] = Field(default_factory=dict)
    batches: dict[str, int] = Field(default_factory=dict)
    reflections: dict[str, int]
    conversations: dict[str, int]
    memories: dict[str, int]
    observed_actors: dict[str, int]
    observed_history: list[ObservedPoint] = Field(default_factory=list)

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())


class Simulation:
    """The town: ``Simulation(llm, embedder=...).run(days=15)``.

    ``world`` and ``seeds`` default to the bundled town and its eight agents.
    """

    def __init__(
        self,
        llm: TownLLM,
        *,
        embedder: Embedder,
        world: World | None = None,
        seeds: Sequence[AgentSeed] | None = None,
        config: SimConfig | None = None,
        seed: int = 0,
    ) -> None:
        self.llm = llm
        self.world = world if world is not None else load_world()
        self.config = config or SimConfig()
        self.seed = seed
        self.clock = Clock(self.world.start_date)
        self.embed = EmbeddingMemo(embedder)
        seeds = list(seeds) if seeds is not None else load_agents(world=self.world)
        for s in seeds:
            s.check_against(self.world)
        self.agents = Town(
            Agent(
                s,
                self.world,
                self.clock,
                llm,
                self.embed,
                self.config,
                # A string seed is hashed with SHA-512 by random: stable across processes.
                random.Random(f"{seed}:{s.name}"),
                random.Random(f"{seed}:{s.name}:options"),
            )
            for s in seeds
        )
        self.now = self.config.plan_hour * 60
        self.started_at = self.now
        self.history: list[ObservedPoint] = []
        self.wall_seconds = 0.0

    def step(self) -> None:
        for agent in self.agents:
            agent.step(self.now, self.agents)
        self.now += self.config.minutes_per_step
        if self.now % 60 == 0:
            self._snapshot()

    def _snapshot(self) -> None:
        for agent in self.agents:
            self.history.append(
                ObservedPoint(
                    sim_minute=self.now, agent=agent.name, observed_actors=len(agent.tree)
                )
            )

    def run(
        self, days: float, *, progress: bool = False, desc: str = "simulating", position: int = 0
    ) -> RunSummary:
        """Simulate ``days`` more days; ``progress`` shows a tqdm bar of simulated steps
        (``desc`` labels it, ``position`` is its line when several runs show bars at once)."""
        steps = round(days * MINUTES_PER_DAY / self.config.minutes_per_step)
        started = time.perf_counter()
        bar: Any = None
        if progress:
            try:
                from tqdm import tqdm
            except ImportError:  # the bar is an extra ([town] or [experiments]), not a need
                logger.info("no progress bar: pip install 'llmcache[town]' for one")
            else:
                bar = tqdm(
                    total=steps, unit="step", desc=desc, position=position, dynamic_ncols=True
                )
        try:
            for _ in range(steps):
                self.step()
                if bar is not None:
                    bar.update(1)
                    if self.now % MINUTES_PER_DAY == 0:
                        bar.set_postfix(
                            day=self.clock.day(self.now), prompts=self.llm.stats.total()
                        )
        finally:
            if bar is not None:
                bar.close()
            self.wall_seconds += time.perf_counter() - started
        return self.summary()

    def summary(self) -> RunSummary:
        stats = self.llm.stats
        days = (self.now - self.started_at) / MINUTES_PER_DAY
        groups: Counter[str] = Counter()
        for category, n in stats.calls.items():
            groups[_GROUP_OF.get(category, category)] += n
        return RunSummary(
            seed=self.seed,
            days=days,
            agents=[a.name for a in self.agents],
            wall_seconds=round(self.wall_seconds, 3),
            calls=dict(sorted(stats.calls.items())),
            calls_per_day={
                k: round(v / days, 2) if days else 0.0 for k, v in sorted(stats.calls.items())
            },
            groups=dict(sorted(groups.items())),
            outcomes=dict(sorted(stats.outcomes.items())),
            attempts=dict(sorted(stats.attempts.items())),
            resubmissions=dict(sorted(stats.resubmissions.items())),
            first_try=dict(sorted(stats.first_try.items())),
            resubmitted=dict(sorted(stats.resubmitted.items())),
            escalated=dict(sorted(stats.escalated.items())),
            failed=dict(sorted(stats.failed.items())),
            batched=dict(sorted(stats.batched.items())),
            batches=dict(sorted(stats.batches.items())),
            reflections={a.name: a.reflections for a in self.agents},
            conversations={a.name: a.conversations for a in self.agents},
            memories={a.name: len(a.memory) for a in self.agents},
            observed_actors={a.name: len(a.tree) for a in self.agents},
            observed_history=list(self.history),
        )
