"""Reusing cached answers: choose maps the cached option onto the query's options; revise
rewrites a cached plan or reaction for the query (thesis Table 3.3, appendix D)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent_core import Requirements, RevisionRequest, TownLLM, build_revision, open_town_llm
from agent_core.revise import REVISION_MARKER
from agent_core.templates import (
    ACTOR_REACTION,
    DECOMPOSITION,
    FINDING_LOCATION,
    INITIAL_PLAN,
    choose_extract,
    choose_render,
)
from agent_core.testing import ScriptedLLM
from llmcache import Mode
from llmcache.testing import HashEmbedder

BLOCK = "Name: Alice Wilson (age 17, female)\nDaily routine: attend classes; do homework"


@pytest.fixture
def served(tmp_path: Path) -> Any:
    """A TownLLM in serve mode (the best candidate always answers) and its ScriptedLLM."""
    fake = ScriptedLLM()
    llm = open_town_llm(
        fake, model="scripted", cache_dir=tmp_path / "c", mode=Mode.SERVE, embedder=HashEmbedder()
    )
    yield llm, fake
    llm.close()


def outcome(llm: TownLLM, category: str, kind: str) -> int:
    return llm.stats.outcomes.get(f"{category}|{kind}", 0)


def test_choose_extract_and_render() -> None:
    assert choose_extract('```json\n{"location": "Kitchen"}\n```', []) == "Kitchen"
    assert choose_extract("no idea", []) is None
    assert json.loads(choose_render('{"location": "Kitchen"}', "Garden")) == {"location": "Garden"}


def test_choose_maps_the_cached_choice_to_the_most_similar_query_option(served: Any) -> None:
    llm, fake = served
    # One option: the model's answer (the cached choice) is the kitchen whatever its seed.
    first = llm.ask(
        FINDING_LOCATION,
        agent="Alice Wilson",
        summary_block=BLOCK,
        slots={"task": "cooking", "what": "areas", "options": ["Wilson Family House: Kitchen"]},
        requirements=Requirements(options=["Wilson Family House: Kitchen"]),
    )
    assert first is not None and first.location == "Wilson Family House: Kitchen"
    options = [
        "Oliver Family House: Art Corner",
        "Oliver Family House: Kitchen",
        "Oliver Family House: Master Bedroom",
    ]
    requests = sum(fake.requests.values())
    second = llm.ask(
        FINDING_LOCATION,
        agent="Alice Wilson",
        summary_block=BLOCK,
        slots={"task": "making a snack", "what": "areas", "options": options},
        requirements=Requirements(options=options),
    )
    assert second is not None and second.location == "Oliver Family House: Kitchen"
    assert outcome(llm, "finding location", "hit") == 1
    assert sum(fake.requests.values()) == requests  # answered without the model


def _plan(llm: TownLLM, places: list[str]) -> Any:
    return llm.ask(
        INITIAL_PLAN,
        agent="Alice Wilson",
        summary_block=BLOCK,
        slots={"date": "Monday", "yesterday": "-", "weekday": "Monday", "places": places},
        requirements=Requirements(places=places, window=("06:00", "24:00")),
    )


def test_initial_plan_revision_changes_only_locations(served: Any) -> None:
    llm, fake = served
    first = _plan(llm, ["Wilson Family House", "Riverview High School", "Fresh Grocery Store"])
    places = ["Oliver Family House", "Victoria Park"]
    second = _plan(llm, places)
    assert outcome(llm, "initial plan generation", "hit") == 1
    assert fake.revisions["initial plan generation"] == 1
    assert [(p.start, p.end, p.activity) for p in second.plans] == [
        (p.start, p.end, p.activity) for p in first.plans
    ]
    assert {p.location for p in second.plans} <= set(places)


def _decompose(llm: TownLLM, start: str, end: str) -> Any:
    places = ["Wilson Family House", "Riverview High School"]
    return llm.ask(
        DECOMPOSITION,
        agent="Alice Wilson",
        summary_block=BLOCK,
        slots={
            "activity": "attending classes",
            "location": "Riverview High School",
            "start": start,
            "end": end,
            "places": places,
        },
        requirements=Requirements(places=places, window=(start, end)),
    )


def test_plan_revision_moves_timestamps_into_the_new_window(served: Any) -> None:
    llm, fake = served
    first = _decompose(llm, "09:00", "12:00")
    second = _decompose(llm, "14:00", "15:30")
    assert outcome(llm, "plan decomposition", "hit") == 1
    assert fake.revisions["plan decomposition"] == 1
    assert second.tasks[0].start == "14:00" and second.tasks[-1].end == "15:30"
    assert all(a.end == b.start for a, b in zip(second.tasks, second.tasks[1:], strict=False))
    assert [t.activity for t in second.tasks] == [t.activity for t in first.tasks][
        : len(second.tasks)
    ]


def _react(llm: TownLLM, options: list[str], observation: str) -> Any:
    return llm.ask(
        ACTOR_REACTION,
        agent="Alice Wilson",
        summary_block=BLOCK,
        slots={"current": "doing homework", "observation": observation, "options": options},
        requirements=Requirements(options=options),
        context={"current": "doing homework", "observation": observation},
    )


def test_actor_reaction_revision_picks_the_most_similar_query_option(tmp_path: Path) -> None:
    observation = "White Fridge in Wilson Family House is Idle"
    # Find a scripted model whose first answer uses the fridge (answers are seeded, so this
    # is deterministic), then ask about another appliance: the cached reaction is revised.
    for seed in range(50):
        fake = ScriptedLLM(seed=seed)
        llm = open_town_llm(
            fake,
            model="scripted",
            cache_dir=tmp_path / str(seed),
            mode=Mode.SERVE,
            embedder=HashEmbedder(),
        )
        first = _react(
            llm, ["continue doing homework", "use the White Fridge", "go out"], observation
        )
        if first.choice == "use the White Fridge":
            break
        llm.close()
    else:
        pytest.fail("no seed made the scripted model use the fridge")
    try:
        options = ["continue doing homework", "use the White Coffee Machine", "go somewhere else"]
        second = _react(llm, options, "White Coffee Machine in Wilson Family House is Idle")
        assert outcome(llm, "actor reaction", "hit") == 1
        assert fake.revisions["actor reaction"] == 1
        assert second.choice == "use the White Coffee Machine"
    finally:
        llm.close()


def test_revision_prompts_carry_the_querys_requirements() -> None:
    cached = json.dumps(
        {"tasks": [{"start": "09:00", "end": "10:00", "activity": "a", "location": "X"}] * 2}
    )
    messages = build_revision(
        RevisionRequest(
            category="plan decomposition",
            name="Alice Wilson",
            cached_content=cached,
            requirements=Requirements(places=["Home"], window=("13:00", "14:00")),
        )
    )
    assert messages is not None
    text = messages[-1]["content"]
    assert REVISION_MARKER in text
    assert "Time window: 13:00 to 14:00" in text and 'Places (JSON list): ["Home"]' in text
    # What cannot be revised becomes a miss (None), never a made-up answer.
    assert (
        build_revision(
            RevisionRequest(
                "plan decomposition", "A", "garbage", Requirements(window=("1:00", "2:00"))
            )
        )
        is None
    )
    assert (
        build_revision(RevisionRequest("plan decomposition", "A", cached, Requirements())) is None
    )
    assert (
        build_revision(RevisionRequest("importance score", "A", '{"score": 3}', Requirements()))
        is None
    )
