"""The town's prompts on the real local model (llama.cpp + SmolLM2-135M), when installed.

Only short-answer categories: a daily plan from a 135M model takes tens of seconds per attempt
on 2 cores and is mostly refused by the validators anyway (which the recorded run shows).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_core import Requirements, TownLLM, open_town_llm
from agent_core.call import town_call
from agent_core.templates import FINDING_LOCATION, IMPORTANCE
from llmcache import Mode
from llmcache.llm import (
    DEFAULT_MODEL,
    LocalServer,
    LocalServerError,
    find_llama_server,
    find_model,
)
from llmcache.recording import read_records
from llmcache.testing import HashEmbedder

pytestmark = pytest.mark.slow

BLOCK = "Name: Ethan Wilson (age 24, male)\nCurrently: Ethan works at Fresh Grocery Store."


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    try:
        find_llama_server()
        find_model(DEFAULT_MODEL)
    except LocalServerError as exc:
        pytest.skip(f"local LLM not installed: {exc}")
    with LocalServer(parallel=1, ctx_per_slot=2048) as running:
        yield running


@pytest.fixture
def town_llm(server: Any, tmp_path: Path) -> Iterator[TownLLM]:
    llm = open_town_llm(
        server.client(),
        model=server.model,
        mode=Mode.OFF,
        embedder=HashEmbedder(),
        record_to=tmp_path / "local.jsonl",
        max_attempts=2,
        params={"temperature": 0.0, "max_tokens": 64},
    )
    yield llm
    llm.close()


def test_short_prompts_through_the_local_model_are_validated_and_recorded(
    town_llm: TownLLM,
) -> None:
    options = ["Wilson Family House: Kitchen", "Wilson Family House: Second Bedroom"]
    importance = town_llm.ask(
        IMPORTANCE,
        agent="Ethan Wilson",
        summary_block=BLOCK,
        slots={"memory": "Ethan Wilson burnt the dinner"},
    )
    location = town_llm.ask(
        FINDING_LOCATION,
        agent="Ethan Wilson",
        summary_block=BLOCK,
        slots={"task": "cooking dinner", "what": "areas", "options": options},
        requirements=Requirements(options=options),
    )
    assert town_llm.llm.recorder is not None
    calls = read_records(town_llm.llm.recorder.path)
    # A 135M model may fail a prompt outright; what is recorded as a call is always valid.
    assert len(calls) + sum(town_llm.stats.failed.values()) == 2
    for rec in calls:
        assert rec.model == town_llm.model
        assert rec.response is not None and rec.metadata["group"] in (
            "importance",
            "finding location",
        )
    if importance is not None:
        assert 1 <= importance.score <= 10
    if location is not None:
        assert location.location in options


def test_a_run_seed_gives_the_same_answers_from_the_real_server(
    server: Any, tmp_path: Path
) -> None:
    # At the server's own sampling temperature, with ratings asked side by side and batched:
    # what makes the town one town per seed on llama.cpp (agent_core/README.md, "One seed,
    # one town"). Six ratings of a 135M model sampled alike by chance would be rare.
    memories = [
        "Ethan Wilson burnt the dinner",
        "Ethan Wilson restocked the apples",
        "A customer shouted at Ethan Wilson",
        "Ethan Wilson found a wallet in the aisle",
        "The store's fridge broke down",
        "Ethan Wilson's sister Alice won her game",
    ]
    answers = []
    for n in range(2):
        path = tmp_path / f"seeded{n}.jsonl"
        llm = open_town_llm(
            server.client(),
            model=server.model,
            record_to=path,
            max_attempts=2,
            concurrency=4,
            rating_batch=8,
            seed=11,
        )
        try:
            llm.send_many(
                [
                    town_call(
                        IMPORTANCE, agent="Ethan Wilson", summary_block=BLOCK, slots={"memory": m}
                    )
                    for m in memories
                ]
            )
        finally:
            llm.close()
        answers.append(sorted((r.keywords[0], r.response) for r in read_records(path)))
    assert len(answers[0]) == len(memories)
    assert answers[0] == answers[1]
