"""Keyword slots chosen on evidence for calls that declare none: a category's
``keyword_slots`` (``CategoryPolicy``) makes the other slots context, and ``tune`` chooses
them for the templates a cache learns from the traffic, never at the price of one agent served
another's answer."""

from __future__ import annotations

import json
import logging
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from llmcache import CacheConfig, CachedLLM, CacheOptions, CategoryPolicy, EmbedMode, SemanticCache
from llmcache.__main__ import main
from llmcache.replay import ReplayCall, replay, tune
from llmcache.testing import FakeOpenAI, HashEmbedder

EVENTS = [f"the {w} {v}" for w in ("kettle", "garden", "violin", "letter") for v in ("fell", "ran")]


def _event_answer(kwargs: dict[str, Any]) -> str:
    return kwargs["messages"][-1]["content"].split("Event: ", 1)[1].split("\n", 1)[0]


def _create(llm: CachedLLM, clock: str, event: str, agent: str = "Ann Lee") -> tuple[str, Any]:
    reply, info = llm.chat.completions.create_with_info(
        model="m",
        messages=[{"role": "user", "content": f"Time: {clock}\nEvent: {event}"}],
        cache=CacheOptions(category="rate", agent=agent, slots={"clock": clock, "event": event}),
    )
    return reply.choices[0].message.content or "", info


@pytest.mark.parametrize("chosen", [False, True])
def test_a_category_s_keyword_slots_make_its_other_slots_context(
    tmp_path: Path, chosen: bool
) -> None:
    # The clock is a time: by its role an exact slot, so an event repeated at another time is
    # a miss. Chosen as context (keyword slots: the event), it is a hit.
    policy = CategoryPolicy(keyword_slots=("event",)) if chosen else CategoryPolicy()
    cache = SemanticCache(
        tmp_path / "c", embedder=HashEmbedder(), config=CacheConfig(categories={"rate": policy})
    )
    llm = CachedLLM(FakeOpenAI(_event_answer), cache=cache)
    _create(llm, "09:00 AM", "the kettle fell")
    text, info = _create(llm, "10:00 PM", "the kettle fell")
    assert text == "the kettle fell"
    assert info.outcome == ("hit" if chosen else "miss")
    if chosen:
        assert info.embedded_slots == ("event",)
    # Another event is never served the first one's answer.
    text, info = _create(llm, "10:00 PM", "the garden sang")
    assert info.outcome == "miss" and text == "the garden sang"


def test_a_slot_the_call_names_exact_still_matches_under_keyword_slots(tmp_path: Path) -> None:
    policy = CategoryPolicy(keyword_slots=("event",))
    cache = SemanticCache(
        tmp_path / "c", embedder=HashEmbedder(), config=CacheConfig(categories={"rate": policy})
    )
    llm = CachedLLM(FakeOpenAI(lambda kw: "ok"), cache=cache)
    for clock in ("09:00 AM", "10:00 PM"):
        _, info = llm.chat.completions.create_with_info(
            model="m",
            messages=[{"role": "user", "content": f"Time: {clock}\nEvent: the kettle fell"}],
            cache=CacheOptions(
                category="rate",
                slots={"clock": clock, "event": "the kettle fell"},
                exact_slots=("clock",),
            ),
        )
    assert info.outcome == "miss"


def test_in_a_table_the_agents_share_a_name_still_matches_under_keyword_slots(
    tmp_path: Path,
) -> None:
    # No agent given (a learned template's calls): the name slot, by its role, tells the
    # callers apart; keyword slots that leave it out do not make it context.
    policy = CategoryPolicy(keyword_slots=("event",))
    cache = SemanticCache(
        tmp_path / "c", embedder=HashEmbedder(), config=CacheConfig(categories={"rate": policy})
    )
    llm = CachedLLM(FakeOpenAI(lambda kw: kw["messages"][-1]["content"]), cache=cache)

    def ask(name: str) -> Any:
        prompt = f"Agent: {name}\nEvent: the kettle fell"
        return llm.chat.completions.create_with_info(
            model="m",
            messages=[{"role": "user", "content": prompt}],
            cache=CacheOptions(category="rate", slots={"name": name, "event": "the kettle fell"}),
        )

    ask("Ann Lee")
    reply, info = ask("Bo Chen")
    assert info.outcome == "miss" and "Bo Chen" in (reply.choices[0].message.content or "")
    _, info = ask("Ann Lee")
    assert info.outcome == "hit"


def test_keyword_slots_round_trip_through_a_configuration_file(tmp_path: Path) -> None:
    config = CacheConfig(categories={"rate": CategoryPolicy(keyword_slots=("event", "who"))})
    path = config.to_file(tmp_path / "c.json")
    assert CacheConfig.from_file(path) == config
    with pytest.raises(ValueError):
        CategoryPolicy(keyword_slots=())


PERSONAS = {
    "Ann Lee": "Ann Lee bakes bread at dawn, sells it at the market square and sings in the "
    "church choir on Sundays; she is saving for a bigger oven and worries about her roof.",
    "Bo Chen": "Bo Chen repairs bicycles behind the station, plays chess with retired sailors "
    "and writes long letters to a cousin abroad about tides, engines and lighthouse keepers.",
}


