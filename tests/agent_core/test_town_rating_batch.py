"""Importance ratings of one moment answered by one prompt (agent_core.rating_batch), below the
cache:
each rating is still its own call, cached and recorded on its own."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from openai.types.chat import ChatCompletion

from agent_core import Simulation, TownCall, load_agents, open_town_llm, template
from agent_core.call import town_call
from agent_core.rating_batch import RatingBatcher, batch_request
from agent_core.testing import ScriptedLLM
from llmcache import Mode
from llmcache.recording import read_records
from llmcache.testing import HashEmbedder

IMPORTANCE = template("importance score")


def _score(memory: str) -> int:
    return sum(map(ord, memory)) % 10 + 1


class RatingDouble:
    """Rates a memory by its characters, asked alone or in a batch, so every answer can be
    checked against its memory; ``batch_reply`` replaces what a batch prompt gets."""

    def __init__(self, batch_reply: str | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.batch_reply = batch_reply
        self.chat = self
        self.completions = self
        self._lock = threading.Lock()

    def batches(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if "Memories:" in r["messages"][-1]["content"]]

    def create(self, **kwargs: Any) -> ChatCompletion:
        with self._lock:
            self.requests.append(kwargs)
        text = kwargs["messages"][-1]["content"]
        if "Memories:" in text:
            block = text.split("Memories:\n", 1)[1].split("\nCurrent time:", 1)[0]
            memories = [re.sub(r"^\d+\. ", "", line) for line in block.splitlines()]
            content = self.batch_reply or json.dumps({"scores": [_score(m) for m in memories]})
        else:
            memory = text.split("Memory: ", 1)[1].split("\nCurrent time:", 1)[0]
            content = json.dumps({"score": _score(memory)})
        return ChatCompletion.model_validate(
            {
                "id": "double",
                "object": "chat.completion",
                "created": 0,
                "model": kwargs["model"],
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": content},
                    }
                ],
                "usage": {"prompt_tokens": 101, "completion_tokens": 10, "total_tokens": 111},
            }
        )


def _calls(memories: list[str], agent: str = "Alice Wilson", when: str = "08:00") -> list[TownCall]:
    return [
        town_call(
            IMPORTANCE,
            agent=agent,
            summary_block=f"Name: {agent}",
            slots={"memory": m},
            time=when,
        )
        for m in memories
    ]


def _llm(tmp_path: Path, client: Any, mode: Mode = Mode.OFF, batch: int = 8) -> Any:
    return open_town_llm(
        client,
        model="m",
        cache_dir=tmp_path / "cache",
        mode=mode,
        embedder=HashEmbedder(),
        record_to=tmp_path / "run.jsonl",
        threshold=0.99,
        rating_batch=batch,
    )


def test_the_misses_of_one_moment_are_one_prompt_and_each_rating_its_own_record(
    tmp_path: Path,
) -> None:
    client = RatingDouble()
    llm = _llm(tmp_path, client)
    memories = ["Bob is eating", "the oven is on", "Carla waved", "a chair is idle"]
    answers = llm.send_many(_calls(memories))
    llm.close()
    assert [a.score for a in answers] == [_score(m) for m in memories]  # in the order asked
    assert len(client.requests) == 1 and len(client.batches()) == 1
    records = list(read_records(tmp_path / "run.jsonl", include_invalid=True))
    assert [r.category for r in records] == ["importance score"] * 4
    assert sorted(r.keywords[0] for r in records) == sorted(memories)
    for r in records:
        assert r.valid and r.attempts == 1
        assert "Memory: " + r.keywords[0] in r.messages[-1]["content"]  # its own prompt
        assert json.loads(r.response) == {"score": _score(r.keywords[0])}
    # The batch's tokens are shared out and add up to what the server counted.
    assert sum(r.prompt_tokens or 0 for r in records) == 101
    assert sum(r.completion_tokens or 0 for r in records) == 10
    assert llm.stats.batched["importance score"] == 4
    assert llm.stats.batches["importance score"] == 1
    assert llm.stats.first_try["importance score"] == 4


def test_a_batch_asks_for_exactly_one_score_per_memory() -> None:
    calls = _calls(["a", "b", "c"])
    own = {"model": "m", "temperature": 0.5, "messages": calls[0].messages(), "max_tokens": 9}
    request = batch_request(calls, own)
    scores = request["response_format"]["json_schema"]["schema"]["properties"]["scores"]
    assert scores["minItems"] == scores["maxItems"] == 3
    assert scores["items"] == {"type": "integer", "minimum": 1, "maximum": 10}
    assert request["temperature"] == 0.5 and request["model"] == "m"
    assert request["max_tokens"] > 9
    text = request["messages"][-1]["content"]
    assert "Memories:\n1. a\n2. b\n3. c\nCurrent time: 08:00" in text
    assert text.startswith("Name: Alice Wilson")  # the agent's prefix, as a single rating's


def test_ratings_the_cache_answers_never_reach_the_model(tmp_path: Path) -> None:
    client = RatingDouble()
    llm = _llm(tmp_path, client, mode=Mode.ONLINE)
    llm.send_many(_calls(["Bob is eating", "the oven is on"]))
    client.requests.clear()
    memories = ["Bob is eating", "Carla waved", "the oven is on", "a dog barks"]
    answers = llm.send_many(_calls(memories))
    llm.close()
    assert [a.score for a in answers] == [_score(m) for m in memories]
    # The two repeats were hits; only the two new ratings were asked, together.
    assert len(client.requests) == 1
    assert "1. Carla waved\n2. a dog barks\n" in client.requests[0]["messages"][-1]["content"]


def test_a_failed_batch_answer_asks_each_rating_on_its_own(tmp_path: Path) -> None:
    client = RatingDouble(batch_reply='{"scores": [3]}')  # one score for three memories
    llm = _llm(tmp_path, client)
    memories = ["Bob is eating", "Carla waved", "a dog barks"]
    answers = llm.send_many(_calls(memories))
    llm.close()
    assert [a.score for a in answers] == [_score(m) for m in memories]
    assert len(client.batches()) == 1 and len(client.requests) == 4
    assert llm.stats.batched["importance score"] == 0
    assert llm.stats.first_try["importance score"] == 3


def test_equal_prompts_go_to_separate_groups_without_waiting(tmp_path: Path) -> None:
    # The cache makes a thread asking the prompt another thread is asking wait for its answer;
    # two equal prompts in one group would wait for each other until the group gave up.
    client = RatingDouble()
    llm = _llm(tmp_path, client, mode=Mode.ONLINE)
    assert llm.batcher is not None
    memories = ["a desk is idle", "Bob is eating", "a desk is idle", "Carla waved"]
    answers = llm.send_many(_calls(memories))
    llm.close()
    assert [a.score for a in answers] == [_score(m) for m in memories]
    assert llm.batcher.timeouts == 0
    # [desk, Bob] as one prompt, then [desk, Carla], where desk is now a hit: Carla alone.
    assert len(client.requests) == 2 and len(client.batches()) == 1
    assert "1. a desk is idle\n2. Bob is eating\n" in client.batches()[0]["messages"][-1]["content"]
    assert "Memory: Carla waved" in client.requests[1]["messages"][-1]["content"]


def test_calls_of_different_moments_are_not_mixed(tmp_path: Path) -> None:
    client = RatingDouble()
    llm = _llm(tmp_path, client)
    calls = _calls(["Bob is eating"], when="08:00") + _calls(["Carla waved"], when="08:10")
    answers = llm.send_many(calls)
    llm.close()
    assert [a.score for a in answers] == [_score("Bob is eating"), _score("Carla waved")]
    assert client.batches() == [] and len(client.requests) == 2


def test_a_group_bigger_than_a_batch_is_split(tmp_path: Path) -> None:
    client = RatingDouble()
    llm = _llm(tmp_path, client, batch=3)
    memories = [f"bird number {n} sings" for n in range(7)]
    answers = llm.send_many(_calls(memories))
    llm.close()
    assert [a.score for a in answers] == [_score(m) for m in memories]
    # 3 + 3 together, the last alone.
    assert len(client.batches()) == 2 and len(client.requests) == 3


def test_a_call_that_never_settles_does_not_hold_the_group(tmp_path: Path) -> None:
    client = RatingDouble()
    batcher = RatingBatcher(client, max_size=4, wait_seconds=0.2)
    calls = _calls(["Bob is eating", "Carla waved"])
    results: list[Any] = []
    with batcher.group(calls) as g:

        def first() -> None:
            with batcher.member(g, 0):
                kwargs = {"model": "m", "messages": calls[0].messages()}
                results.append(batcher.chat.completions.create(**kwargs))

        t = threading.Thread(target=first)
        t0 = time.monotonic()
        t.start()
        t.join(5)
        # Call 1 never arrived nor left: call 0 was asked alone after the wait.
        assert not t.is_alive() and time.monotonic() - t0 < 5
        g.leave(1)
    assert g.timed_out and batcher.timeouts == 1 and batcher.batches == 0
    assert json.loads(results[0].choices[0].message.content) == {"score": _score("Bob is eating")}


def test_rating_batch_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="rating_batch"):
        _llm(tmp_path, RatingDouble(), batch=0)
    with pytest.raises(ValueError, match="at least 2"):
        RatingBatcher(RatingDouble(), max_size=1)


def test_a_town_run_with_batched_ratings_records_every_rating_on_its_own(
    tmp_path: Path,
) -> None:
    client = ScriptedLLM(seed=1)
    llm = open_town_llm(client, model="scripted", record_to=tmp_path / "run.jsonl", rating_batch=8)
    seeds = load_agents(names=["Alice Wilson", "Mary Oliver"])
    summary = Simulation(llm, embedder=HashEmbedder(), seeds=seeds, seed=2).run(0.2)
    llm.close()
    ratings = [
        r
        for r in read_records(tmp_path / "run.jsonl", include_invalid=True)
        if r.category == "importance score"
    ]
    assert len(ratings) == summary.calls["importance score"]
    assert all(r.valid for r in ratings)
    assert summary.batches["importance score"] >= 2  # the seed memories, perceptions
    assert summary.batched["importance score"] >= 2 * summary.batches["importance score"]
    # The model saw fewer rating prompts than the run has ratings.
    asked = client.requests["importance score"] + client.requests["importance scores"]
    assert asked < len(ratings)
    assert (
        asked
        == len(ratings) - summary.batched["importance score"] + summary.batches["importance score"]
    )
