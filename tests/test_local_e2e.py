"""The town's 14 prompt categories, end to end on the real local model (marked slow; CI runs it).

One prompt of every category is taken from a real run of the town: the bundled world and its
eight agents are simulated with the scripted double until every category has been asked once,
and the first call of each is kept exactly as the agent made it (template, summary block,
slots, requirements, metadata). Each is then asked again through :meth:`TownLLM.ask` — the
function every agent prompt goes through: the template renders the messages, the request
carries the template's JSON schema as ``response_format`` (llama.cpp constrains decoding to
it) and the query's own validator, and ``CachedLLM.create_with_info`` validates, resubmits up
to ``MAX_ATTEMPTS`` times on SmolLM2-135M and then escalates to the superior model.

Every answer must validate, and how it was made (attempts, escalation, which model answered) is
checked in the recorded dataset, where the cache writes the call's ``CallInfo``. A category
without a valid answer after every attempt xfails with the refusal reasons (two schedule
categories usually do, see ``BEYOND_LOCAL_TIERS``), but at least ``MIN_ANSWERED`` must be
answered. Run with ``-s`` to see the per-category table. Skipped, with the install command,
only when the runtime or a model's weights are missing.
"""

from __future__ import annotations

import copy
import json
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pydantic import BaseModel

from agent_core import CATEGORIES, Requirements, Simulation, Template, TownLLM, template
from agent_core.llm import cache_config
from agent_core.templates import ANSWER_TOKENS, SlotValue
from agent_core.testing import ScriptedLLM
from llmcache import CachedLLM, Mode, RecordedCall, Recorder, SemanticCache, read_records
from llmcache._errors import LocalServerError
from llmcache.local import (
    DEFAULT_MODEL,
    DEFAULT_SUPERIOR_MODEL,
    LocalServer,
    find_llama_server,
    find_model,
)
from llmcache.testing import HashEmbedder

pytestmark = pytest.mark.slow

R = TypeVar("R", bound=BaseModel)

MAX_ATTEMPTS = 5
"""Attempts on the default model before the superior model gets ``escalation_attempts`` (3)."""
ESCALATION_ATTEMPTS = 3

# Schedules whose rules (every item >= 30 minutes, the items covering the window exactly)
# neither local tier keeps reliably: measured here, SmolLM2-135M 0/6 and Qwen2.5-Coder-1.5B
# 0/5 (temperatures 0 to 0.8) on these two prompts.
BEYOND_LOCAL_TIERS = frozenset({"plan decomposition", "future plan revision"})

# A real model at temperature > 0 varies from run to run: any category may end without a valid
# answer -- then it xfails with the refusal reasons, once the cache has shown that it retried,
# escalated and refused every invalid answer -- but at least this many of the 14 must be answered
# (measured: 12 to 13; the categories that varied were the schedules and finding location).
MIN_ANSWERED = 10

# Answer length caps, per category: room for the longest valid answer seen here plus a margin.
# Constrained decoding stops at the closing brace, so a cap only bounds a rambling string; an
# answer cut off by it does not parse and counts as an invalid attempt.
MAX_TOKENS = ANSWER_TOKENS


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


@dataclass(frozen=True)
class TownPrompt:
    """One call of :meth:`TownLLM.ask` as an agent made it."""

    template: Template[Any]
    agent: str
    summary_block: str
    slots: dict[str, SlotValue]
    requirements: Requirements | None
    context: dict[str, str] | None
    metadata: dict[str, Any] | None


class _FirstOfEachCategory(TownLLM):
    """A TownLLM that keeps the first call of every category, then answers it as usual."""

    def __init__(self, llm: CachedLLM, *, model: str) -> None:
        super().__init__(llm, model=model)
        self.first: dict[str, TownPrompt] = {}

    def ask(
        self,
        t: Template[R],
        *,
        agent: str,
        summary_block: str,
        slots: Mapping[str, SlotValue],
        requirements: Requirements | None = None,
        context: Mapping[str, str] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> R | None:
        if t.category not in self.first:
            # Deep copies: the agent keeps changing its lists after the call.
            self.first[t.category] = TownPrompt(
                template=t,
                agent=agent,
                summary_block=summary_block,
                slots=copy.deepcopy(dict(slots)),
                requirements=requirements.model_copy(deep=True) if requirements else None,
                context=dict(context) if context is not None else None,
                metadata=copy.deepcopy(dict(metadata)) if metadata is not None else None,
            )
        return super().ask(
            t,
            agent=agent,
            summary_block=summary_block,
            slots=slots,
            requirements=requirements,
            context=context,
            metadata=metadata,
        )


def town_prompts(seed: int = 1, max_days: float = 3.0) -> dict[str, TownPrompt]:
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

    prompt: TownPrompt
    answer: BaseModel | None
    seconds: float
    call: RecordedCall | None
    invalid: list[RecordedCall]


@pytest.fixture(scope="module")
def prompts() -> dict[str, TownPrompt]:
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
    prompts: dict[str, TownPrompt],
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
        # One TownLLM per category only for its max_tokens; all share the CachedLLM.
        town = TownLLM(
            llm, model=server.model, params={"max_tokens": MAX_TOKENS[category]}, retry_backoff=1
        )
        before = len(_records(dataset))
        t0 = time.perf_counter()
        answer = town.ask(
            p.template,
            agent=p.agent,
            summary_block=p.summary_block,
            slots=p.slots,
            requirements=p.requirements,
            context=p.context,
            metadata=p.metadata,
        )
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


@needs_server
def test_most_categories_are_answered(answers: dict[str, Asked]) -> None:
    unanswered = sorted(c for c, a in answers.items() if a.answer is None)
    assert len(answers) - len(unanswered) >= MIN_ANSWERED, f"unanswered: {unanswered}"


def test_the_scripted_town_asks_every_category(prompts: dict[str, TownPrompt]) -> None:
    assert sorted(prompts) == sorted(CATEGORIES)
    for category, p in prompts.items():
        assert p.template is template(category)
        messages = p.template.render(p.summary_block, p.agent, p.slots)
        assert p.agent in messages[1]["content"]


@needs_server
@pytest.mark.parametrize("category", CATEGORIES)
def test_each_category_gets_a_validated_answer(
    category: str, answers: dict[str, Asked], server: LocalServer
) -> None:
    a = answers[category]
    t = a.prompt.template
    tried = [f"{r.model}: {r.error}" for r in a.invalid]
    if a.answer is None:
        # The town's fallback path: every attempt was made, on both tiers, and refused by the
        # template's own validator; nothing invalid was recorded as a call or cached.
        assert a.call is None
        assert [r.model for r in a.invalid] == [server.model] * MAX_ATTEMPTS + [
            server.superior_model
        ] * ESCALATION_ATTEMPTS
        for r in a.invalid:
            assert r.response is not None and r.error
            with pytest.raises(ValueError):
                t.parse(r.response, a.prompt.requirements)
        pytest.xfail(f"{category}: no valid answer from either local tier: {tried}")
    assert isinstance(a.answer, t.response)

    call = a.call
    assert call is not None
    assert call.category == category and call.agent == a.prompt.agent
    # The answer on record is plain JSON (constrained decoding, not lenient recovery) and
    # passes the template's own parser with the query's rules.
    assert call.response is not None
    json.loads(call.response)
    t.parse(call.response, a.prompt.requirements)
    assert call.messages == t.render(a.prompt.summary_block, a.prompt.agent, a.prompt.slots)

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
