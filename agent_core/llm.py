"""The town's one door to the LLM, and the only module that wires agent_core to llmcache.

Every prompt goes through :class:`TownLLM.ask`: the template renders the messages, the call
carries ``CacheOptions`` (category, agent, keywords, options, a per-query validator, and
metadata the recorder writes: group, simulated time, observed actors), and
``CachedLLM.create_with_info`` answers it — from the cache, or from the model with validation,
resubmission and escalation. An answer that never validates is logged and counted, and the
caller falls back to a deterministic default; it is never recorded as valid and never crashes
the run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import openai
from pydantic import BaseModel, Field

from llmcache import (
    CacheConfig,
    CachedLLM,
    CacheOptions,
    CategoryPolicy,
    EmbedMode,
    LLMCacheError,
    Mode,
    SemanticCache,
)
from llmcache.embedders import Embedder
from llmcache.errors import InvalidResponseError
from llmcache.modifiers import Choose, ModifyContext, Read, Revise
from llmcache.recording import Recorder

from .call import TownCall, town_call
from .rating_batch import BATCHED_CATEGORY, RatingBatcher
from .requirements import Requirements
from .templates import TEMPLATES, SlotValue, Template, choose_extract, choose_render

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_RATING_BATCH",
    "LLMStats",
    "TownLLM",
    "cache_config",
    "category_policy",
    "open_town_llm",
    "town_options",
    "town_request",
]

logger = logging.getLogger("agent_core")

#: Prompts in flight at once where the town asks several together, against a real server (a
#: server with fewer slots queues the rest). The town's importance ratings come in groups of up
#: to ``SimConfig.attention_bandwidth`` per perception and a few more per reflection.
DEFAULT_CONCURRENCY = 4

#: The most importance ratings of one moment asked in one prompt against a real model (see
#: :mod:`agent_core.rating_batch`): a perception brings up to ``SimConfig.attention_bandwidth`` (3),
#: a reflection a few insights, an agent's seed memory its sentences.
DEFAULT_RATING_BATCH = 8

R = TypeVar("R", bound=BaseModel)

# Transient provider failures worth waiting out; anything else fails the call at once.
_TRANSIENT = (
    openai.APIConnectionError,
    openai.APITimeoutError,
    openai.RateLimitError,
    openai.InternalServerError,
)


class LLMStats(BaseModel):
    """What the town asked and how it was answered, per category."""

    calls: Counter[str] = Field(default_factory=Counter)
    outcomes: Counter[str] = Field(default_factory=Counter)  # "category|outcome"
    attempts: Counter[str] = Field(default_factory=Counter)  # requests, resubmissions included
    resubmissions: Counter[str] = Field(default_factory=Counter)  # extra attempts, summed
    first_try: Counter[str] = Field(default_factory=Counter)  # valid at the first attempt
    resubmitted: Counter[str] = Field(default_factory=Counter)  # calls that needed more
    escalated: Counter[str] = Field(default_factory=Counter)
    failed: Counter[str] = Field(default_factory=Counter)  # no valid answer: fallback used
    # Calls the model answered inside a prompt that asked several (agent_core.rating_batch), and
    # those prompts: a run's model requests are its attempts less ``batched`` plus ``batches``.
    batched: Counter[str] = Field(default_factory=Counter)
    batches: Counter[str] = Field(default_factory=Counter)

    def total(self) -> int:
        return sum(self.calls.values())


def _unbound_revision(ctx: ModifyContext) -> list[dict[str, Any]] | None:
    # A revise category's policy default: a call that arrives without its bound modifier (see
    # town_options) has no query to revise for, so its candidate is a miss.
    return None


def category_policy(t: Template[Any]) -> CategoryPolicy:
    """The cache policy a template declares: its modifier, its schema as the default
    validator (each call also passes a validator with the query's own rules), bypass for the
    dialogue categories."""
    if t.bypass:
        return CategoryPolicy(bypass=True, validator=t.validator())
    modifier: Read | Choose | Revise
    if t.modifier == "read":
        modifier = Read()
    elif t.modifier == "choose":
        modifier = Choose(extract=choose_extract, render=choose_render)
    else:
        modifier = Revise(builder=_unbound_revision)
    return CategoryPolicy(modifier=modifier, validator=t.validator())


def town_options(
    call: TownCall,
    *,
    query_schema: bool = True,
    answer_tokens: bool = True,
    seed: int | None = None,
) -> CacheOptions:
    """The cache options of one town call.

    The modifier is bound to this query (a revision knows the query's rules and situation), the
    validator checks this query's requirements, and with ``query_schema`` this query's JSON
    schema goes out as a per-query constraint -- with ``answer_tokens``, also that schema's
    worst-case ``max_tokens`` -- sent with the request (and with a revision), kept out of the
    table key, so all queries of a template still share their agent's table. ``seed`` (the
    call's sampling seed, see :class:`TownLLM`) is a per-query constraint for the same reason.
    """
    t = call.template
    modifier: Revise | None = None
    if t.modifier == "revise":

        def revise(ctx: ModifyContext) -> list[dict[str, Any]] | None:
            return call.revision(ctx.candidate.entry.content)

        modifier = Revise(builder=revise)
    constraints: dict[str, Any] = {}
    if query_schema:
        constraints["response_format"] = call.response_format()
        if answer_tokens:
            constraints["max_tokens"] = call.answer_tokens()
    if seed is not None:
        constraints["seed"] = seed
    return CacheOptions(
        category=call.category,
        agent=call.agent,
        keywords=call.keywords(),
        options=call.requirements.options,
        modifier=modifier,
        validator=call.validator(),
        metadata=call.record_metadata(),
        constraints=constraints,
    )


def town_request(call: TownCall, model: str, *, query_schema: bool = True) -> dict[str, Any]:
    """The keyword arguments of ``create`` for a call (what its table's key hashes): the model
    and the messages; without per-query schemas, also the template's own schema and
    ``max_tokens`` (with them, both are the query's constraints: see :func:`town_options`)."""
    request: dict[str, Any] = {"model": model, "messages": call.messages()}
    if not query_schema:
        request["response_format"] = call.template.response_format()
        request["max_tokens"] = call.max_tokens
    return request


def cache_config(
    *,
    mode: Mode = Mode.OFF,
    embed: EmbedMode = EmbedMode.KEYWORD,
    threshold: float | None = None,
    max_attempts: int = 20,
    superior_model: str | None = None,
) -> CacheConfig:
    """A cache configuration with a policy for every one of the town's categories."""
    extra: dict[str, Any] = {} if threshold is None else {"threshold": threshold}
    return CacheConfig(
        mode=mode,
        embed=embed,
        max_attempts=max_attempts,
        superior_model=superior_model,
        categories={t.category: category_policy(t) for t in TEMPLATES},
        **extra,
    )


class TownLLM:
    """Asks templated questions through a :class:`~llmcache.CachedLLM`.

    ``params`` are extra request parameters sent with every call (``temperature``,
    ``max_tokens`` …); they are part of every cache table's key, so keep them fixed across runs
    whose caches should be shared.

    ``concurrency`` is how many calls of one :meth:`send_many` are in flight at once. The town
    asks independent prompts together where its order allows (the importance ratings of what
    one agent perceives in one step), and a server with several slots answers them faster
    together than one by one. Answers come back in the order asked, so the simulation's state
    does not depend on it; only which request reaches the model first does, which matters for
    a deterministic double (its seeded faults), so keep 1 there.

    ``seed``: the run's seed. Each call then carries a sampling seed of its own, drawn from the
    run's seed, the agent, the prompt and how often this run has asked that prompt before, so
    that a run on a server that honours seeds (llama.cpp's, OpenAI's best effort) is
    reproducible -- the same seed, the same answers, the same town -- while a prompt asked
    again, or in another run, is still sampled afresh. Without it the server draws its own
    seed for every request, and two runs of one seed part at the first sampled token. The
    seed is a per-query constraint (:func:`town_options`): it never splits a cache table.
    ``params`` holding a ``seed`` of their own win (one seed for every call).

    ``batcher``: the :class:`~agent_core.rating_batch.RatingBatcher` between ``llm`` and its client,
    if any; :meth:`send_many` then runs a group of importance ratings side by side, and the
    ones the cache does not answer reach the model as one prompt (see
    :mod:`agent_core.rating_batch`).
    """

    def __init__(
        self,
        llm: CachedLLM,
        *,
        model: str,
        params: Mapping[str, Any] | None = None,
        transient_retries: int = 3,
        retry_backoff: float = 0.5,
        owned: tempfile.TemporaryDirectory[str] | None = None,
        query_schemas: bool = True,
        concurrency: int = 1,
        batcher: RatingBatcher | None = None,
        seed: int | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        self.llm = llm
        self.model = model
        self.params = dict(params or {})
        # Per-query JSON schemas (constrained decoding of this query's places, options, times):
        # off only for a provider that refuses them (they use enum, const, anyOf, prefixItems).
        self.query_schemas = query_schemas
        self.transient_retries = transient_retries
        self.retry_backoff = retry_backoff
        self.stats = LLMStats()
        self.concurrency = concurrency
        self._owned = owned
        self._stats_lock = threading.Lock()  # Counter updates are not atomic across threads
        self._pool: ThreadPoolExecutor | None = None
        self.batcher = batcher
        self._group_pool: ThreadPoolExecutor | None = None
        self.seed = None if "seed" in self.params else seed
        self._asked: Counter[str] = Counter()  # prompt digest -> times asked (per-call seeds)

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
        time: str | None = None,
    ) -> R | None:
        """The validated answer to one prompt, or ``None`` if no valid answer could be had."""
        call = town_call(
            t,
            agent=agent,
            summary_block=summary_block,
            slots=slots,
            requirements=requirements,
            context=context,
            metadata=metadata,
            time=time,
        )
        answer: R | None = self.send(call)
        return answer

    def send_many(self, calls: Sequence[TownCall]) -> list[Any]:
        """The answers to independent calls, in their order; up to ``concurrency`` in flight,
        or, for importance ratings with a :attr:`batcher`, a group of them at once."""
        if (
            self.batcher is not None
            and len(calls) >= 2
            and all(c.category == BATCHED_CATEGORY for c in calls)
        ):
            return self._send_grouped(calls, self.batcher)
        if self.concurrency == 1 or len(calls) < 2:
            return [self.send(c) for c in calls]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="town-llm")
        # Seeds are drawn here, in the calls' order, not in whichever thread runs first.
        seeds = [self._seed_of(c) for c in calls]
        return list(self._pool.map(self._deliver, calls, seeds))

    def _send_grouped(self, calls: Sequence[TownCall], batcher: RatingBatcher) -> list[Any]:
        # Groups in order, each of at most ``max_size`` calls and without two equal prompts: the
        # cache makes a thread asking a prompt another thread is already asking wait for that
        # answer, and inside one group that thread would be waited for in turn.
        chunks: list[list[TownCall]] = []
        for call in calls:
            if (
                not chunks
                or len(chunks[-1]) == batcher.max_size
                or any(c.messages() == call.messages() for c in chunks[-1])
            ):
                chunks.append([])
            chunks[-1].append(call)
        if self._group_pool is None:
            self._group_pool = ThreadPoolExecutor(batcher.max_size, thread_name_prefix="town-rate")
        pool = self._group_pool
        answers: list[Any] = []
        for chunk in chunks:
            if len(chunk) == 1:
                answers.append(self.send(chunk[0]))
                continue
            seeds = [self._seed_of(c) for c in chunk]  # in order, as in send_many
            with batcher.group(chunk) as g:

                def one(
                    index: int,
                    g: Any = g,
                    chunk: list[TownCall] = chunk,
                    seeds: list[int | None] = seeds,
                ) -> Any:
                    with batcher.member(g, index):
                        return self._deliver(chunk[index], seeds[index])

                answers.extend(pool.map(one, range(len(chunk))))
            self._count("batched", BATCHED_CATEGORY, g.batched)
            self._count("batches", BATCHED_CATEGORY, g.batches)
        return answers

    def _count(self, counter: str, category: str, n: int = 1) -> None:
        with self._stats_lock:
            getattr(self.stats, counter)[category] += n

    def send(self, call: TownCall) -> Any:
        """The validated answer to one typed call, or ``None`` if no valid answer could be had."""
        return self._deliver(call, self._seed_of(call))

    def _seed_of(self, call: TownCall) -> int | None:
        """The sampling seed of ``call`` (see the class's ``seed``), or ``None`` without one."""
        if self.seed is None:
            return None
        prompt = json.dumps([call.agent, call.category, call.messages()], sort_keys=True)
        digest = hashlib.blake2b(prompt.encode("utf-8"), digest_size=16).hexdigest()
        with self._stats_lock:
            occurrence = self._asked[digest]
            self._asked[digest] += 1
        mixed = hashlib.blake2b(f"{self.seed}:{digest}:{occurrence}".encode(), digest_size=4)
        return int.from_bytes(mixed.digest(), "big") % 2**31  # the range servers accept

    def _deliver(self, call: TownCall, seed: int | None) -> Any:
        category = call.category
        self._count("calls", category)
        content = self._send(call, seed)
        if content is None:
            self._count("failed", category)
            return None
        try:
            return call.parse(content)
        except ValueError:  # cannot happen for a validated answer; never trust it blindly
            logger.warning("%s: validated answer failed to parse", category, exc_info=True)
            self._count("failed", category)
            return None

    def _send(self, call: TownCall, seed: int | None) -> str | None:
        category = call.category
        # ``params`` (e.g. --max-tokens) replace the query's own answer cap.
        options = town_options(
            call,
            query_schema=self.query_schemas,
            answer_tokens="max_tokens" not in self.params,
            seed=seed,
        )
        # ``params`` (e.g. --max-tokens) win over the template's own values.
        request = {**town_request(call, self.model, query_schema=self.query_schemas), **self.params}
        for attempt in range(self.transient_retries + 1):
            try:
                completion, info = self.llm.chat.completions.create_with_info(
                    **request, cache=options
                )
            except InvalidResponseError as exc:
                logger.warning(
                    "%s for %s: no valid answer after %d attempts (%s)",
                    category,
                    options.agent,
                    exc.attempts,
                    exc.last_error[:200],
                )
                self._count("attempts", category, exc.attempts)
                self._count("resubmissions", category, max(0, exc.attempts - 1))
                self._count("resubmitted", category)
                return None
            except _TRANSIENT as exc:
                if attempt == self.transient_retries:
                    logger.warning("%s: provider kept failing: %s", category, exc)
                    return None
                time.sleep(min(8.0, self.retry_backoff * 2**attempt))
                continue
            except (openai.APIError, LLMCacheError) as exc:
                logger.warning("%s: call failed: %s", category, exc)
                return None
            self._count("outcomes", f"{category}|{info.outcome}")
            self._count("attempts", category, info.attempts)
            self._count("resubmissions", category, max(0, info.attempts - 1))
            if info.attempts == 1:
                self._count("first_try", category)
            elif info.attempts > 1:
                self._count("resubmitted", category)
            if info.escalated:
                self._count("escalated", category)
            if not completion.choices:
                return None
            return completion.choices[0].message.content
        return None

    def close(self) -> None:
        for pool in (self._pool, self._group_pool):
            if pool is not None:
                pool.shutdown()
        self._pool = self._group_pool = None
        self.llm.close()
        if self._owned is not None:
            self._owned.cleanup()
            self._owned = None


def open_town_llm(
    client: Any,
    *,
    model: str,
    cache_dir: str | Path | None = None,
    mode: Mode = Mode.OFF,
    embedder: Embedder | None = None,
    record_to: str | Path | None = None,
    threshold: float | None = None,
    max_attempts: int = 20,
    superior_model: str | None = None,
    embed: EmbedMode = EmbedMode.KEYWORD,
    params: Mapping[str, Any] | None = None,
    transient_retries: int = 3,
    retry_backoff: float = 0.5,
    query_schemas: bool = True,
    concurrency: int = 1,
    rating_batch: int = 1,
    seed: int | None = None,
) -> TownLLM:
    """A :class:`TownLLM` over any OpenAI-compatible ``client``.

    ``mode`` is the cache mode (``off`` still validates, retries and records every call).
    Without ``cache_dir`` the cache lives in a temporary directory removed by ``close()``.
    ``record_to`` appends every call to a JSONL dataset. ``transient_retries`` is how often a
    connection, timeout, rate-limit or server error is retried (with backoff) before the call
    counts as failed; the first wait is ``retry_backoff`` seconds, doubling each time.
    ``query_schemas``: send each query's own JSON schema (see :func:`town_options`).
    ``concurrency``: calls in flight at once where the town asks several together (see
    :class:`TownLLM`). ``rating_batch``: the most importance ratings of one moment the model is
    asked in one prompt (1: each in its own; see :mod:`agent_core.rating_batch`). ``seed``: the
    run's seed, from which every call draws a sampling seed of its own (see :class:`TownLLM`).
    """
    owned: tempfile.TemporaryDirectory[str] | None = None
    if cache_dir is None:
        owned = tempfile.TemporaryDirectory(prefix="agent_core-cache-")
        cache_dir = owned.name
    if embedder is None and mode is Mode.OFF:
        # Nothing is embedded in off mode: spare the default model's load time.
        from llmcache.testing import HashEmbedder

        embedder = HashEmbedder()
    cache = SemanticCache(
        cache_dir,
        embedder=embedder,
        config=cache_config(
            mode=mode,
            embed=embed,
            threshold=threshold,
            max_attempts=max_attempts,
            superior_model=superior_model,
        ),
    )
    recorder = Recorder(record_to) if record_to is not None else None
    if rating_batch < 1:
        raise ValueError(f"rating_batch must be at least 1, not {rating_batch}")
    batcher = RatingBatcher(client, max_size=rating_batch) if rating_batch > 1 else None
    return TownLLM(
        CachedLLM(batcher or client, cache=cache, recorder=recorder),
        model=model,
        params=params,
        transient_retries=transient_retries,
        retry_backoff=retry_backoff,
        owned=owned,
        query_schemas=query_schemas,
        concurrency=concurrency,
        batcher=batcher,
        seed=seed,
    )
