"""One cached call, start to finish. Synchronous; the async client runs it in a worker thread.

    options → policy → partition → embedding text → vector → lookup → decision
      hit:  modifier → validate → ChatCompletion rebuilt from the stored JSON
      miss: LLM call → validate (retry, escalate) → store → ChatCompletion as the server sent it
    → ledger (+ recorder)

The LLM is reached only through ``call(kwargs) -> response``, so the same code serves the
sync client, the async client (which hops back to its event loop) and tests. What a request and a
response look like is a :class:`Shape`'s business: the default one is ``chat.completions.create``;
``chat.completions.parse`` and ``responses.create`` bring their own (``_shapes.py``), so every
endpoint shares one core, its tables, modes, modifiers, ledger and recorder.

Once the LLM has answered, nothing the cache does can lose that answer: a failure to store it or
to record it is logged and counted (``store_failed`` / ``record_failed``), never raised. An
answer made of tool calls is valid as it is (the tool calls are the answer; validators read
text) and is cached like any other, served again by the ``read`` modifier only.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from openai.types.chat import ChatCompletion
from pydantic import BaseModel, ValidationError

from ._budget import NO_HIT_THRESHOLD, STRICT_THRESHOLD, same_answer
from ._cache import SemanticCache
from ._config import ResolvedPolicy
from ._errors import ConfigurationError, InvalidResponseError, StoreError
from ._keys import embedding_text, output_params, partition_for
from ._ledger import info_stats_key
from ._modifiers import Read, modifier_name
from ._protocols import ModifyContext
from ._recorder import RecordedCall, Recorder
from ._tokens import count_message_tokens, count_tokens
from ._types import (
    Adapted,
    CacheEntry,
    CacheOptions,
    CallInfo,
    Candidate,
    Mode,
    Partition,
    Usage,
    Verdict,
)
from ._validation import CheckFn, as_validator, check
from ._verify import VerifyJob, ask_verifier, verdict_cost

__all__ = [
    "CHAT",
    "CallFn",
    "InvalidFn",
    "Shape",
    "StreamedCall",
    "adapt_candidate",
    "run_cached_call",
    "start_streamed_call",
]

logger = logging.getLogger("llmcache")

CallFn = Callable[[dict[str, Any]], Any]

# How many times a revision prompt may be resubmitted before the hit is given up as a miss.
_REVISE_ATTEMPTS = 3


def _first_message(completion: Any) -> Any:
    """The first choice's message, or ``None``.

    The openai SDK builds responses without validating them, so a malformed server answer
    arrives as a ChatCompletion with any shape inside (no choices, a ``None`` message, a number
    for content): read it defensively, never with an AttributeError.
    """
    choices = getattr(completion, "choices", None)
    if not isinstance(choices, list) or not choices:
        return None
    return getattr(choices[0], "message", None)


def _content(completion: Any) -> str | None:
    content = getattr(_first_message(completion), "content", None)
    return content if isinstance(content, str) else None


def _has_tool_calls(completion: Any) -> bool:
    message = _first_message(completion)
    calls = getattr(message, "tool_calls", None) or getattr(message, "function_call", None)
    return bool(calls)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _usage(completion: Any, messages: Any) -> Usage:
    u = getattr(completion, "usage", None)
    prompt = _count(getattr(u, "prompt_tokens", None))
    completed = _count(getattr(u, "completion_tokens", None))
    if prompt is not None and completed is not None and (prompt or completed):
        return Usage(prompt_tokens=prompt, completion_tokens=completed)
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

    completion: Any  # the endpoint's response (a ChatCompletion for chat.completions)
    content: str  # "" for an answer made only of tool calls
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
    shape: Shape | None = None,
) -> _Attempts:
    """Send until the answer validates: ``max_attempts`` on the requested model, then the
    superior model. Invalid answers are returned for the record, never stored."""
    config = cache.config
    plan: list[dict[str, Any]] = [kwargs] * max_attempts
    superior = config.superior_model
    if escalate and superior and superior != kwargs.get("model"):
        plan += [{**kwargs, "model": superior}] * config.escalation_attempts
    shape = shape or CHAT
    usage = Usage()
    cost = 0.0
    last_reason = ""
    last_content: str | None = None
    for n, request in enumerate(plan, start=1):
        completion = call(request)
        u = shape.usage(completion, shape.messages(request))
        usage = usage + u
        model = str(request.get("model", ""))
        cost += cache.prices.cost(model, u)
        content = shape.content(completion)
        # Tool calls are the answer: the validator reads text, which such an answer need not
        # have, and resubmitting a valid answer would only pay for it again.
        reason = None if shape.has_tool_calls(completion) else check(validate, content)
        if reason is None:
            return _Attempts(
                completion=completion,
                content=content or "",
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


def _rebuild(entry: CacheEntry, content: str | None, usage: Usage) -> ChatCompletion:
    """A real ChatCompletion from the stored JSON, carrying the (modified) answer.

    ``content=None`` keeps the stored message as it is (an answer made of tool calls). Only the
    parts changed here are copied (the top level, the first choice, its message): validation
    builds new objects from the rest, and every lookup decodes its entry afresh.
    """
    data = dict(entry.completion)
    data["id"] = f"chatcmpl-llmcache-{uuid.uuid4().hex[:24]}"
    data["created"] = int(time.time())
    choices = data.get("choices") or [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant"}}
    ]
    first = dict(choices[0])
    if content is not None:
        first["message"] = {**first["message"], "content": content}
    data["choices"] = [first]
    data["usage"] = {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }
    return ChatCompletion.model_validate(data)


def _is_tool_call_entry(entry: CacheEntry) -> bool:
    try:
        message = entry.completion["choices"][0]["message"]
        return bool(message.get("tool_calls") or message.get("function_call"))
    except (KeyError, IndexError, TypeError, AttributeError):
        return False


def _answer_problem(entry: CacheEntry) -> str | None:
    """Why a stored entry cannot be served as a ChatCompletion, or ``None`` when it can.

    An entry can decode and pass its checksum yet no longer validate (written by a version with
    another openai SDK, or edited): then it is dropped and counted like any damaged entry, rather
    than failing every call that finds it.
    """
    try:
        _rebuild(entry, None if _is_tool_call_entry(entry) else entry.content, Usage())
    except (ValidationError, KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return f"its stored completion is no longer a valid ChatCompletion ({reason})"
    return None


def _as_message(message: Any, index: int) -> dict[str, Any]:
    if isinstance(message, Mapping):
        return dict(message)
    if isinstance(message, BaseModel):  # e.g. a ChatCompletionMessage sent back in a thread
        dumped: dict[str, Any] = message.model_dump(mode="json", exclude_none=True)
        return dumped
    raise ConfigurationError(
        f"messages[{index}] is a {type(message).__name__}, not a message mapping "
        "({'role': ..., 'content': ...})"
    )


def _messages(kwargs: Mapping[str, Any]) -> list[dict[str, Any]]:
    messages = kwargs.get("messages", [])
    if messages is None or isinstance(messages, (str, bytes, Mapping)):
        raise ConfigurationError("messages must be a list of message mappings")
    try:
        return [_as_message(m, i) for i, m in enumerate(messages)]
    except TypeError as exc:  # not iterable
        raise ConfigurationError("messages must be a list of message mappings") from exc


class Shape:
    """What the core needs to know about one endpoint: how its request names the prompt and the
    table, and how its response carries the answer, its usage, and is stored and rebuilt.

    This base class is ``chat.completions.create``; ``_shapes.py`` holds the others. Every method
    reads defensively: the openai SDK builds responses without validating them.
    """

    name = "chat.completions"

    def key_params(self, kwargs: Mapping[str, Any]) -> Mapping[str, Any]:
        """The request as the table key (and the recorder's ``params``) sees it."""
        return kwargs

    def messages(self, kwargs: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The prompt as chat messages: embedded in full mode, counted, recorded."""
        return _messages(kwargs)

    def validator(self, validate: CheckFn) -> CheckFn:
        """The check every answer (a miss's or a served one) must pass."""
        return validate

    def content(self, response: Any) -> str | None:
        return _content(response)

    def has_tool_calls(self, response: Any) -> bool:
        return _has_tool_calls(response)

    def usage(self, response: Any, messages: Any) -> Usage:
        return _usage(response, messages)

    def dump(self, response: Any) -> dict[str, Any]:
        """The response as stored JSON: what the server sent, without the SDK's parsed objects
        (those are rebuilt from the text on a hit, with the caller's own classes)."""
        # warnings=False: a malformed server answer warns on every odd field; it is refused
        # by answer_problem instead.
        data: dict[str, Any] = response.model_dump(mode="json", warnings=False)
        for choice in data.get("choices") or []:
            message = choice.get("message") if isinstance(choice, dict) else None
            if isinstance(message, dict):
                message.pop("parsed", None)
                for call in message.get("tool_calls") or []:
                    if isinstance(call, dict) and isinstance(call.get("function"), dict):
                        call["function"].pop("parsed_arguments", None)
        return data

    def rebuild(self, entry: CacheEntry, content: str | None, usage: Usage) -> Any:
        return _rebuild(entry, content, usage)

    def is_tool_call_entry(self, entry: CacheEntry) -> bool:
        return _is_tool_call_entry(entry)

    def answer_problem(self, entry: CacheEntry) -> str | None:
        return _answer_problem(entry)

    def revision_request(
        self, request: Mapping[str, Any], messages: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """The request that sends a modifier's prompt instead of the query's."""
        return {**request, "messages": messages}


CHAT = Shape()


def adapt_candidate(
    cache: SemanticCache,
    candidate: Candidate,
    options: CacheOptions,
    *,
    messages: list[dict[str, Any]],
    request: Mapping[str, Any],
    call: CallFn | None,
    on_invalid: InvalidFn | None = None,
    shape: Shape = CHAT,
    policy: ResolvedPolicy | None = None,
) -> Adapted:
    """The hit step, for :meth:`SemanticCache.adapt` (see there): modifier, then validation.

    Kept here, beside the miss path, because a revision is sent like a miss is (validated,
    resubmitted while invalid) and must be accounted like one. ``policy``: the one the call
    already resolved from ``options`` (resolved here when not given).
    """
    if policy is None:
        policy = cache.config.resolve(options)
    modifier = policy.modifier if policy.modifier is not None else Read()
    name = modifier_name(modifier)
    if shape.is_tool_call_entry(candidate.entry):
        # Only ``read`` serves a stored tool-call answer: the other modifiers rewrite text,
        # and a tool call has none to rewrite. It is served as it was stored.
        if name != "read":
            return Adapted(
                modifier=name,
                content=None,
                valid=False,
                error=f"a cached tool-call answer is not served through the {name!r} modifier",
            )
        return Adapted(modifier=name, content=None, valid=True)
    validate = shape.validator(as_validator(policy.validator))
    # A revision goes out with the query's model and parameters, its constraints included.
    sent = {**request, **options.constraints}
    spent = Usage()
    cost = 0.0

    def complete(prompt: list[dict[str, Any]]) -> str:
        nonlocal spent, cost
        if call is None:
            raise ConfigurationError(
                f"the {name!r} modifier asks the LLM: pass call= to SemanticCache.adapt"
            )
        result = _send_validated(
            cache,
            shape.revision_request(sent, prompt),
            validate,
            call,
            max_attempts=_REVISE_ATTEMPTS,
            escalate=False,
            on_invalid=on_invalid or _ignore_invalid,
            shape=shape,
        )
        spent = spent + result.usage
        cost += result.cost
        return result.content

    ctx = ModifyContext(
        query_messages=messages,
        options=options,
        candidate=candidate,
        embedder=cache.embedder,
        complete=complete,
    )
    try:
        content = modifier.apply(ctx)
    except InvalidResponseError as exc:
        logger.info("revision failed validation; treating as a miss: %s", exc)
        content = None
        if isinstance(exc.usage, Usage):
            spent = spent + exc.usage
            cost += exc.cost_usd
    reason = check(validate, content)
    return Adapted(
        modifier=name,
        content=content,
        valid=reason is None,
        error=reason,
        usage=spent,
        cost_usd=cost,
    )


class _Call:
    """The state of one cached call (kept in one object so the steps stay short)."""

    def __init__(
        self,
        cache: SemanticCache,
        kwargs: dict[str, Any],
        options: CacheOptions,
        call: CallFn,
        recorder: Recorder | None,
        shape: Shape = CHAT,
    ) -> None:
        self.cache = cache
        self.kwargs = kwargs
        self.options = options
        self.call = call
        self.recorder = recorder
        self.shape = shape
        self.started = time.perf_counter()
        self.policy: ResolvedPolicy = cache.config.resolve(options)
        self.validate = shape.validator(as_validator(self.policy.validator))
        # The table is keyed by the caller's keyword arguments alone; what goes out is those
        # plus this query's own constraints (see CacheOptions.constraints).
        self.partition: Partition = partition_for(options, shape.key_params(kwargs))
        clash = sorted(set(options.constraints) & set(kwargs))
        if clash:
            raise ConfigurationError(
                f"{', '.join(clash)} given both as a keyword argument and in "
                "CacheOptions.constraints: pass each request parameter once (a constraint is "
                "sent with the request but kept out of the table key; a keyword argument is both)"
            )
        self.request: dict[str, Any] = {**kwargs, **options.constraints}
        self.messages: list[dict[str, Any]] = shape.messages(kwargs)
        self.model = str(kwargs.get("model", ""))
        # The one record of the call: what the caller gets back, what the ledger counts and
        # what the recorder's line is made from.
        self.info = CallInfo(
            outcome="bypass",
            category=options.category,
            agent=options.agent,
            model=self.partition.model,
            partition_key=self.partition.key,
        )
        self.stats_key = info_stats_key(self.info)
        # Under a wrong-hit budget: the would-be hit being explored (its candidate and what
        # it became), or the nearest entry of a miss; either is labelled against the answer
        # the LLM gives (see _budget.py).
        self._explore: tuple[Candidate, Adapted] | None = None
        self._near: Candidate | None = None
        # With a verifier: the entries this call already asked about (a second lookup after
        # another thread's miss must not ask again), and the near miss to verify off the
        # request path once the miss is answered.
        self._asked_about: set[int] = set()
        self._verify_later: Candidate | None = None

    # -- steps -------------------------------------------------------------------------------

    def run(self) -> tuple[Any, CallInfo]:
        mode = self.policy.mode
        if mode is Mode.OFF or self.policy.bypass:
            return self._finish(self._miss("bypass", store=False))
        text = embedding_text(self.policy.embed, self.options, self.messages)
        self.info.embed_text = text
        vector = self.cache.embed(text)
        self._count_embedding(text)
        if mode is Mode.COLLECT:
            return self._finish(self._miss("collect", store=True, vector=vector, text=text))
        served = self._look_up(vector, mode)
        if served is not None:
            return self._finish(served)
        # Threads of this process asking the same question meanwhile wait for this miss and are
        # answered from the entry it stores, instead of each paying for the same answer.
        with self.cache.single_flight((self.partition.key, text)) as leader:
            if not leader:
                served = self._look_up(vector, mode)
                if served is not None:
                    return self._finish(served)
            return self._finish(self._miss("miss", store=True, vector=vector, text=text))

    def open_stream(self) -> Any:
        """The first half of a streamed call (``stream=True``): the served answer on a hit
        (finished and accounted), else ``None``, after which the caller streams
        ``self.request`` and hands the response it assembled to :meth:`close_stream`.

        A streamed miss makes one attempt, without retry, escalation or single-flight: its
        chunks reach the caller as they arrive, so an answer cannot be taken back once it has
        begun, and no lock may be held for as long as a caller takes to read a stream.
        """
        mode = self.policy.mode
        if mode is Mode.OFF or self.policy.bypass:
            self._pending: tuple[str, Any, str | None] = ("bypass", None, None)
            return None
        text = embedding_text(self.policy.embed, self.options, self.messages)
        self.info.embed_text = text
        vector = self.cache.embed(text)
        self._count_embedding(text)
        if mode is not Mode.COLLECT:
            served = self._look_up(vector, mode)
            if served is not None:
                return self._finish(served)[0]
        self._pending = ("collect" if mode is Mode.COLLECT else "miss", vector, text)
        return None

    def close_stream(self, response: Any, *, complete: bool) -> CallInfo:
        """The second half of a streamed miss: store the assembled ``response`` when the stream
        completed and the answer validates, then account and record the call."""
        outcome, vector, text = self._pending
        self.info.outcome = outcome  # type: ignore[assignment]
        self.info.attempts = 1
        # An abandoned stream was still paid for: its prompt, and what arrived of the answer.
        u = self.shape.usage(response, self.messages)
        cost = self.cache.prices.cost(self.model, u)
        self.info.usage = self.info.usage + u
        self.info.cost_usd += cost
        content = self.shape.content(response)
        if not complete:
            reason: str | None = "the stream did not complete"
        elif self.shape.has_tool_calls(response):
            reason = None
        else:
            reason = check(self.validate, content)
            if reason is not None:
                self._record_invalid(1, self.model, content, u, reason)
        self._explored_cost(u, cost)
        if reason is not None:
            logger.info("streamed answer not stored: %s", reason[:200])
        elif not self.shape.has_tool_calls(response):
            self._label_from_answer(content)
        if reason is None and vector is not None and text is not None:
            attempt = _Attempts(
                completion=response,
                content=content or "",
                attempts=1,
                escalated=False,
                usage=u,
                final_usage=u,
                cost=cost,
            )
            self._store(attempt, vector, text)
        return self._finish(response)[1]

    def _look_up(self, vector: Any, mode: Mode) -> Any:
        """The hit for this call, if the table has one that is close enough and usable."""
        try:
            candidates, corrupt = self.cache.lookup(
                self.partition, vector, check=self.shape.answer_problem
            )
        except StoreError:
            # The cache cannot be read (a failing disk, a lost database): answer without it.
            logger.warning("cache lookup failed; calling the LLM instead", exc_info=True)
            self.info.store_failed = True
            return None
        self.info.corrupt_dropped += corrupt
        if not candidates:
            return None
        best = candidates[0]
        self.info.similarity = best.similarity
        if mode is Mode.SERVE:
            self.info.threshold = None
            return self._serve(best)
        budget = self.policy.wrong_hit_budget
        self.info.wrong_hit_budget = budget
        threshold = self._threshold(budget)
        self.info.threshold = threshold
        if best.similarity.cosine >= threshold:
            explore = budget is not None and self._budget_call(
                lambda: self.cache.budget.explore(self.stats_key, budget), default=False
            )
            return self._serve(best, explore=explore)
        self._near = best
        if self._is_near_miss(best, threshold):
            self._asked_about.add(best.entry.id)
            if self.policy.verify_path == "request":
                return self._verify_now(best)
            self._verify_later = best
        return None

    # -- verification of near misses (see _verify.py) ----------------------------------------

    def _is_near_miss(self, candidate: Candidate, threshold: float) -> bool:
        """Whether a verifier is to judge ``candidate``: one is in force, the candidate lies in
        the band under the threshold, and this call has not asked about it yet."""
        return (
            self.policy.verifier is not None
            and candidate.similarity.cosine >= threshold - self.policy.verify_band
            and candidate.entry.id not in self._asked_about
        )

    def _verify_now(self, candidate: Candidate) -> Any:
        """On the request path: ask the verifier whether the near miss answers the query; a
        no (or a verifier that fails) makes a miss. A yes serves it, if it passes the query's
        validator -- under a budget only where the table's ``verified`` labels prove a yes
        at this cosine within the budget, and explored like any would-be hit until then (a
        verdict is a guess, not a label: the verifier's own errors must count against δ)."""
        verdict = self._ask(candidate)
        if verdict is None:
            return None
        self.info.verified = verdict.same
        budget = self.policy.wrong_hit_budget
        if not verdict.same:
            # A miss: under a budget its answer labels the near miss (_label_from_answer).
            return None
        if budget is None:
            return self._serve(candidate)
        key = self.stats_key
        threshold: float = self._budget_call(
            lambda: self.cache.budget.threshold(key, budget, "verified"),
            default=NO_HIT_THRESHOLD,
        )
        if candidate.similarity.cosine < threshold:
            return None  # a miss, whose answer labels both streams
        explore = self._budget_call(
            lambda: self.cache.budget.explore(key, budget, "verified"), default=True
        )
        return self._serve(candidate, explore=explore)

    def _ask(self, candidate: Candidate) -> Verdict | None:
        try:
            verdict = ask_verifier(
                self.policy.verifier,
                self.info.embed_text or "",
                candidate.entry.embed_text,
                candidate.similarity.cosine,
            )
        except Exception:
            # Whatever the verifier raises (its LLM's errors included) never reaches the
            # caller: the near miss is answered as the miss it is, and the failure counted.
            logger.warning("the verifier failed; answering the near miss as a miss", exc_info=True)
            self.info.verify_failed = True
            return None
        usd = verdict_cost(self.cache.prices, verdict)
        self.info.usage = self.info.usage + verdict.usage
        self.info.cost_usd += usd
        self.info.verify_tokens += verdict.usage.total_tokens
        self.info.verify_usd += usd
        return verdict

    def _queue_verification(self) -> None:
        """Off the request path: hand the near miss of an answered (and stored) miss to the
        cache's worker, whose verdict becomes the table's label."""
        candidate = self._verify_later
        if candidate is None or self.info.outcome != "miss":
            return
        self.info.verify_queued = True
        job = VerifyJob(
            key=self.stats_key,
            verifier=self.policy.verifier,
            query=self.info.embed_text or "",
            cached=candidate.entry.embed_text,
            cosine=candidate.similarity.cosine,
            label=self.info.label,
        )
        self.cache.verifications.submit(job)

    def _threshold(self, budget: float | None) -> float:
        """The threshold in force: the static one, or the one learned under a budget."""
        if budget is None:
            return self.policy.threshold
        key = self.stats_key
        # A budget that cannot read its labels stays strict.
        threshold: float = self._budget_call(
            lambda: self.cache.budget.threshold(key, budget), default=STRICT_THRESHOLD
        )
        return threshold

    def _budget_call(self, step: Callable[[], Any], *, default: Any) -> Any:
        """A step of the wrong-hit budget; if the store fails it, the call goes on with
        ``default`` (keeping a budget must never break a call)."""
        try:
            return step()
        except Exception:
            logger.warning("wrong-hit budget unavailable for this call", exc_info=True)
            return default

    def _label(self, candidate: Candidate, ok: bool) -> None:
        """Label the table by ``candidate`` (the call's nearest entry), and its verified stream
        too when the verifier said yes to it."""
        self.info.label = ok
        key, cosine = self.stats_key, candidate.similarity.cosine
        self._budget_call(lambda: self.cache.budget.add(key, cosine, ok), default=None)
        if self.info.verified:
            self._budget_call(
                lambda: self.cache.budget.add(key, cosine, ok, "verified"), default=None
            )

    def _label_from_answer(self, fresh: str | None) -> None:
        """Under a budget, label the explored hit or the miss's nearest entry by comparing its
        answer with the one the LLM just gave (``fresh``, valid)."""
        if self.policy.wrong_hit_budget is None or self.info.label is not None or fresh is None:
            return
        if self._explore is not None:
            candidate, adapted = self._explore
        elif self._near is not None:
            candidate = self._near
            if self.shape.is_tool_call_entry(candidate.entry):
                return
            try:
                # Only a modifier that needs no LLM labels a miss: a label must cost nothing.
                adapted = adapt_candidate(
                    self.cache,
                    candidate,
                    self.options,
                    messages=[dict(m) for m in self.messages],
                    request=self.kwargs,
                    call=None,
                    shape=self.shape,
                )
            except ConfigurationError:
                return
        else:
            return
        if not adapted.valid or adapted.content is None:
            if not self.shape.is_tool_call_entry(candidate.entry):
                self._label(candidate, False)
            return
        equivalent = self.policy.equivalence or same_answer
        try:
            ok = bool(equivalent(adapted.content, fresh))
        except Exception:
            logger.warning("the equivalence failed; no label for this call", exc_info=True)
            return
        self._label(candidate, ok)

    def _count_embedding(self, text: str) -> None:
        tokens, _ = count_tokens(text)
        self.info.embed_tokens = tokens
        model_id = self.cache.embedder.model_id
        # Only a paid embedder costs money; the local model is free to run.
        if model_id.startswith("openai:"):
            name = model_id.split(":", 1)[1].split("@", 1)[0]
            self.info.embed_usd = self.cache.prices.cost(name, Usage(prompt_tokens=tokens))

    def _serve(self, candidate: Candidate, *, explore: bool = False) -> Any:
        # The same step SemanticCache.adapt runs, with this call's endpoint (its Shape).
        adapted = adapt_candidate(
            self.cache,
            candidate,
            self.options,
            messages=[dict(m) for m in self.messages],
            request=self.kwargs,
            call=self.call,
            on_invalid=self._record_invalid,
            shape=self.shape,
            policy=self.policy,
        )
        # Whatever the modifier spent is spent, hit or not.
        self.info.usage = self.info.usage + adapted.usage
        self.info.cost_usd += adapted.cost_usd
        if adapted.usage.total_tokens:
            self.info.revise_tokens = adapted.usage.total_tokens
            self.info.revise_usd = adapted.cost_usd
        if not adapted.valid:
            logger.info(
                "cached answer unusable for %s (%s): %s",
                self.options.category,
                adapted.modifier,
                adapted.error,
            )
            if self.policy.wrong_hit_budget is not None and not self.shape.is_tool_call_entry(
                candidate.entry
            ):
                # A served answer that does not answer the query: a wrong label, for free.
                self._label(candidate, False)
            return None
        if explore:
            # Explored: the LLM is asked as on a miss, its answer served and compared with
            # this one (_label_from_answer).
            self._explore = (candidate, adapted)
            self.info.explored = True
            return None
        self._mark_hit(candidate.entry, adapted.modifier)
        return self.shape.rebuild(candidate.entry, adapted.content, adapted.usage)

    def _mark_hit(self, entry: CacheEntry, modifier: str) -> None:
        self.info.outcome = "hit"
        self.info.modifier = modifier
        self.info.entry_id = entry.id
        # Its last-hit time: what a bounded cache evicts by (least recently hit first).
        self.cache.mark_hit(entry.partition.key, entry.id)
        # What the hit saved: the query's prompt plus an answer as long as the cached one.
        prompt_tokens, _ = count_message_tokens(self.messages)
        avoided = Usage(
            prompt_tokens=prompt_tokens, completion_tokens=entry.usage.completion_tokens
        )
        self.info.tokens_avoided = avoided.total_tokens
        self.info.avoided_usd = self.cache.prices.cost(self.model, avoided)
        self.info.attempts = 0

    def _miss(
        self,
        outcome: str,
        *,
        store: bool,
        vector: Any = None,
        text: str | None = None,
    ) -> Any:
        self.info.outcome = outcome  # type: ignore[assignment]
        try:
            result = _send_validated(
                self.cache,
                self.request,
                self.validate,
                self.call,
                max_attempts=self.cache.config.max_attempts,
                escalate=True,
                on_invalid=self._record_invalid,
                shape=self.shape,
            )
        except InvalidResponseError as exc:
            self.info.attempts = exc.attempts
            if isinstance(exc.usage, Usage):
                self.info.usage = self.info.usage + exc.usage
                self.info.cost_usd += exc.cost_usd
                self._explored_cost(exc.usage, exc.cost_usd)
            if self._explore is not None:
                # Exploring a hit whose cached answer is valid: the LLM giving none is no reason
                # to fail the call. Serve the cached answer (the exploration was paid, but it
                # taught nothing: no label).
                candidate, adapted = self._explore
                self._mark_hit(candidate.entry, adapted.modifier)
                return self.shape.rebuild(candidate.entry, adapted.content, adapted.usage)
            self._settle()
            self._account()
            raise
        self.info.attempts = result.attempts
        self.info.escalated = result.escalated
        self.info.usage = self.info.usage + result.usage
        self.info.cost_usd += result.cost
        self._explored_cost(result.usage, result.cost)
        self._label_from_answer(
            None if self.shape.has_tool_calls(result.completion) else result.content
        )
        if store and vector is not None and text is not None:
            self._store(result, vector, text)
        return result.completion

    def _explored_cost(self, usage: Usage, cost: float) -> None:
        """What exploring cost: the paid answer, and the revision of the cached one if any."""
        if self.info.explored:
            self.info.explore_tokens = usage.total_tokens + self.info.revise_tokens
            self.info.explore_usd = cost + self.info.revise_usd

    def _store(self, result: _Attempts, vector: Any, text: str) -> None:
        # A failure to store never breaks the caller's call: the answer is valid and paid for.
        try:
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
                # A malformed server answer is refused just below.
                completion=self.shape.dump(result.completion),
                usage=result.final_usage,
                metadata=self.options.metadata,
            )
            problem = self.shape.answer_problem(entry)
            if problem is not None:
                # Only answers a hit can give back are stored (the text may be valid while
                # the server's envelope around it is not).
                raise ValueError(f"the answer is not storable: {problem}")
            self.info.entry_id = self.cache.put(entry)
        except Exception:
            logger.warning("could not store a cache entry", exc_info=True)
            self.info.store_failed = True

    # -- bookkeeping -------------------------------------------------------------------------

    def _settle(self) -> None:
        """Close the call's figures (latency, embedding cost) before it is recorded."""
        self.info.latency_s = time.perf_counter() - self.started
        self.info.cost_usd += self.info.embed_usd

    def _account(self) -> None:
        self.cache.ledger.record(self.info)

    def _record(self, build: Callable[[], RecordedCall]) -> None:
        """Append a record; a failure is counted (``record_failed``), never raised."""
        if self.recorder is None:
            return
        try:
            written = self.recorder.record(build())
        except Exception:  # a Recorder subclass, or a RecordedCall that will not build
            logger.warning("could not record a call", exc_info=True)
            written = False
        if not written:
            self.info.record_failed = True

    def _asked(self) -> dict[str, Any]:
        """What this call asked, as its dataset lines record it."""
        return {
            "options": self.options,
            "messages": self.messages,
            "params": _jsonable_params(self.shape.key_params(self.kwargs)),
            "constraints": _jsonable(self.options.constraints),
        }

    def _finish(self, completion: Any) -> tuple[Any, CallInfo]:
        self._queue_verification()
        self._settle()
        self._record(
            lambda: RecordedCall.from_info(
                self.info, **self._asked(), response=self.shape.content(completion)
            )
        )
        self._account()
        return completion, self.info

    def _record_invalid(
        self, attempt: int, model: str, content: str | None, usage: Usage, reason: str
    ) -> None:
        self._record(
            lambda: RecordedCall.invalid_attempt(
                **self._asked(),
                attempt=attempt,
                model=model,
                response=content,
                usage=usage,
                error=reason,
                outcome=self.info.outcome,
            )
        )


def _jsonable_params(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    return _jsonable(output_params(kwargs))


def _jsonable(params: Mapping[str, Any]) -> dict[str, Any]:
    import json

    try:
        json.dumps(params)
        return dict(params)
    except TypeError:
        return {
            k: v if isinstance(v, (str, int, float, bool)) else repr(v) for k, v in params.items()
        }


class StreamedCall:
    """A cached call whose answer streams (``stream=True``), in two halves around the stream.

    ``served`` is the hit's response (the call is then finished and accounted) or ``None``:
    then the caller streams ``request`` itself, passing every chunk on untouched, and calls
    :meth:`finish` once with the response assembled from them (``complete=False`` when the
    stream broke off or was closed early: such an answer is never stored).
    """

    def __init__(self, call: _Call) -> None:
        self._call = call
        self.request: dict[str, Any] = call.request
        self.served: Any = call.open_stream()
        self.info: CallInfo = call.info

    def finish(self, response: Any, *, complete: bool) -> CallInfo:
        return self._call.close_stream(response, complete=complete)


def start_streamed_call(
    cache: SemanticCache,
    kwargs: dict[str, Any],
    options: CacheOptions,
    call: CallFn,
    recorder: Recorder | None = None,
    shape: Shape = CHAT,
) -> StreamedCall:
    """Look a streamed request up; see :class:`StreamedCall`. ``call`` serves modifiers that
    ask the LLM (``revise``) and must return a whole response, not a stream."""
    return StreamedCall(_Call(cache, kwargs, options, call, recorder, shape))


def run_cached_call(
    cache: SemanticCache,
    kwargs: dict[str, Any],
    options: CacheOptions,
    call: CallFn,
    recorder: Recorder | None = None,
    shape: Shape = CHAT,
) -> tuple[Any, CallInfo]:
    """Answer one request through the cache: ``chat.completions.create`` unless ``shape``
    says which other endpoint (the response is then that endpoint's type)."""
    return _Call(cache, kwargs, options, call, recorder, shape).run()
