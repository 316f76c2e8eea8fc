"""The town's 14 prompt categories, end to end on the real local model (marked slow; CI runs it).

One prompt of every category is taken from a real run of the town: the bundled world and its
eight agents are simulated with the scripted double until every category has been asked once,
and the first call of each is kept exactly as the agent made it (template, summary block,
slots, requirements, metadata: its :class:`~agent_core.TownCall`). Each is then sent again
through :meth:`TownLLM.send` -- the function every agent prompt goes through: the call renders
the messages, the request carries *this query's* JSON schema as a per-query constraint (llama.cpp
constrains decoding to it: its places, options, times and counts) and the query's own validator,
and ``CachedLLM.create_with_info`` validates, resubmits up to ``MAX_ATTEMPTS`` times on the
default model and then escalates to the superior model.

Every category must get a valid answer, and how it was made (attempts, escalation, which model
answered) is checked in the recorded dataset, where the cache writes the call's ``CallInfo``.
Run with ``-s`` to see the per-category table. Skipped, with the install command, only when
the runtime or a model's weights are missing.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agent_core import CATEGORIES, Simulation, TownCall, TownLLM, template
from agent_core.llm import cache_config
from agent_core.testing import ScriptedLLM
from llmcache import CachedLLM, Mode, SemanticCache
from llmcache.llm import (
    DEFAULT_MODEL,
    DEFAULT_SUPERIOR_MODEL,
    LocalServer,
    LocalServerError,
    find_llama_server,
    find_model,
)
from llmcache.recording import RecordedCall, Recorder, read_records
from llmcache.testing import HashEmbedder

pytestmark = pytest.mark.slow


MAX_ATTEMPTS = 5
"""Attempts on the default model before the superior model gets ``escalation_attempts`` (3)."""
ESCALATION_ATTEMPTS = 3


def _missing(model: str) -> str | None:
    try:
        find_llama_server()
        find_model(model)
    except LocalServerError as exc:
        return str(exc)
    return None


_NOT_INSTALLED = _missing(DEFAULT_MODEL) or _missing(DEFAULT_SUPERIOR_MODEL)
needs_server = pytest.mark.skipif(
    _NOT_INSTALLED is not None, reason=f"local LLM not installed: {_NOT_INSTALLED}"
)


# ----------------------------------------------------------------------------- the prompts


class _FirstOfEachCategory(TownLLM):
    """A TownLLM that keeps the first call of every category, then answers it as usual."""

    def __init__(self, llm: CachedLLM, *, model: str) -> None:
        super().__init__(llm, model=model)
        self.first: dict[str, TownCall] = {}

    def send(self, call: TownCall) -> Any:
        self.first.setdefault(call.category, call)  # frozen, and its lists are its own copies
        return super().send(call)


def town_prompts(seed: int = 1, max_days: float = 3.0) -> dict[str, TownCall]:
    """The first prompt of every category in a scripted run of the bundled town.

    Takes about 2 s: every category has been asked by 16:00 of the first day (seed 1).
    """
    with tempfile.TemporaryDirectory(prefix="e2e-town-") as tmp:
        cache = SemanticCache(tmp, embedder=HashEmbedder(), config=cache_config())
        llm = _FirstOfEachCategory(CachedLLM(ScriptedLLM(seed=seed), cache=cache), model="s")
        sim = Simulation(llm, embedder=HashEmbedder(), seed=seed)
        steps = round(max_days * 24 * 60 / sim.config.minutes_per_step)
        for _ in range(steps):
            if len(llm.first) == len(CATEGORIES):
                break
            sim.step()
        llm.close()
    missing = sorted(set(CATEGORIES) - set(llm.first))
    assert not missing, f"the scripted town never asked {missing} in {max_days} days"
    return llm.first


# ----------------------------------------------------------------------------- fixtures


@dataclass
class Asked:
    """What the real model made of one town prompt."""

    prompt: TownCall
    answer: BaseModel | None
    seconds: float
    call: RecordedCall | None
    invalid: list[RecordedCall]


@pytest.fixture(scope="module")
def prompts() -> dict[str, TownCall]:
    return town_prompts()


@pytest.fixture(scope="module")
def server() -> Iterator[LocalServer]:
    with LocalServer(
        DEFAULT_MODEL,
        superior_model=DEFAULT_SUPERIOR_MODEL,
        parallel=1,
        ctx_per_slot=4096,
        superior_parallel=1,
        superior_ctx_per_slot=4096,
    ) as running:
        yield running


@pytest.fixture(scope="module")
def answers(
    server: LocalServer,
    prompts: dict[str, TownCall],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, Asked]]:
    """Every category asked once, in the town's order, through one CachedLLM."""
    tmp = tmp_path_factory.mktemp("e2e")
    dataset = tmp / "calls.jsonl"
    cache = SemanticCache(
        tmp / "cache",
        embedder=HashEmbedder(),
        config=cache_config(
            mode=Mode.COLLECT,
            max_attempts=MAX_ATTEMPTS,
            superior_model=server.superior_model,
        ),
    )
    assert cache.config.escalation_attempts == ESCALATION_ATTEMPTS
    llm = CachedLLM(server.client(), cache=cache, recorder=Recorder(dataset))
    asked: dict[str, Asked] = {}
    started = time.perf_counter()
    for category in CATEGORIES:
        p = prompts[category]
        town = TownLLM(llm, model=server.model, retry_backoff=1)
        before = len(_records(dataset))
        t0 = time.perf_counter()
        answer = town.send(p)
        seconds = time.perf_counter() - t0
        records = _records(dataset)[before:]
        calls = [r for r in records if r.kind == "call"]
        asked[category] = Asked(
            prompt=p,
            answer=answer,
            seconds=seconds,
            call=calls[0] if calls else None,
            invalid=[r for r in records if r.kind == "invalid_attempt"],
        )
    total = time.perf_counter() - started
    _print_table(asked, server, total)
    yield asked
    llm.close()


