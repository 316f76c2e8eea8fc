"""One cached call, start to finish. Synchronous; the async client runs it in a worker thread.

    options → policy → partition → embedding text → vector → lookup → decision
      hit:  modifier → validate → ChatCompletion rebuilt from the stored JSON
      miss: LLM call → validate (retry, escalate) → store → ChatCompletion as the server sent it
    → ledger (+ recorder)

The LLM is reached only through ``call(kwargs) -> ChatCompletion``, so the same code serves the
sync client, the async client (which hops back to its event loop) and tests.
"""

from __future__ import annotations

import copy
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from openai.types.chat import ChatCompletion

from ._cache import SemanticCache
from ._config import ResolvedPolicy
from ._errors import InvalidResponseError
from ._keys import embedding_text, output_params, partition_for
from ._modifiers import Read, modifier_name
from ._protocols import ModifyContext
from ._recorder import RecordedCall, Recorder
from ._tokens import count_message_tokens, count_tokens
from ._types import CacheEntry, CacheOptions, CallInfo, Candidate, Mode, Partition, Usage
from ._validation import CheckFn, as_validator, check

__all__ = ["CallFn", "run_cached_call"]

logger = logging.getLogger("llmcache")

CallFn = Callable[[dict[str, Any]], ChatCompletion]

# How many times a revision prompt may be resubmitted before the hit is given up as a miss.
_REVISE_ATTEMPTS = 3


def _content(completion: ChatCompletion) -> str | None:
    if not completion.choices:
        return None
    return completion.choices[0].message.content


def _usage(completion: ChatCompletion, messages: Any) -> Usage:
    u = completion.usage
    if u is not None and (u.prompt_tokens or u.completion_tokens):
        return Usage(prompt_tokens=u.prompt_tokens, completion_tokens=u.completion_tokens)
    # The server gave no usage: estimate, and say which estimate in the record.
    prompt, source = count_message_tokens(messages)
    completion_tokens, _ = count_tokens(_content(completion) or "")
    return Usage(prompt_tokens=prompt, completion_tokens=completion_tokens, source=source)


InvalidFn = Callable[[int, str, "str | None", Usage, str], None]


def _ignore_invalid(attempt: int, model: str, content: str | None, usage: Usage, why: str) -> None:
    return None


@dataclass
class _Attempts:
    """The result of sending one request until it validates."""

    completion: ChatCompletion
    content: str
    attempts: int
    escalated: bool
    usage: Usage  # all attempts
    final_usage: Usage  # the accepted answer alone
    cost: float


def _send_validated(
    cache: SemanticCache,
    kwargs: dict[str, Any],
    validate: CheckFn,
    call: CallFn,
    *,
    max_attempts: int,
    escalate: bool,
    on_invalid: InvalidFn = _ignore_invalid,
) -> _Attempts:
    """Send until the answer validates: ``max_attempts`` on the requested model, then the
    superior model. Invalid answers are returned for the record, never stored."""
    config = cache.config
    plan: list[dict[str, Any]] = [kwargs] * max_attempts
    superior = config.superior_model
    if escalate and superior and superior != kwargs.get("model"):
        plan += [{**kwargs, "model": superior}] * config.escalation_attempts
    usage = Usage()
    cost = 0.0
    last_reason = ""
    last_content: str | None = None
    for n, request in enumerate(plan, start=1):
        completion = call(request)
        u = _usage(completion, request.get("messages", []))
        usage = usage + u
        model = str(request.get("model", ""))
        cost += cache.prices.cost(model, u)
        content = _content(completion)
        reason = check(validate, content)
        if reason is None:
            assert content is not None
            return _Attempts(
                completion=completion,
                content=content,
                attempts=n,
                escalated=n > max_attempts,
                usage=usage,
                final_usage=u,
                cost=cost,
            )
        on_invalid(n, model, content, u, reason)
        last_reason, last_content = reason, content
        logger.info("invalid answer (attempt %d/%d): %s", n, len(plan), reason[:200])
    raise InvalidResponseError(
        f"no valid answer after {len(plan)} attempts (last reason: {last_reason[:300]})",
        attempts=len(plan),
        last_content=last_content,
        last_error=last_reason,
        usage=usage,
        cost_usd=cost,
    )


def _rebuild(entry: CacheEntry, content: str, usage: Usage) -> ChatCompletion:
    """A real ChatCompletion from the stored JSON, carrying the (modified) answer."""
    data = copy.deepcopy(entry.completion)
    data["id"] = f"chatcmpl-llmcache-{uuid.uuid4().hex[:24]}"
    data["created"] = int(time.time())
    choices = data.get("choices") or [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant"}}
    ]
    data["choices"] = choices[:1]
    data["choices"][0]["message"]["content"] = content
    data["usage"] = {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }
    return ChatCompletion.model_validate(data)


