"""Slot roles learned from the traffic (llmcache/_slots.py): a slot of few recurring values
partitions its table (exact, never embedded), a slot that keeps taking new values is embedded,
and a prompt file recognised without an agent slot never serves one agent another's answer."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmcache import CachedLLM, PromptTemplate, SemanticCache
from llmcache.testing import FakeOpenAI, HashEmbedder

# Park's poignancy file as published: no "agent slot:" note.
AS_IS = """Variables:
!<INPUT 0>! -- Persona name
!<INPUT 1>! -- Persona's identity stable set
!<INPUT 2>! -- Persona name
!<INPUT 3>! -- Event description
<commentblockmarker>###</commentblockmarker>
Here is a brief description of !<INPUT 0>!.
!<INPUT 1>!

Rate the likely poignancy of the following event for !<INPUT 2>!.

Event: !<INPUT 3>!
Rate (return a number between 1 to 10):"""

DECLARED = AS_IS.replace("<commentblockmarker>", "agent slot: !<INPUT 0>!\n<commentblockmarker>")

WORDS = ["kettle", "garden", "violin", "letter", "bakery", "storm", "puppy", "ledger"]
AGENTS = ["Ann Lee", "Bo Chen", "Cy Park", "Di Ross", "Ed Moss", "Flo Kim"]


def persona(agent: str) -> str:
    return f"{agent} runs a cafe in town.\n{agent} likes music, long walks and quiet mornings."


def answer(kwargs: dict[str, Any]) -> str:
    # The answer names whose query it was and what it asked: a crossing shows in the text.
    prompt = kwargs["messages"][-1]["content"]
    agent = prompt.split("event for ", 1)[1].split(".\n", 1)[0]
    event = prompt.split("Event: ", 1)[1].split("\n", 1)[0]
    return f"{agent}|{event}"


def client(tmp: Path, text: str, threshold: float = 0.8) -> tuple[CachedLLM, SemanticCache]:
    cache = SemanticCache(tmp / "cache", embedder=HashEmbedder()).with_config(threshold=threshold)
    return CachedLLM(FakeOpenAI(answer), cache=cache, templates=[_template(text)]), cache


def _template(text: str) -> PromptTemplate:
    return PromptTemplate(name="poignancy", text=text)


def ask(llm: CachedLLM, agent: str, event: str) -> tuple[str, Any]:
    prompt = _template(AS_IS).fill(agent, persona(agent), agent, event).text
    reply, info = llm.chat.completions.create_with_info(
        model="m", messages=[{"role": "user", "content": prompt}]
    )
    return reply.choices[0].message.content, info


def test_a_prompt_file_as_published_never_crosses_agents_and_learns_the_event_slot(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    llm, cache = client(tmp_path, AS_IS, threshold=0.95)
    events = [
        f"{WORDS[i % 8]} {WORDS[(i * 3 + 1) % 8]} {WORDS[(i * 5 + 2) % 8]} {i}" for i in range(40)
    ]
    served = 0
    with caplog.at_level(logging.WARNING, logger="llmcache"):
        # Every event asked by one agent, then by another, then by the first again.
        for shift in (0, 1, 0):
            for i, event in enumerate(events):
                agent = AGENTS[(i + shift) % 3]
                content, info = ask(llm, agent, event)
                assert content.split("|")[0] == agent, "one agent served another's answer"
                served += info.outcome == "hit"
    assert served > 0
    # The event keeps taking new values: embedded; the names and the persona: partitioning.
    assert info.embedded_slots == ("3",)
    (table,) = [t for t in cache.stats().tables if t.category == "poignancy"]
    assert table.embedded_slots == ("3",)
    assert set(table.partition_slots) == {"0", "1", "2"}
    assert table.partition_slots["0"] == 3
    # No agent slot: the slots that separate the callers name them.
    assert table.partition_values["0"] == sorted(AGENTS[:3])
    assert "Ann Lee, Bo Chen, Cy Park" in cache.stats().render()
    # The same events of another agent were close enough, refused by the name slots (and, in
    # the table's first calls, near events by the event slot, still partitioning then).
    assert table.exact_refused["0"] > 0
    assert set(table.exact_refused) <= {"0", "1", "2", "3"}
    warned = [r.getMessage() for r in caplog.records if "share one table" in r.getMessage()]
    assert len(warned) == 1 and "slot(s) 0, 1, 2 share" in warned[0]
    cache.close()


def test_before_a_shared_table_knows_its_slots_only_exact_repeats_are_served(
    tmp_path: Path,
) -> None:
    llm, cache = client(tmp_path, AS_IS)
    ask(llm, "Ann Lee", "the stove is on fire")
    # Another agent, the very same event: not served (the name slots partition).
    content, info = ask(llm, "Bo Chen", "the stove is on fire")
    assert info.outcome == "miss" and content.startswith("Bo Chen|")
    # The same agent, the same event: served.
    _, info = ask(llm, "Ann Lee", "the stove is on fire")
    assert info.outcome == "hit"
    # The same agent, a near event, while the event slot has shown few values: not served.
    _, info = ask(llm, "Ann Lee", "the stove is on fire!")
    assert info.outcome == "miss"
    cache.close()


def test_an_agent_table_embeds_a_varied_slot_at_once(tmp_path: Path) -> None:
    llm, cache = client(tmp_path, DECLARED)
    ask(llm, "Ann Lee", "the stove is on fire in the kitchen")
    _, info = ask(llm, "Ann Lee", "the stove is on fire in the kitchen now")
    assert info.embedded_slots == ("3",) and info.outcome == "hit"
    cache.close()


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    declared=st.booleans(),
    agents=st.integers(min_value=2, max_value=6),
    order=st.lists(st.integers(min_value=0, max_value=10_000), min_size=60, max_size=90),
    repeat=st.integers(min_value=2, max_value=9),
)
def test_streams_end_with_the_query_slot_embedded_and_never_cross_agents(
    tmp_path_factory: pytest.TempPathFactory,
    declared: bool,
    agents: int,
    order: list[int],
    repeat: int,
) -> None:
    """A low-cardinality slot (the agent, in three slots) and a high-cardinality one (the
    event, now and then repeated) vary in a random order, with and without a declared agent
    slot."""
    llm, cache = client(tmp_path_factory.mktemp("roles"), DECLARED if declared else AS_IS)
    seen: set[str] = set()
    for step, draw in enumerate(order):
        agent = AGENTS[draw % agents]
        # Every few calls an earlier event comes again (of any agent): repeats and near ones.
        index = draw % max(1, step) if step % repeat == 0 else step
        event = f"{WORDS[index % 8]} {WORDS[(index * 3 + 1) % 8]} {index}"
        content, info = ask(llm, agent, event)
        # Near events may share an answer (that is the cache); agents never do.
        assert content.split("|")[0] == agent, "served another agent's answer"
        seen.add(event)
    assert len(seen) >= 16
    assert info.embedded_slots == ("3",)
    cache.close()


def test_times_inside_a_value_must_match_unless_turned_off(tmp_path: Path) -> None:
    text = "Schedule so far:\n!<INPUT 0>!\nWhat next?"
    hour = "[Monday February 13 -- {} AM] Activity: Isabella is"
    for exact_times, served in ((True, False), (False, True)):
        # The opposites gate off: it refuses another number too (09 against 10), which is
        # the gate's own test; here the times rule alone decides.
        cache = SemanticCache(tmp_path / str(exact_times), embedder=HashEmbedder()).with_config(
            threshold=0.5, exact_times=exact_times, opposites_gate=False
        )
        llm = CachedLLM(FakeOpenAI(lambda r: "x"), cache=cache, templates=[_template(text)])
        for value in (hour.format("09:00"), hour.format("10:00")):
            # An agent's own table: the slot that varied is embedded at once.
            request = _template(text).fill(value).request(agent="Isabella")
            _, info = llm.chat.completions.create_with_info(model="m", **request)
        assert (info.outcome == "hit") is served
        cache.close()


def test_an_agents_changing_persona_is_neither_embedded_nor_matched(tmp_path: Path) -> None:
    llm, cache = client(tmp_path, DECLARED, threshold=0.95)
    events = [
        f"{WORDS[i % 8]} {WORDS[(i * 3 + 1) % 8]} {WORDS[(i * 5 + 2) % 8]} {i}" for i in range(40)
    ]

    def ask_as(version: int, event: str) -> Any:
        text = _template(AS_IS).fill(
            "Ann Lee", f"Ann v{version}\nAnn runs a cafe.", "Ann Lee", event
        )
        return llm.chat.completions.create_with_info(
            model="m", messages=[{"role": "user", "content": text.text}]
        )[1]

    for i, event in enumerate(events):
        ask_as(i // 20, event)  # the persona changes once, halfway
    # Settled: the persona (2 values, each recurring) partitions the agent's table; a repeat
    # under the other persona is still served, and the event alone is embedded.
    info = ask_as(1, events[5])
    assert info.outcome == "hit" and info.embedded_slots == ("3",)
    cache.close()


# Park's file with the persona's age on a line of its own: a slot of few values (three ages
# among the agents) that cannot tell more than three agents apart.
WITH_AGE = AS_IS.replace("!<INPUT 1>!\n\nRate", "Age: !<INPUT 4>!\n!<INPUT 1>!\n\nRate").replace(
    "!<INPUT 3>! -- Event description", "!<INPUT 3>! -- Event description\n!<INPUT 4>! -- Age"
)


def test_more_than_15_agents_sharing_a_table_never_get_each_other_s_answers(
    tmp_path: Path,
) -> None:
    """24 agents of one shared table, their personas alike but for the name, three ages
    among them: once the names partition (each agent has called about ten times), a few-valued
    slot (the age) must not be taken for what tells the callers apart, leaving the names to
    be neither embedded nor matched (which served agents each other's answers)."""
    cache = SemanticCache(tmp_path / "cache", embedder=HashEmbedder()).with_config(threshold=0.8)
    llm = CachedLLM(FakeOpenAI(answer), cache=cache, templates=[_template(WITH_AGE)])
    agents = [f"Agent{i} Surname{i}" for i in range(24)]
    crossed = []
    for step in range(24 * 14):
        agent = agents[(step * 7) % 24]
        event = f"{WORDS[step % 8]} {WORDS[(step // 8) % 8]}"  # events every agent meets
        text = _template(WITH_AGE).fill(
            agent,
            "Runs a cafe in town, likes music.",
            agent,
            event,
            str(20 + agents.index(agent) % 3),
        )
        reply, _ = llm.chat.completions.create_with_info(
            model="m", messages=[{"role": "user", "content": text.text}]
        )
        content = reply.choices[0].message.content
        if step >= 24 * 10 and content.split("|")[0] != agent:
            crossed.append((step, agent, content))
    assert not crossed, crossed[:3]
    cache.close()


def test_a_name_the_prompt_repeats_keeps_more_than_15_agents_apart_from_the_first_call(
    tmp_path: Path,
) -> None:
    """The same 24 agents from their first calls: before the names have recurred, only the
    embedding told them apart (one name a few characters from another), and agents were
    served each other's answers. A value the prompt repeats in two slots (the name, in the
    persona's header and in the question) is exact from the first call. (Three agents of
    each name, "Ann Lee", "Ann Lee Jr" and "Ann Lee III", as in bench_learn_replay.py.)"""
    cache = SemanticCache(tmp_path / "cache", embedder=HashEmbedder()).with_config(threshold=0.8)
    llm = CachedLLM(FakeOpenAI(answer), cache=cache, templates=[_template(WITH_AGE)])
    agents = [f"Agent{i // 3} Surname{i // 3}{('', ' Jr', ' III')[i % 3]}" for i in range(24)]
    crossed, served = [], 0
    for step in range(24 * 10):
        # Each call made by the three agents of one name in turn, as in the benchmark.
        agent = agents[(step // 3 * 5) % 8 * 3 + step % 3]
        event = f"{WORDS[step // 3 % 8]} {WORDS[step // 24 % 8]}"
        text = _template(WITH_AGE).fill(
            agent, "Runs a cafe in town, likes music.", agent, event, "30"
        )
        reply, info = llm.chat.completions.create_with_info(
            model="m", messages=[{"role": "user", "content": text.text}]
        )
        content = reply.choices[0].message.content
        served += info.outcome == "hit"
        if content.split("|")[0] != agent:
            crossed.append((step, agent, content))
    assert not crossed, crossed[:3]
    assert served > 0
    cache.close()


def test_with_more_than_15_agents_a_persona_is_the_caller_s_and_never_embedded(
    tmp_path: Path,
) -> None:
    """24 agents, each persona (most of the prompt's text) its own: a persona slot has as
    many values as the names. Embedded with the event, it made two events of one agent look
    alike (the persona's text most of the vector), and each was served the other's answer.
    A slot with no more values than the names the prompt repeats is the caller's: matched
    with them, never embedded."""
    cache = SemanticCache(tmp_path / "cache", embedder=HashEmbedder()).with_config(threshold=0.8)
    llm = CachedLLM(FakeOpenAI(answer), cache=cache, templates=[_template(WITH_AGE)])
    agents = [f"Agent{i} Surname{i}" for i in range(24)]
    personas = {
        agent: " ".join(f"{WORDS[(i * 5 + k) % 8]}{i}x{k}" for k in range(30))
        for i, agent in enumerate(agents)
    }
    wrong, embedded = [], set()
    for step in range(24 * 8):
        agent = agents[step % 24]
        event = f"{WORDS[step % 8]} {WORDS[(step // 8) % 8]} {step}"  # never asked again
        text = _template(WITH_AGE).fill(agent, personas[agent], agent, event, "30")
        reply, info = llm.chat.completions.create_with_info(
            model="m", messages=[{"role": "user", "content": text.text}]
        )
        if reply.choices[0].message.content != f"{agent}|{event}":
            wrong.append((step, agent, reply.choices[0].message.content))
        if step >= 48:
            embedded.update(info.embedded_slots or ())
    assert not wrong, wrong[:3]
    assert embedded == {"3"}  # the event alone, once every agent has called
    cache.close()
