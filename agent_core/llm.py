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

import logging
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import openai
from pydantic import BaseModel, Field

from llmcache import (
    CacheConfig,
    CachedLLM,
    CacheOptions,
    CategoryPolicy,
    Choose,
    Embedder,
    EmbedMode,
    InvalidResponseError,
    LLMCacheError,
    Mode,
    ModifyContext,
    Read,
    Recorder,
    Revise,
    SemanticCache,
)

from .revise import RevisionRequest, build_revision
from .templates import TEMPLATES, Requirements, SlotValue, Template, choose_extract, choose_render

__all__ = ["LLMStats", "TownLLM", "cache_config", "category_policy", "open_town_llm"]

logger = logging.getLogger("agent_core")

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
    resubmissions: Counter[str] = Field(default_factory=Counter)
    escalated: Counter[str] = Field(default_factory=Counter)
    failed: Counter[str] = Field(default_factory=Counter)  # no valid answer: fallback used

    def total(self) -> int:
        return sum(self.calls.values())


def _revise_builder(ctx: ModifyContext) -> list[dict[str, Any]] | None:
    revise = ctx.options.metadata.get("revise")
    if not isinstance(revise, Mapping):
        return None
    request = RevisionRequest(
        category=ctx.options.category,
        name=str(revise.get("name", ctx.options.agent)),
        cached_content=ctx.candidate.entry.content,
        requirements=Requirements.model_validate(ctx.options.metadata.get("requirements") or {}),
        context={str(k): str(v) for k, v in (revise.get("context") or {}).items()},
    )
    messages = build_revision(request)
    return list(messages) if messages else None


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
        modifier = Revise(builder=_revise_builder)
    return CategoryPolicy(modifier=modifier, validator=t.validator())


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
        answer_tokens: Mapping[str, int] | None = None,
    ) -> None:
        self.llm = llm
        self.model = model
        self.params = dict(params or {})
        # Per-category ``max_tokens`` (e.g. ``templates.ANSWER_TOKENS``): a small local model
        # can ramble inside a JSON string until the context is full; ``params`` wins.
        self.answer_tokens = dict(answer_tokens or {})
        self.transient_retries = transient_retries
        self.retry_backoff = retry_backoff
        self.stats = LLMStats()
        self._owned = owned

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
        """The validated answer to one prompt, or ``None`` if no valid answer could be had."""
        requirements = requirements or Requirements()
        messages = t.render(summary_block, agent, slots)
        meta: dict[str, Any] = {**(metadata or {}), "group": t.group}
        rules = requirements.model_dump(exclude_none=True)
        if rules:
            # The query's own rules: what the revise builder must meet, and what lets a
            # dataset reader re-check any recorded answer (valid or refused) against its query.
            meta["requirements"] = rules
        if t.modifier == "revise":
            # What a revision prompt needs beyond the cached answer and the rules.
            meta["revise"] = {"name": agent, "context": dict(context or {})}
        options = CacheOptions(
            category=t.category,
            agent=agent,
            # Keyword mode refuses an empty keyword list; the category name is the honest
            # stand-in when a template's slots happen to be empty.
            keywords=t.keywords(slots) or [t.category],
            options=requirements.options,
            validator=t.validator(requirements),
            metadata=meta,
        )
        self.stats.calls[t.category] += 1
        content = self._send(t, messages, options)
        if content is None:
            self.stats.failed[t.category] += 1
            return None
        try:
            return t.parse(content, requirements)
        except ValueError:  # cannot happen for a validated answer; never trust it blindly
            logger.warning("%s: validated answer failed to parse", t.category, exc_info=True)
            self.stats.failed[t.category] += 1
            return None

    def _send(
        self, t: Template[Any], messages: list[dict[str, str]], options: CacheOptions
    ) -> str | None:
        params = dict(self.params)
        if t.category in self.answer_tokens:
            params.setdefault("max_tokens", self.answer_tokens[t.category])
        for attempt in range(self.transient_retries + 1):
            try:
                completion, info = self.llm.chat.completions.create_with_info(
                    model=self.model,
                    messages=messages,
                    response_format=t.response_format(),
                    cache=options,
                    **params,
                )
            except InvalidResponseError as exc:
                logger.warning(
                    "%s for %s: no valid answer after %d attempts (%s)",
                    t.category,
                    options.agent,
                    exc.attempts,
                    exc.last_error[:200],
                )
                self.stats.attempts[t.category] += exc.attempts
                self.stats.resubmissions[t.category] += max(0, exc.attempts - 1)
                return None
            except _TRANSIENT as exc:
                if attempt == self.transient_retries:
                    logger.warning("%s: provider kept failing: %s", t.category, exc)
                    return None
                time.sleep(min(8.0, self.retry_backoff * 2**attempt))
                continue
            except (openai.APIError, LLMCacheError) as exc:
                logger.warning("%s: call failed: %s", t.category, exc)
                return None
            self.stats.outcomes[f"{t.category}|{info.outcome}"] += 1
            self.stats.attempts[t.category] += info.attempts
            self.stats.resubmissions[t.category] += max(0, info.attempts - 1)
            if info.escalated:
                self.stats.escalated[t.category] += 1
            if not completion.choices:
                return None
            return completion.choices[0].message.content
        return None

    def close(self) -> None:
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
    answer_tokens: Mapping[str, int] | None = None,
) -> TownLLM:
    """A :class:`TownLLM` over any OpenAI-compatible ``client``.

    ``mode`` is the cache mode (``off`` still validates, retries and records every call).
    Without ``cache_dir`` the cache lives in a temporary directory removed by ``close()``.
    ``record_to`` appends every call to a JSONL dataset. ``transient_retries`` is how often a
    connection, timeout, rate-limit or server error is retried (with backoff) before the call
    counts as failed; the first wait is ``retry_backoff`` seconds, doubling each time.
    ``answer_tokens`` caps the answer length per category (``templates.ANSWER_TOKENS``).
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
    return TownLLM(
        CachedLLM(client, cache=cache, recorder=recorder),
        model=model,
        params=params,
        transient_retries=transient_retries,
        retry_backoff=retry_backoff,
        owned=owned,
        answer_tokens=answer_tokens,
    )