def _records(dataset: Path) -> list[RecordedCall]:
    return read_records(dataset, include_invalid=True) if dataset.exists() else []


def _print_table(asked: dict[str, Asked], server: LocalServer, total: float) -> None:
    print(f"\n{server.description}; max_attempts={MAX_ATTEMPTS}")
    print(f"{'category':26} {'ok':3} {'att':>3} {'esc':3} {'model':20} {'tok':>4} {'s':>6}")
    for category, a in asked.items():
        c = a.call
        print(
            f"{category:26} {'yes' if a.answer is not None else 'NO':3} "
            f"{c.attempts if c else len(a.invalid):>3} "
            f"{('yes' if c.escalated else 'no') if c else '-':3} "
            f"{_answered_by(a, server):20} {c.completion_tokens if c else 0:>4} {a.seconds:6.1f}"
        )
    print(f"all 14 categories: {total:.1f}s")


def _answered_by(a: Asked, server: LocalServer) -> str:
    """The model whose answer validated (the record names the model the town asked for)."""
    if a.call is None:
        return "-"
    return server.superior_model if a.call.escalated else server.model


# ----------------------------------------------------------------------------- tests


def test_the_scripted_town_asks_every_category(prompts: dict[str, TownCall]) -> None:
    assert sorted(prompts) == sorted(CATEGORIES)
    for category, p in prompts.items():
        assert p.template is template(category)
        assert p.agent in p.messages()[1]["content"]


@needs_server
@pytest.mark.parametrize("category", CATEGORIES)
def test_each_category_gets_a_validated_answer(
    category: str, answers: dict[str, Asked], server: LocalServer
) -> None:
    a = answers[category]
    t = a.prompt.template
    tried = [f"{r.model}: {r.error}" for r in a.invalid]
    assert a.answer is not None, f"{category}: no valid answer from either local tier: {tried}"
    assert isinstance(a.answer, t.response)

    call = a.call
    assert call is not None
    assert call.category == category and call.agent == a.prompt.agent
    # The answer on record is plain JSON (constrained decoding, not lenient recovery) and
    # passes the template's own parser with the query's rules.
    assert call.response is not None
    json.loads(call.response)
    a.prompt.parse(call.response)
    assert call.messages == a.prompt.messages()
    # The request carried this query's own schema, outside the table key.
    assert call.constraints == {
        "response_format": a.prompt.response_format(),
        "max_tokens": a.prompt.answer_tokens(),
    }
    assert "response_format" not in call.params and "max_tokens" not in call.params

    # How it was made: the cache's CallInfo, as recorded.
    assert 1 <= call.attempts <= MAX_ATTEMPTS + ESCALATION_ATTEMPTS
    assert call.escalated == (call.attempts > MAX_ATTEMPTS)
    assert len(a.invalid) == call.attempts - 1
    assert [r.model for r in a.invalid] == [
        server.model if n <= MAX_ATTEMPTS else server.superior_model
        for n in range(1, call.attempts)
    ]
    assert call.outcome == ("bypass" if t.bypass else "collect")
    assert call.completion_tokens > 0
