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
