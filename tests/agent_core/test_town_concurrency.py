"""Prompts asked together (``TownLLM.send_many``): the same run, only the requests overlap."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from openai.types.chat import ChatCompletion

from agent_core import Simulation, TownLLM, load_agents, template
from agent_core.call import town_call
from agent_core.testing import ScriptedLLM
from llmcache.recording import read_records
from llmcache.testing import HashEmbedder

MakeLLM = Callable[..., TownLLM]

AGENTS = ["Alice Wilson", "Ethan Wilson", "Mary Oliver"]


class OverlapCountingLLM(ScriptedLLM):
    """The scripted double, slowed a little, counting how many requests it answers at once."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight = 0
        self.most_in_flight = 0
        self._gate = threading.Lock()

    def answer(self, kwargs: dict[str, Any]) -> ChatCompletion:
        with self._gate:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            time.sleep(0.002)
            return super().answer(kwargs)
        finally:
            with self._gate:
                self.in_flight -= 1


def _lines(path: Any) -> list[str]:
    return sorted(
        json.dumps([r.category, r.agent, r.messages, r.response, r.metadata], sort_keys=True)
        for r in read_records(path, include_invalid=True)
    )


def test_concurrent_ratings_change_the_order_of_requests_not_the_run(
    make_llm: MakeLLM,
) -> None:
    results = []
    for concurrency in (1, 4):
        client = OverlapCountingLLM()
        llm = make_llm(record=True, concurrency=concurrency, client=client)
        seeds = load_agents(names=AGENTS)
        summary = Simulation(llm, embedder=HashEmbedder(), seeds=seeds, seed=2).run(0.5)
        assert llm.llm.recorder is not None
        results.append((summary, _lines(llm.llm.recorder.path), client.most_in_flight))
    (one, lines_one, most_one), (four, lines_four, most_four) = results
    assert most_one == 1  # strictly one after another
    assert most_four > 1  # the ratings of one perception overlapped
    assert lines_one == lines_four  # every prompt and answer the same, only the order differs
    assert one.calls == four.calls and one.memories == four.memories
    assert one.first_try == four.first_try and one.outcomes == four.outcomes


def test_send_many_answers_in_the_order_asked(make_llm: MakeLLM) -> None:
    llm = make_llm(concurrency=3)
    memories = [f"Alice saw {n} birds on the roof" for n in range(7)]
    calls = [
        town_call(
            template("importance score"),
            agent="Alice Wilson",
            summary_block="Name: Alice Wilson",
            slots={"memory": m},
        )
        for m in memories
    ]
    answers = llm.send_many(calls)
    assert [a.score for a in answers] == [llm.send(c).score for c in calls]
    assert llm.stats.calls["importance score"] == 14


def test_concurrency_must_be_positive(make_llm: MakeLLM) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        make_llm(concurrency=0)