class _Call:
    """The state of one cached call (kept in one object so the steps stay short)."""

    def __init__(
        self,
        cache: SemanticCache,
        kwargs: dict[str, Any],
        options: CacheOptions,
        call: CallFn,
        recorder: Recorder | None,
    ) -> None:
        self.cache = cache
        self.kwargs = kwargs
        self.options = options
        self.call = call
        self.recorder = recorder
        self.started = time.perf_counter()
        self.policy: ResolvedPolicy = cache.config.resolve(options)
        self.validate = as_validator(self.policy.validator)
        self.partition: Partition = partition_for(options, kwargs)
        self.messages: list[dict[str, Any]] = [dict(m) for m in kwargs.get("messages", [])]
        self.model = str(kwargs.get("model", ""))
        self.info = CallInfo(
            outcome="bypass",
            category=options.category,
            agent=options.agent,
            partition_key=self.partition.key,
        )
        self.embed_tokens = 0
        self.embed_usd = 0.0
        self.revise_usage: Usage | None = None
        self.revise_usd = 0.0
        self.tokens_avoided = 0

    # -- steps -------------------------------------------------------------------------------

    def run(self) -> tuple[ChatCompletion, CallInfo]:
        mode = self.policy.mode
        if mode is Mode.OFF or self.policy.bypass:
            return self._finish(self._miss("bypass", store=False))
        text = embedding_text(self.policy.embed, self.options, self.messages)
        self.info.embed_text = text
        vector = self.cache.embed(text)
        self._count_embedding(text)
        if mode is Mode.COLLECT:
            return self._finish(self._miss("collect", store=True, vector=vector, text=text))
        candidates, corrupt = self.cache.lookup(self.partition, vector)
        self.info.corrupt_dropped = corrupt
        if candidates:
            best = candidates[0]
            self.info.similarity = best.similarity
            self.info.threshold = self.policy.threshold if mode is Mode.ONLINE else None
            if mode is Mode.SERVE or best.similarity.cosine >= self.policy.threshold:
                served = self._serve(best)
                if served is not None:
                    return self._finish(served)
        return self._finish(self._miss("miss", store=True, vector=vector, text=text))

    def _count_embedding(self, text: str) -> None:
        tokens, _ = count_tokens(text)
        self.embed_tokens = tokens
        model_id = self.cache.embedder.model_id
        # Only a paid embedder costs money; the local model is free to run.
        if model_id.startswith("openai:"):
            name = model_id.split(":", 1)[1].split("@", 1)[0]
            self.embed_usd = self.cache.prices.cost(name, Usage(prompt_tokens=tokens))

    def _serve(self, candidate: Candidate) -> ChatCompletion | None:
        modifier = self.policy.modifier if self.policy.modifier is not None else Read()
        spent = Usage()
        cost = 0.0

        def complete(messages: list[dict[str, Any]]) -> str:
            nonlocal spent, cost
            request = {**self.kwargs, "messages": messages}
            result = _send_validated(
                self.cache,
                request,
                self.validate,
                self.call,
                max_attempts=_REVISE_ATTEMPTS,
                escalate=False,
                on_invalid=self._record_invalid,
            )
            spent = spent + result.usage
            cost += result.cost
            return result.content

        ctx = ModifyContext(
            query_messages=self.messages,
            options=self.options,
            candidate=candidate,
            embedder=self.cache.embedder,
            complete=complete,
        )
        name = modifier_name(modifier)
        try:
            content = modifier.apply(ctx)
        except InvalidResponseError as exc:
            logger.info("revision failed validation; treating as a miss: %s", exc)
            content = None
            if isinstance(exc.usage, Usage):
                spent = spent + exc.usage
                cost += exc.cost_usd
        reason = check(self.validate, content)
        # Whatever the modifier spent is spent, hit or not.
        self.info.usage = self.info.usage + spent
        self.info.cost_usd += cost
        if spent.total_tokens:
            self.revise_usage = spent
            self.revise_usd = cost
        if reason is not None:
            logger.info(
                "cached answer unusable for %s (%s): %s", self.options.category, name, reason
            )
            return None
        assert content is not None
        entry = candidate.entry
        self.info.outcome = "hit"
        self.info.modifier = name
        self.info.entry_id = entry.id
        # What the hit saved: the query's prompt plus an answer as long as the cached one.
        prompt_tokens, _ = count_message_tokens(self.messages)
        avoided = Usage(
            prompt_tokens=prompt_tokens, completion_tokens=entry.usage.completion_tokens
        )
        self.tokens_avoided = avoided.total_tokens
        self.info.avoided_usd = self.cache.prices.cost(self.model, avoided)
        self.info.attempts = 0
        return _rebuild(entry, content, spent)

    def _miss(
        self,
        outcome: str,
        *,
        store: bool,
        vector: Any = None,
        text: str | None = None,
    ) -> ChatCompletion:
        self.info.outcome = outcome  # type: ignore[assignment]
        try:
            result = _send_validated(
                self.cache,
                self.kwargs,
                self.validate,
                self.call,
                max_attempts=self.cache.config.max_attempts,
                escalate=True,
                on_invalid=self._record_invalid,
            )
        except InvalidResponseError as exc:
            self.info.attempts = exc.attempts
            if isinstance(exc.usage, Usage):
                self.info.usage = self.info.usage + exc.usage
                self.info.cost_usd += exc.cost_usd
            self._account()
            raise
        self.info.attempts = result.attempts
        self.info.escalated = result.escalated
        self.info.usage = self.info.usage + result.usage
        self.info.cost_usd += result.cost
        if store and vector is not None and text is not None:
            entry = CacheEntry(
                partition=self.partition,
                embed_text=text,
                embed_mode=self.policy.embed,
                embedder_id=self.cache.embedder.model_id,
                vector_b64=CacheEntry.encode_vector(vector),
                keywords=self.options.keywords,
                options=self.options.options,
                messages=self.messages,
                content=result.content,
                completion=result.completion.model_dump(mode="json", exclude_unset=False),
                usage=result.final_usage,
                metadata=self.options.metadata,
            )
            try:
                self.info.entry_id = self.cache.put(entry)
            except Exception:
                # A failure to store never breaks the caller's call: the answer is valid.
                logger.warning("could not store a cache entry", exc_info=True)
                self.info.store_failed = True
        return result.completion

    # -- bookkeeping -------------------------------------------------------------------------

    def _account(self) -> None:
        self.info.latency_s = time.perf_counter() - self.started
        self.info.cost_usd += self.embed_usd
        self.cache.ledger.record(
            self.partition,
            self.info,
            revise_usage=self.revise_usage,
            revise_usd=self.revise_usd,
            embed_tokens=self.embed_tokens,
            embed_usd=self.embed_usd,
            tokens_avoided=self.tokens_avoided,
        )

    def _finish(self, completion: ChatCompletion) -> tuple[ChatCompletion, CallInfo]:
        self._account()
        if self.recorder is not None:
            u = self.info.usage
            self.recorder.record(
                RecordedCall(
                    category=self.options.category,
                    agent=self.options.agent,
                    keywords=list(self.options.keywords) if self.options.keywords else None,
                    options=list(self.options.options) if self.options.options else None,
                    embed_text=self.info.embed_text,
                    messages=self.messages,
                    model=self.model,
                    params=_jsonable_params(self.kwargs),
                    response=_content(completion),
                    prompt_tokens=u.prompt_tokens,
                    completion_tokens=u.completion_tokens,
                    usage_source=u.source,
                    attempts=self.info.attempts,
                    escalated=self.info.escalated,
                    resubmission=False,
                    outcome=self.info.outcome,
                    similarity=self.info.similarity.cosine if self.info.similarity else None,
                    similarity_normalized=(
                        self.info.similarity.normalized if self.info.similarity else None
                    ),
                    modifier=self.info.modifier,
                    entry_id=self.info.entry_id,
                    cost_usd=self.info.cost_usd,
                    avoided_usd=self.info.avoided_usd,
                    latency_s=self.info.latency_s,
                    metadata=self.options.metadata,
                )
            )
        return completion, self.info

    def _record_invalid(
        self, attempt: int, model: str, content: str | None, usage: Usage, reason: str
    ) -> None:
        if self.recorder is not None:
            self.recorder.record(
                RecordedCall(
                    kind="invalid_attempt",
                    category=self.options.category,
                    agent=self.options.agent,
                    keywords=list(self.options.keywords) if self.options.keywords else None,
                    options=list(self.options.options) if self.options.options else None,
                    messages=self.messages,
                    model=model,
                    params=_jsonable_params(self.kwargs),
                    response=content,
                    prompt_tokens=usage.prompt_tokens,
                    completion_tokens=usage.completion_tokens,
                    usage_source=usage.source,
                    attempt=attempt,
                    resubmission=True,
                    valid=False,
                    error=reason,
                    outcome=self.info.outcome,
                    metadata=self.options.metadata,
                )
            )


def _jsonable_params(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    import json

    params = output_params(kwargs)
    try:
        json.dumps(params)
        return params
    except TypeError:
        return {
            k: v if isinstance(v, (str, int, float, bool)) else repr(v) for k, v in params.items()
        }


def run_cached_call(
    cache: SemanticCache,
    kwargs: dict[str, Any],
    options: CacheOptions,
    call: CallFn,
    recorder: Recorder | None = None,
) -> tuple[ChatCompletion, CallInfo]:
    """Answer one ``chat.completions.create`` request through the cache."""
    return _Call(cache, kwargs, options, call, recorder).run()