def _calls(
    shared: bool, n: int = 240, seed: int = 5, agents: int = 2, events: int = 8
) -> list[ReplayCall]:
    """Agent code that declares nothing: per call an agent, the clock and an event; the
    rating depends on the event and, when ``shared`` (one prompt text for every agent, the
    agent's name a line of it), on the agent too. Unshared, each agent's prompts begin with
    its own persona, as the bundled town's do, and the rating is the event's alone."""
    rng = random.Random(seed)
    names = (
        ["Ann Lee", "Bo Chen"] if agents == 2 else [f"Agent{a} Person{a}" for a in range(agents)]
    )
    out = []
    for i in range(n):
        agent = names[rng.randrange(agents)]
        k = rng.randrange(events)
        clock = f"{6 + i // 20:02d}:{rng.randrange(60):02d}"
        rating = 1 + (k * 3 + (names.index(agent) * 5 if shared else 0)) % 10
        system = "You rate events."
        head = f"Agent: {agent}" if shared else PERSONAS[agent]
        user = (
            f"{head}\nRate the poignancy of this event from 1 to 10.\n"
            f"Event: {EVENTS[k % len(EVENTS)]} {k}\nCurrent time: {clock}"
        )
        out.append(
            ReplayCall(
                category="rate",
                agent=agent,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                answer=str(rating),
                time=float(i),
            )
        )
    return out


def _tuned(calls: list[ReplayCall]) -> Any:
    return tune(
        calls,
        thresholds=[0.9, 0.999],
        embeds=[EmbedMode.KEYWORD],
        lead_words=(0,),
        embedder=HashEmbedder(),
        learn_templates=True,
    )


def _crossings(report: Any) -> int:
    return sum(r.crossed for r in report.results)


def test_tune_chooses_a_learned_template_s_keyword_slot_where_the_rest_is_context() -> None:
    # Each agent's template of its own: the clock (an exact slot by its role) is all that
    # keeps an event's repeat from being served; tune finds that the event alone decides.
    calls = _calls(shared=False)
    result = _tuned(calls)
    assert result.learned and result.tuning()["learn_templates"] is True
    chosen = {n: c.setting for n, c in result.choices.items() if c.setting is not None}
    assert chosen, result.render()
    assert all(n.startswith("learned_") for n in result.choices)
    assert any(s.slots for s in chosen.values()), result.render()
    for name, setting in chosen.items():
        assert result.config.categories[name].keyword_slots == setting.slots
    by_roles = replay(calls, embedder=HashEmbedder(), learn_templates=True)
    tuned = replay(calls, result.config, embedder=HashEmbedder(), learn_templates=True)
    assert tuned.overall.cost_cut > by_roles.overall.cost_cut + 0.1
    assert tuned.overall.served == result.check.overall.served + result.tuned_on.overall.served
    check = result.check.overall
    assert check.excess_upper is not None and check.excess_upper <= 5.0
    assert _crossings(tuned) == 0


def test_tune_never_chooses_a_setting_that_serves_one_agent_another_s_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # One template for 24 agents, each named once: until the names have recurred (each agent
    # about ten calls), the event alone would serve one agent another's rating; such a
    # setting is refused, and what is chosen keeps the agents apart.
    calls = _calls(shared=True, n=480, agents=24, events=60)
    with caplog.at_level(logging.WARNING, logger="llmcache"):
        result = _tuned(calls)
    # Tried as keyword slots: the event and the clock, each at two thresholds, beside the
    # slots' roles; never the agent's name, which has no more values than the agents.
    assert result.candidates == 3 * 2, result.render()
    # The shared table is said once, not once per setting replayed.
    said = Counter(r.getMessage() for r in caplog.records if "share one table" in r.getMessage())
    assert said and set(said.values()) == {1}, said
    refused = [c for c in result.choices.values() if "another agent's answer" in c.why]
    assert refused, result.render()
    for choice in result.choices.values():
        if choice.setting is not None and choice.setting.slots is not None:
            assert "Agent" not in choice.setting.slots
    tuned = replay(calls, result.config, embedder=HashEmbedder(), learn_templates=True)
    assert _crossings(tuned) == 0


def test_the_tune_command_learns_templates_from_a_plain_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "calls.jsonl"
    lines = [
        {"category": c.category, "agent": c.agent, "messages": c.messages, "answer": c.answer,
         "time": c.time}
        for c in _calls(shared=False)
    ]  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    common = ["--embedder", "hash", "--embeddings", str(tmp_path / "emb")]
    out = tmp_path / "tuned.json"
    args = ["tune", str(path), *common, "--thresholds", "0.9,0.999", "--embeds", "keyword"]
    assert main([*args, "--lead-words", "0", "--learn-templates", "--out", str(out)]) == 0
    assert "learned_" in capsys.readouterr().out
    written = json.loads(out.read_text())
    assert written["tuning"]["learn_templates"] is True
    assert any("keyword_slots" in p for p in written["categories"].values()), written
