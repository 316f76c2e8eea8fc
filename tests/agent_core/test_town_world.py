"""The default world and agents as the issue specifies them; loading alternatives."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from agent_core import PersonalTree, World, load_agents, load_world

STRUCTURES = {
    "Wilson Family House",
    "Oliver Family House",
    "Brown Family House",
    "Smith Family House",
    "Riverview High School",
    "Fresh Grocery Store",
    "Singapore Coffee House",
    "Victoria Park",
    "NextGen Game Centre",
}
ITEMS = {
    "Student Chair",
    "Student Desk",
    "Teacher Desk",
    "Dustbin",
    "Bookshelf",
    "Office Chair",
    "White Fridge",
    "Brown Kitchen Sink",
    "White Coffee Machine",
    "Tree",
    "Bench",
    "Flower Shelf",
    "Brown Double Bed",
    "Blue Wardrobe",
    "Brown Wash Basin",
    "White Dining Table",
}
AGENTS = {
    "Alice Wilson": (
        17,
        "female",
        ["Friendly", "Outgoing", "Curious"],
        ["Wilson Family House", "Riverview High School", "Fresh Grocery Store"],
    ),
    "Ethan Wilson": (
        24,
        "male",
        ["Responsible", "Hardworking", "Caring"],
        ["Wilson Family House", "Fresh Grocery Store"],
    ),
    "Mary Oliver": (
        16,
        "female",
        ["Creative", "Empathetic", "Social"],
        ["Oliver Family House", "Riverview High School", "Singapore Coffee House"],
    ),
    "Liam Oliver": (
        22,
        "male",
        ["Charming", "Meticulous", "Friendly"],
        ["Oliver Family House", "Singapore Coffee House"],
    ),
    "James Brown": (
        41,
        "male",
        ["Wise", "Patient", "Authoritative"],
        ["Brown Family House", "Riverview High School"],
    ),
    "Amelia Brown": (
        39,
        "female",
        ["Nurturing", "Organized", "Creative"],
        ["Brown Family House", "Riverview High School"],
    ),
    "Noah Smith": (
        28,
        "male",
        ["Introspective", "Articulate", "Sensitive"],
        ["Smith Family House", "Fresh Grocery Store"],
    ),
    "Isabella Smith": (
        26,
        "female",
        ["Ambitious", "Thoughtful", "Independent"],
        ["Smith Family House", "Fresh Grocery Store"],
    ),
}


def test_default_world(world: World) -> None:
    assert set(world.structures) == STRUCTURES
    assert 270 <= len(world) <= 300  # the study's town had 284 actors
    assert {a.label for a in world.actors.values() if a.kind == "item"} >= ITEMS
    assert {"Kitchen", "Main Bathroom", "Master Bedroom", "Ensuite Bathroom", "Second Bedroom"} <= {
        world.actor(a).name for a in world.areas_of["Wilson Family House"]
    }
    assert {"Classroom A", "Classroom B", "Library", "Teacher Office"} <= {
        world.actor(a).name for a in world.areas_of["Riverview High School"]
    }
    assert all(a.status == "Idle" for a in world.actors.values() if a.kind == "item")


def test_default_agents(world: World) -> None:
    seeds = load_agents(world=world)
    assert {s.name: (s.age, s.gender, s.innate, s.seed_structures) for s in seeds} == AGENTS
    assert all(len(s.seed_memory.split()) >= 40 for s in seeds)  # a short paragraph each


def test_choosing_agents_by_name(world: World) -> None:
    assert [s.name for s in load_agents(names=["mary", "Ethan Wilson"])] == [
        "Ethan Wilson",
        "Mary Oliver",
    ]
    with pytest.raises(ValueError, match="unknown agents"):
        load_agents(names=["Nobody"])


def test_alternative_world_file_with_counted_items(tmp_path: Path) -> None:
    spec = {
        "name": "Tiny",
        "structures": [
            {
                "name": "Hut",
                "position": [0, 0],
                "areas": [{"name": "Room", "items": [{"name": "Stool", "count": 3}]}],
            },
            {"name": "Well", "position": [100, 0], "areas": [{"name": "Yard"}]},
            {"name": "Shed", "position": [50, 5], "areas": [{"name": "Inside"}]},
        ],
    }
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(spec))
    tiny = load_world(path)
    assert tiny.items_of["Hut: Room"] == [
        "Hut: Room: Stool 1",
        "Hut: Room: Stool 2",
        "Hut: Room: Stool 3",
    ]
    assert tiny.actor("Hut: Room: Stool 2").label == "Stool"
    assert tiny.structures_near("Hut", "Well", radius=10) == ["Hut", "Well", "Shed"]
    assert tiny.structures_near("Hut", "Well", radius=1) == ["Hut", "Well"]
    tiny.set_status("Hut: Room: Stool 1", "being sat on")
    tiny.reset_statuses()
    assert tiny.status("Hut: Room: Stool 1") == "Idle"
    bad = dict(spec, structures=[spec["structures"][0], spec["structures"][0]])
    path.write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="unique"):
        load_world(path)


def test_agents_must_name_real_places(world: World, tmp_path: Path) -> None:
    seeds = json.loads(resources.files("agent_core").joinpath("data/agents.json").read_text())
    seeds[0]["seed_structures"] = ["Atlantis"]
    path = tmp_path / "agents.json"
    path.write_text(json.dumps(seeds))
    with pytest.raises(ValueError, match="Atlantis"):
        load_agents(path, world=world)


def test_personal_tree_adds_ancestors_and_counts_actors(world: World) -> None:
    tree = PersonalTree(world)
    assert tree.add("Victoria Park: Lawn: Bench 2")
    assert list(tree) == ["Victoria Park: Lawn: Bench 2", "Victoria Park: Lawn", "Victoria Park"]
    assert not tree.add("Victoria Park: Lawn")
    assert len(tree) == 3 and tree.structures() == ["Victoria Park"]
    assert tree.areas("Victoria Park") == ["Victoria Park: Lawn"]
    assert tree.items("Victoria Park: Lawn") == ["Victoria Park: Lawn: Bench 2"]
