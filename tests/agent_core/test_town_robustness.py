"""A run survives a model that answers badly or a provider that fails, and records nothing
invalid as valid; dialogue keeps to its limits."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import openai
import pytest

from agent_core import (
    Agent,
    Clock,
    EmbeddingMemo,
    SimConfig,
    Simulation,
    load_agents,
    load_world,
    open_town_llm,
)
from agent_core.agent import Task, converse
from agent_core.testing import ScriptedLLM
from llmcache.recording import read_records
from llmcache.testing import HashEmbedder


def test_a_model_that_never_answers_validly_does_not_stop_the_run(tmp_path: Path) -> None:
    out = tmp_path / "bad.jsonl"
    llm = open_town_llm(
        ScriptedLLM(malformed_rate=1.0, reliable_models=()),
        model="scripted",
        record_to=out,
        max_attempts=2,
        superior_model="gpt-4o",
    )
    try:
        summary = Simulation(
            llm, embedder=HashEmbedder(), seeds=load_agents(names=["Alice", "Liam"]), seed=1
        ).run(0.25)
    finally:
        llm.close()
    assert summary.total_calls > 20
    assert summary.failed == summary.calls  # every call fell back to its default
    records = read_records(out, include_invalid=True)
    assert records and all(r.kind == "invalid_attempt" and r.resubmission for r in records)
    # 2 attempts on the model, then 3 on the superior one (also broken here).
    assert len(records) == 5 * summary.total_calls
    assert read_records(out) == []


class _Unreachable:
    """A provider that is down: every request fails to connect."""

    def __init__(self) -> None:
        self.requests = 0
        self.chat = self
        self.completions = self

    def create(self, **kwargs: Any) -> Any:
        self.requests += 1
        raise openai.APIConnectionError(request=None)  # type: ignore[arg-type]


def test_provider_failures_are_retried_then_counted(tmp_path: Path) -> None:
    client = _Unreachable()
    llm = open_town_llm(client, model="m", transient_retries=1, retry_backoff=0.0)
    try:
        summary = Simulation(
            llm, embedder=HashEmbedder(), seeds=load_agents(names=["Noah"]), seed=1
        ).run(10 / 1440)
    finally:
        llm.close()
    assert summary.total_calls > 0
    assert sum(summary.failed.values()) == summary.total_calls
    assert client.requests == 2 * summary.total_calls


class _Chatty:
    """The scripted model, except that nobody ever ends a conversation."""

    def __init__(self) -> None:
        self.inner = ScriptedLLM()
        self.chat = self
        self.completions = self

    def create(self, **kwargs: Any) -> Any:
        completion = self.inner.chat.completions.create(**kwargs)
        if kwargs["response_format"]["json_schema"]["name"] == "dialogue_utterance":
            message = completion.choices[0].message
            answer = json.loads(message.content or "{}")
            message.content = json.dumps({**answer, "end_conversation": False})
        return completion


@pytest.mark.parametrize("limit", [20, 5])
def test_dialogue_stops_at_the_utterance_limit(limit: int) -> None:
    world = load_world()
    llm = open_town_llm(_Chatty(), model="scripted")
    config = SimConfig(max_utterances=limit)
    clock = Clock(world.start_date)
    embed = EmbeddingMemo(HashEmbedder())
    a, b = (
        Agent(s, world, clock, llm, embed, config, random.Random(0))
        for s in load_agents(names=["Alice", "Mary"])
    )
    try:
        for agent in (a, b):
            agent.current = Task(600, 660, "chatting", agent.seed.home)
        transcript = converse(a, b, 600)
    finally:
        llm.close()
    assert len(transcript) == limit
    assert transcript[0].startswith("Alice Wilson: ") and transcript[1].startswith("Mary Oliver: ")
    assert llm.stats.calls["relationship summary"] == 2
    assert llm.stats.calls["dialogue summary"] == 2
    assert [m.kind for m in a.memory.memories] == ["chat"]
    assert a.memory.memories[0].subject == "Mary Oliver"
    assert a.busy_until == b.busy_until > 600


class _Recording:
    """ScriptedLLM that remembers each request's category and ``max_tokens``."""

    def __init__(self) -> None:
        self.town = ScriptedLLM(seed=1)
        self.chat = self
        self.completions = self
        self.sent: list[tuple[str, Any]] = []
        self.schemas: list[dict[str, Any]] = []

    def create(self, **kwargs: Any) -> Any:
        name = kwargs["response_format"]["json_schema"]["name"]
        self.sent.append((name, kwargs.get("max_tokens")))
        self.schemas.append(kwargs["response_format"]["json_schema"]["schema"])
        return self.town.chat.completions.create(**kwargs)


def test_answer_caps_are_sent_per_query_and_params_win() -> None:
    from agent_core.schemas import worst_case_tokens
    from agent_core.templates import category_of_schema_name, template

    client = _Recording()
    llm = open_town_llm(client, model="scripted")
    try:
        Simulation(llm, embedder=HashEmbedder(), seeds=load_agents(names=["Alice"]), seed=1).run(
            0.1
        )
    finally:
        llm.close()
    assert len({category_of_schema_name(n) for n, _ in client.sent}) >= 3
    # With per-query schemas (the default), each request's cap is its own schema's worst case.
    for (name, cap), schema in zip(client.sent, client.schemas, strict=True):
        assert cap == min(2048, worst_case_tokens(schema)), name

    plain = _Recording()
    llm = open_town_llm(plain, model="scripted", query_schemas=False)
    try:
        Simulation(llm, embedder=HashEmbedder(), seeds=load_agents(names=["Alice"]), seed=1).run(
            0.05
        )
    finally:
        llm.close()
    assert plain.sent
    for name, cap in plain.sent:
        assert cap == template(category_of_schema_name(name)).max_tokens

    fixed = _Recording()
    llm = open_town_llm(fixed, model="scripted", params={"max_tokens": 7})
    try:
        Simulation(llm, embedder=HashEmbedder(), seeds=load_agents(names=["Alice"]), seed=1).run(
            0.05
        )
    finally:
        llm.close()
    assert fixed.sent and all(cap == 7 for _, cap in fixed.sent)
