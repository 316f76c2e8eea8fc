"""The environment tree: world → structures → areas → items, every actor with a status.

Actors are addressed by their path joined with ``": "`` (``"Wilson Family House: Kitchen:
White Fridge"``), the form the prompts show. Each agent's knowledge of the world is a
:class:`PersonalTree`: a subset of the addresses that grows as the agent observes.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, model_validator

__all__ = [
    "IDLE",
    "SEP",
    "Actor",
    "AreaSpec",
    "ItemSpec",
    "PersonalTree",
    "StructureSpec",
    "World",
    "WorldSpec",
    "load_world",
]

SEP = ": "
IDLE = "Idle"

_NUMBERED = re.compile(r"^(.*\S)\s+\d+$")


class ItemSpec(BaseModel):
    """An item in a data file; ``count`` expands to ``"<name> 1"`` … ``"<name> n"``."""

    name: str = Field(min_length=1)
    status: str = IDLE
    count: int | None = Field(default=None, ge=1)


class AreaSpec(BaseModel):
    name: str = Field(min_length=1)
    items: list[ItemSpec] = Field(default_factory=list)


class StructureSpec(BaseModel):
    name: str = Field(min_length=1)
    kind: str = "building"
    position: tuple[float, float]
    areas: list[AreaSpec] = Field(min_length=1)


class WorldSpec(BaseModel):
    """The schema of a world data file (see ``agent_core/data/world.json``)."""

    name: str
    start_date: date = date(2024, 2, 12)
    structures: list[StructureSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> WorldSpec:
        names = [s.name for s in self.structures]
        if len(set(names)) != len(names):
            raise ValueError("structure names must be unique")
        for s in self.structures:
            areas = [a.name for a in s.areas]
            if len(set(areas)) != len(areas):
                raise ValueError(f"area names must be unique within {s.name}")
        return self


ActorKind = Literal["world", "structure", "area", "item"]


@dataclass
class Actor:
    """One node of the environment tree."""

    address: str
    name: str
    kind: ActorKind
    parent: str | None
    status: str = IDLE

    @property
    def label(self) -> str:
        """The name without a trailing number: ``"Student Chair 3"`` → ``"Student Chair"``.

        Prompts and memories use labels so that identical items read identically (as in the
        study's keywords, e.g. ``"Tree in Victoria Park is Idle"``).
        """
        match = _NUMBERED.match(self.name)
        return match.group(1) if match else self.name


class World:
    """The shared environment: every actor, its place in the tree and its current status."""

    def __init__(self, spec: WorldSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.start_date = spec.start_date
        self.actors: dict[str, Actor] = {}
        self.structures: list[str] = []
        self.areas_of: dict[str, list[str]] = {}
        self.items_of: dict[str, list[str]] = {}
        self.position: dict[str, tuple[float, float]] = {}
        self.actors[spec.name] = Actor(spec.name, spec.name, "world", None)
        for s in spec.structures:
            self.actors[s.name] = Actor(s.name, s.name, "structure", spec.name)
            self.structures.append(s.name)
            self.position[s.name] = (float(s.position[0]), float(s.position[1]))
            self.areas_of[s.name] = []
            for a in s.areas:
                area = s.name + SEP + a.name
                self.actors[area] = Actor(area, a.name, "area", s.name)
                self.areas_of[s.name].append(area)
                self.items_of[area] = []
                for item in a.items:
                    names = (
                        [f"{item.name} {i}" for i in range(1, item.count + 1)]
                        if item.count
                        else [item.name]
                    )
                    for name in names:
                        address = area + SEP + name
                        if address in self.actors:
                            raise ValueError(f"duplicate item {address!r}")
                        self.actors[address] = Actor(address, name, "item", area, item.status)
                        self.items_of[area].append(address)

    def __len__(self) -> int:
        return len(self.actors)

    def __contains__(self, address: object) -> bool:
        return address in self.actors

    def actor(self, address: str) -> Actor:
        return self.actors[address]

    def status(self, address: str) -> str:
        return self.actors[address].status

    def set_status(self, address: str, status: str) -> None:
        self.actors[address].status = status

    def structure_of(self, address: str) -> str:
        """The structure an area or item belongs to (a structure is its own)."""
        actor = self.actors[address]
        while actor.kind not in ("structure", "world"):
            assert actor.parent is not None
            actor = self.actors[actor.parent]
        return actor.address

    def area_of(self, address: str) -> str:
        actor = self.actors[address]
        if actor.kind == "item":
            assert actor.parent is not None
            return actor.parent
        if actor.kind == "area":
            return address
        raise ValueError(f"{address!r} is not inside an area")

    def structures_near(self, origin: str, destination: str, radius: float) -> list[str]:
        """Structures within ``radius`` of the straight walk from one structure to another:
        what an agent sees on the way."""
        ax, ay = self.position[origin]
        bx, by = self.position[destination]
        out = []
        for name in self.structures:
            px, py = self.position[name]
            if _segment_distance(px, py, ax, ay, bx, by) <= radius:
                out.append(name)
        return out

    def reset_statuses(self) -> None:
        """Back to the statuses of the data file (a fresh run on a reused world)."""
        for s in self.spec.structures:
            for a in s.areas:
                area = s.name + SEP + a.name
                for item in a.items:
                    names = (
                        [f"{item.name} {i}" for i in range(1, item.count + 1)]
                        if item.count
                        else [item.name]
                    )
                    for name in names:
                        self.actors[area + SEP + name].status = item.status


def _segment_distance(px: float, py: float, ax: float, ay: float, bx: float, by: float) -> float:
    dx, dy = bx - ax, by - ay
    length2 = dx * dx + dy * dy
    t = 0.0 if length2 == 0 else max(0.0, min(1.0, ((px - ax) * dx + (py - ay) * dy) / length2))
    return math.hypot(px - (ax + t * dx), py - (ay + t * dy))


def load_world(path: str | Path | None = None) -> World:
    """A world from a JSON data file; the bundled default town when ``path`` is ``None``."""
    if path is None:
        text = resources.files("agent_core").joinpath("data/world.json").read_text("utf-8")
    else:
        text = Path(path).read_text("utf-8")
    return World(WorldSpec.model_validate(json.loads(text)))


class PersonalTree:
    """The part of the world one agent knows, in the order it learnt it.

    Adding an address adds its ancestors, so the tree stays a tree. The world root is not
    counted: ``len(tree)`` is the agent's number of observed actors.
    """

    def __init__(self, world: World) -> None:
        self._world = world
        self._known: dict[str, None] = {}  # an ordered set: insertion order is deterministic

    def add(self, address: str) -> bool:
        """Learn an actor (and its ancestors); ``True`` if anything was new."""
        new = False
        actor = self._world.actors[address]
        while actor.kind != "world" and actor.address not in self._known:
            self._known[actor.address] = None
            new = True
            assert actor.parent is not None
            actor = self._world.actors[actor.parent]
        return new

    def add_all(self, addresses: Iterable[str]) -> int:
        return sum(self.add(a) for a in addresses)

    def __contains__(self, address: object) -> bool:
        return address in self._known

    def __len__(self) -> int:
        return len(self._known)

    def __iter__(self) -> Iterator[str]:
        return iter(self._known)

    def structures(self) -> list[str]:
        return [a for a in self._known if self._world.actors[a].kind == "structure"]

    def areas(self, structure: str | None = None) -> list[str]:
        return [
            a
            for a in self._known
            if self._world.actors[a].kind == "area"
            and (structure is None or self._world.actors[a].parent == structure)
        ]

    def items(self, area: str) -> list[str]:
        return [a for a in self._known if self._world.actors[a].parent == area]
