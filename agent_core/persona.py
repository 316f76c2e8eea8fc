"""Agents' seed information: who they are before the simulation starts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, TypeAdapter

from .world import World

__all__ = ["AgentSeed", "load_agents"]


class AgentSeed(BaseModel):
    """One agent as a data file describes it (see ``agent_core/data/agents.json``).

    ``seed_structures`` start the agent's personal tree; ``bed`` is the item it sleeps in;
    ``routine`` lists the activities it usually plans its days around (Park et al.'s
    "daily plan requirement").
    """

    name: str = Field(min_length=1)
    age: int = Field(ge=0)
    gender: Literal["female", "male", "other"]
    innate: list[str] = Field(min_length=1)
    seed_structures: list[str] = Field(min_length=1)
    home: str
    bed: str
    seed_memory: str = Field(min_length=1)
    lifestyle: str = ""
    routine: list[str] = Field(default_factory=list)

    @property
    def first_name(self) -> str:
        return self.name.split()[0]

    def check_against(self, world: World) -> None:
        """Raise ``ValueError`` if the seed names places the world does not have."""
        for s in [*self.seed_structures, self.home]:
            if s not in world.structures:
                raise ValueError(f"{self.name}: unknown structure {s!r}")
        if self.bed not in world or world.actor(self.bed).kind != "item":
            raise ValueError(f"{self.name}: unknown bed {self.bed!r}")
        if world.structure_of(self.bed) != self.home:
            raise ValueError(f"{self.name}: the bed is not in the home {self.home!r}")


_SEEDS = TypeAdapter(list[AgentSeed])


def load_agents(
    path: str | Path | None = None,
    *,
    names: Sequence[str] | None = None,
    world: World | None = None,
) -> list[AgentSeed]:
    """Agents from a JSON data file (the bundled eight when ``path`` is ``None``).

    ``names`` keeps only those agents (full or first names, in the file's order); ``world``
    checks that every place an agent names exists.
    """
    if path is None:
        text = resources.files("agent_core").joinpath("data/agents.json").read_text("utf-8")
    else:
        text = Path(path).read_text("utf-8")
    seeds = _SEEDS.validate_python(json.loads(text))
    if len({s.name for s in seeds}) != len(seeds):
        raise ValueError("agent names must be unique")
    if names:
        wanted = {n.strip().lower() for n in names}
        unknown = wanted - {s.name.lower() for s in seeds} - {s.first_name.lower() for s in seeds}
        if unknown:
            raise ValueError(f"unknown agents: {sorted(unknown)}")
        seeds = [s for s in seeds if s.name.lower() in wanted or s.first_name.lower() in wanted]
    if world is not None:
        for s in seeds:
            s.check_against(world)
    return seeds
