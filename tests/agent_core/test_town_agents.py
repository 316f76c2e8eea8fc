"""Cognition through a real CachedLLM over the ScriptedLLM double: decomposition invariants,
the reflection trigger, observation and actor statuses."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from agent_core import Agent, Clock, EmbeddingMemo, SimConfig, TownLLM, World, load_agents
from agent_core.agent import DayItem, Town
from agent_core.world import IDLE
from llmcache.testing import HashEmbedder

MakeLLM = Callable[..., TownLLM]


def make_agent(world: World, llm: TownLLM, name: str = "Alice Wilson", **config: object) -> Agent:
    seed = next(s for s in load_agents(world=world) if s.name == name)
    return Agent(
        seed,
        world,
        Clock(world.start_date),
        llm,
        EmbeddingMemo(HashEmbedder()),
        SimConfig.model_validate(config),
        random.Random(0),
    )


@pytest.mark.parametrize("malformed_rate", [0.0, 0.3])
def test_decomposition_is_contiguous_within_the_window(
    world: World, make_llm: MakeLLM, malformed_rate: float
) -> None:
    llm = make_llm(malformed_rate=malformed_rate)
    agent = make_agent(world, llm)
    rng = random.Random(1)
    for _ in range(25):
        start = rng.randrange(6 * 60, 20 * 60, 5)
        end = start + rng.randrange(60, 4 * 60, 5)
        plan = DayItem(start, end, "working on her coding project", "Wilson Family House", start)
        agent.tasks.clear()
        agent.decompose(plan, start, start)
        tasks = list(agent.tasks)
        window_end = min(end, start + 3 * 60)  # decomposed a few hours ahead
        assert 2 <= len(tasks) <= 3
        assert tasks[0].start == start and tasks[-1].end == window_end
        assert all(a.end == b.start for a, b in itertools.pairwise(tasks))
        assert all(t.end - t.start >= 30 for t in tasks)
        assert plan.decomposed_until == window_end
    assert llm.stats.failed == {}
    if malformed_rate:
        assert sum(llm.stats.resubmissions.values()) > 0


def test_short_plan_items_are_not_decomposed(world: World, make_llm: MakeLLM) -> None:
    llm = make_llm()
    agent = make_agent(world, llm)
    agent.decompose(DayItem(600, 650, "reading", "Wilson Family House", 600), 600, 600)
    assert [(t.start, t.end) for t in agent.tasks] == [(600, 650)]
    assert llm.stats.calls["plan decomposition"] == 0


def test_reflection_triggers_only_above_150(world: World, make_llm: MakeLLM) -> None:
    llm = make_llm()
    agent = make_agent(world, llm)
    for i in range(30):
        agent.memory.add("observation", f"Alice Wilson noticed thing {i}", 400 + i, importance=5)
    agent.importance_since_reflection = 150.0
    agent.maybe_reflect(500)
    assert agent.reflections == 0
    assert llm.stats.calls["high-level questions"] == 0

    agent.importance_since_reflection = 151.0
    before = len(agent.memory)
    agent.maybe_reflect(500)
    assert agent.reflections == 1
    assert agent.importance_since_reflection == 0.0
    assert llm.stats.calls["high-level questions"] == 1
    assert llm.stats.calls["high-level insights"] == 3  # one per question
    reflections = [m for m in agent.memory.memories if m.kind == "reflection"]
    assert len(reflections) == 15  # 5 insights per question
    assert len(agent.memory) == before + 15
    for r in reflections:
        # Evidence cites earlier memories (an insight may build on an earlier insight).
        assert r.evidence and all(0 <= e < r.id for e in r.evidence)


def test_importance_accumulates_from_new_memories(world: World, make_llm: MakeLLM) -> None:
    agent = make_agent(world, make_llm())
    total = sum(agent.remember("observation", f"event {i}", 400) for i in range(5))
    assert agent.importance_since_reflection == total
    assert all(1 <= m.importance <= 10 for m in agent.memory.memories)


def test_observation_grows_the_personal_tree(world: World, make_llm: MakeLLM) -> None:
    agent = make_agent(world, make_llm(), attention_bandwidth=2)
    start = len(agent.tree)
    assert set(agent.tree.structures()) == set(agent.seed.seed_structures)
    kitchen = "Wilson Family House: Kitchen"
    agent.move_to(kitchen)
    events = agent.perceive(480, Town([agent]))
    assert len(events) == 2  # the attention bandwidth
    assert all(world.actor(e.subject).parent == kitchen for e in events)
    assert len(agent.tree) > start
    assert set(world.items_of[kitchen]) <= set(agent.tree)
    # Unchanged actors are not noticed again until reobserve_hours have passed.
    again = agent.perceive(490, Town([agent]))
    assert {e.subject for e in again}.isdisjoint({e.subject for e in events})
    # A walk across town shows the structures along the way.
    agent.move_to("Riverview High School: Library")
    assert len(agent.tree.structures()) >= len(agent.seed.seed_structures)


def test_other_agents_are_observed_first(world: World, make_llm: MakeLLM) -> None:
    llm = make_llm()
    alice = make_agent(world, llm)
    ethan = make_agent(world, llm, "Ethan Wilson")
    alice.move_to("Wilson Family House: Kitchen")
    ethan.move_to("Wilson Family House: Living Room")
    ethan.status = "cooking dinner"
    events = alice.perceive(1100, Town([alice, ethan]))
    assert events[0].kind == "agent"
    assert events[0].description == "Ethan Wilson is cooking dinner"


def test_tasks_set_and_release_actor_statuses(world: World, make_llm: MakeLLM) -> None:
    llm = make_llm()
    agent = make_agent(world, llm)
    agent.day_start = 0
    agent.plan = [DayItem(480, 540, "cooking breakfast", "Wilson Family House", 480)]
    agent.asleep = False
    agent.advance(480)
    assert agent.current is not None and agent.item is not None
    assert world.status(agent.item) != IDLE
    assert llm.stats.calls["new actor statuses"] >= 1
    used = agent.item
    agent.advance(540)  # the plan is over: to bed
    assert world.status(used) == IDLE
    assert agent.asleep and agent.item == agent.seed.bed
    assert world.status(agent.seed.bed) != IDLE


def test_a_reflection_asks_about_the_newest_memories_that_fit(
    world: World, make_llm: MakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A hundred long memories made a questions prompt too long for a 4,096-token slot.
    agent = make_agent(world, make_llm())
    for i in range(100):
        agent.memory.add("observation", f"memory {i:03d} " + "x" * 190, 400 + i, importance=5)
    asked: list[list[str]] = []
    ask = agent._ask

    def spy(tmpl: Any, now: int, slots: dict[str, Any], *args: Any) -> Any:
        if tmpl.category == "high-level questions":
            asked.append(list(slots["statements"]))
        return ask(tmpl, now, slots, *args)

    monkeypatch.setattr(agent, "_ask", spy)
    agent.importance_since_reflection = 151.0
    agent.maybe_reflect(600)
    [statements] = asked
    budget = agent.config.reflection_recent_chars
    assert 0 < sum(map(len, statements)) <= budget
    assert statements[-1].startswith("memory 099")  # the newest kept, in order
    assert len(statements) == budget // len(statements[-1]) < 100


def test_reaction_options_are_shown_in_a_seeded_order_and_read_by_meaning(
    world: World, make_llm: MakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small models pick the first option they are shown: with "continue" always first, no agent
    # of a standard run on SmolLM2 ever talked. The options are now shuffled by a stream of
    # their own, and the town acts on what the chosen option means, wherever it was listed.
    import agent_core.agent as agent_module
    from agent_core.responses import AgentReactionResponse

    def reactions(seed: str) -> tuple[list[list[str]], list[str]]:
        agent = make_agent(world, make_llm())
        agent.options_rng = random.Random(seed)
        other = make_agent(world, make_llm(), name="Ethan Wilson")
        agent.current = SimpleNamespace(activity="reading")  # what a reaction reads of it
        shown: list[list[str]] = []

        def ask(tmpl: Any, now: int, slots: dict[str, Any], *args: Any) -> Any:
            shown.append(list(slots["options"]))
            return AgentReactionResponse(choice="talk to Ethan Wilson", activity="chat", minutes=10)

        talked: list[str] = []
        monkeypatch.setattr(agent, "_ask", ask)
        monkeypatch.setattr(agent_module, "converse", lambda a, b, now: talked.append(b.name))
        for t in range(12):
            agent.agent_reaction(600 + t, other, Town([agent, other]))
        return shown, talked

    shown, talked = reactions("s")
    assert talked == ["Ethan Wilson"] * 12  # acted on by meaning, at any position
    assert all(sorted(o) == sorted(shown[0]) for o in shown)
    assert len({o[0] for o in shown}) == 3  # each option is shown first sometimes
    assert reactions("s")[0] == shown  # seeded: the same orders again
