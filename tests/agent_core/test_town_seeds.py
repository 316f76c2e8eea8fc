"""Per-call sampling seeds (``TownLLM(seed=...)``): one run seed, one town, on a model that
honours seeds; a prompt asked again, or in another run, is sampled afresh."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from openai.types.chat import ChatCompletion

from agent_core import Simulation, load_agents, open_town_llm, template
from agent_core.call import town_call
from agent_core.testing import ScriptedLLM
from llmcache.recording import read_records
from llmcache.testing import HashEmbedder

AGENTS = ["Alice Wilson", "Mary Oliver"]


class SamplingLLM(ScriptedLLM):
    """A test double that samples like a server: the answer follows the request's ``seed``,
    and a request without one is sampled at a seed of the server's own choosing."""

    def answer(self, kwargs: dict[str, Any]) -> ChatCompletion:
        seed = kwargs.get("seed", random.SystemRandom().randrange(2**31))
        with self._lock:
            self.requests["sampled"] += 1
        return ScriptedLLM(seed=seed).answer(kwargs)


def _run(path: Path, seed: int | None, *, concurrency: int = 4) -> tuple[list[str], Any]:
    llm = open_town_llm(
        SamplingLLM(),
        model="sampled",
        cache_dir=path.with_suffix(".cache"),
        embedder=HashEmbedder(),
        record_to=path,
        concurrency=concurrency,
        rating_batch=8,
        seed=seed,
    )
    try:
        Simulation(
            llm, embedder=HashEmbedder(), seeds=load_agents(names=AGENTS), seed=seed or 0
        ).run(0.2)
        stats = llm.stats
    finally:
        llm.close()
    lines = sorted(
        json.dumps([r.category, r.agent, r.messages, r.response], sort_keys=True)
        for r in read_records(path, include_invalid=True)
    )
    return lines, stats


def test_one_run_seed_is_one_town_on_a_model_that_honours_seeds(tmp_path: Path) -> None:
    first, stats = _run(tmp_path / "a.jsonl", 2)
    again, _ = _run(tmp_path / "b.jsonl", 2, concurrency=1)
    assert first == again  # every prompt and answer, however the requests overlapped
    assert sum(stats.batches.values()) > 0  # the ratings of one moment were still batched
    other, _ = _run(tmp_path / "c.jsonl", 3)
    assert other != first
    # Without a run seed the server draws its own, and the town parts at once.
    unseeded, _ = _run(tmp_path / "d.jsonl", None)
    unseeded_again, _ = _run(tmp_path / "e.jsonl", None)
    assert unseeded != unseeded_again


def _call(memory: str) -> Any:
    return town_call(
        template("importance score"),
        agent="Alice Wilson",
        summary_block="Name: Alice Wilson",
        slots={"memory": memory},
    )


def _sent_seeds(path: Path) -> list[Any]:
    return [r.constraints.get("seed") for r in read_records(path)]


def test_a_prompt_asked_again_gets_another_seed_the_same_in_every_run(tmp_path: Path) -> None:
    seeds = []
    for n, run_seed in enumerate((7, 7, 8)):
        path = tmp_path / f"{n}.jsonl"
        llm = open_town_llm(ScriptedLLM(), model="m", record_to=path, seed=run_seed)
        llm.send(_call("Alice saw a bird"))
        llm.send(_call("Alice saw a bird"))
        llm.send(_call("Alice saw a cat"))
        llm.close()
        seeds.append(_sent_seeds(path))
    assert seeds[0] == seeds[1]  # the same run seed: the same seeds
    assert len(set(seeds[0])) == 3  # a repeated prompt is sampled afresh
    assert all(isinstance(s, int) and 0 <= s < 2**31 for s in seeds[0])
    assert not set(seeds[0]) & set(seeds[2])  # another run, other seeds


def test_no_run_seed_sends_none_and_a_seed_in_params_wins(tmp_path: Path) -> None:
    llm = open_town_llm(ScriptedLLM(), model="m", record_to=tmp_path / "a.jsonl")
    llm.send(_call("Alice saw a bird"))
    llm.close()
    assert _sent_seeds(tmp_path / "a.jsonl") == [None]
    client = ScriptedLLM()
    seen: list[Any] = []
    original = client.answer

    def spy(kwargs: dict[str, Any]) -> ChatCompletion:
        seen.append(kwargs.get("seed"))
        return original(kwargs)

    client.answer = spy  # type: ignore[method-assign]
    llm = open_town_llm(client, model="m", params={"seed": 11}, seed=5)
    llm.send(_call("Alice saw a bird"))
    llm.send(_call("Alice saw a bird"))
    llm.close()
    assert seen == [11, 11]
