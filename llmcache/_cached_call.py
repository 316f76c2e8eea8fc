"""One cached call, start to finish. Synchronous; the async client runs it in a worker thread.

    options → policy → partition → embedding text → vector → lookup → decision
      hit:  modifier → validate → ChatCompletion rebuilt from the stored JSON
      miss: LLM call → validate (retry, escalate) → store → ChatCompletion as the server sent it
        (no valid answer: InvalidResponseError, or the fallback text, never stored)
    → ledger (+ recorder)

The steps live where their concept does: the table and the embedding text in ``_filing.py``,
the lookup and the store in ``_cache.py``, the hit in ``_hit.py``, the miss's attempts in
``_attempts.py``, the wrong-hit budget's thresholds and labels in ``_budget.py``; this module
runs them in order and keeps the call's one record (:class:`~llmcache.CallInfo`).

The LLM is reached only through ``call(kwargs) -> response``, so the same code serves the
sync client, the async client (which hops back to its event loop) and tests. What a request and a
response look like is a :class:`~llmcache._shapes.Shape`'s business: the default one is
``chat.completions.create``; ``chat.completions.parse`` and ``responses.create`` bring their own,
so every endpoint shares one core, its tables, modes, modifiers, ledger and recorder.

Once the LLM has answered, nothing the cache does can lose that answer: a failure to store it or
to record it is logged and counted (``store_failed`` / ``record_failed``), never raised. An
answer made of tool calls is valid as it is (the tool calls are the answer; validators read
text) and is cached like any other, served again by the ``read`` modifier only.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ._attempts import Attempts, CallFn, reseeded, send_validated
from ._cache import SemanticCache
from ._config import ResolvedPolicy
from ._errors import ConfigurationError, InvalidResponseError, StoreError
from ._filing import embedding_text, keywords_text, output_params, partition_for
from ._ledger import info_stats_key, pool_stats_key
from ._recorder import RecordedCall, Recorder
from ._serving import Serving
from ._shapes import CHAT, Shape
from ._slots import (
    LEADING_WORDS,
    echoed,
    exact_differs,
    exact_slot_names,
    lead_differs,
    named,
    slot_text,
    times_differ,
)
from ._tokens import count_message_tokens
from ._types import (
    Adapted,
    CacheEntry,
    CacheOptions,
    CallInfo,
    Candidate,
    EmbedMode,
    Mode,
    Partition,
    Usage,
)
from ._validation import as_validator, check

__all__ = ["StreamedCall", "run_cached_call", "start_streamed_call"]

logger = logging.getLogger("llmcache")


def _samples(kwargs: Mapping[str, Any]) -> bool:
    """Whether a request samples: any but ``temperature=0`` (an absent one means the API's
    default, which samples)."""
    temperature = kwargs.get("temperature")
    return not (isinstance(temperature, (int, float)) and temperature == 0)


class _CachedCall:
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
        self.prices = cache.prices
        self.hits = cache.hit_step
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
        if self.policy.pool_evidence:
            self.info.pool_key = pool_stats_key(self.partition)
        # Whether a candidate is served, explored or missed, and the evidence that leaves.
        self.serving = Serving(
            cache,
            self.policy,
            self.info,
            self.stats_key,
            shape,
            self.messages,
            samples=_samples(kwargs),
        )
        # A templated call (see _slots.py): its exact slots, the slots its vector embeds
        # (None: the call's keywords or messages are embedded), its vector, and the vectors of
        # entries re-scored under its choice, by their text.
        self.exact: frozenset[str] = frozenset()
        self.chosen: tuple[str, ...] | None = None
        self._vector: Any = None
        self._rescored: dict[str, float] = {}
        # The nearest entry refused because an exact slot differed: its cosine and that slot.
        self._refused: tuple[float, str] | None = None

    # -- steps -------------------------------------------------------------------------------

    def run(self) -> tuple[Any, CallInfo]:
        mode = self.policy.mode
        if mode is Mode.OFF or self.policy.bypass:
            return self._finish(self._miss("bypass", store=False))
        text, vector = self._embed()
        store = self.options.store
        if mode is Mode.COLLECT:
            return self._finish(self._miss("collect", store=store, vector=vector, text=text))
        writes = self.cache.writes(self.partition.key)
        served = self._look_up(vector, mode)
        if served is not None:
            return self._finish(served)
        if not store:
            # Nobody could be served from this miss's answer, so it does not lead a flight
            # (others would wait for nothing), nor wait for one.
            return self._finish(self._miss("miss", store=False, vector=vector, text=text))
        # Threads of this process asking the same question meanwhile wait for this miss and are
        # answered from the entry it stores, instead of each paying for the same answer.
        with self.cache.single_flight((self.partition.key, text)) as leader:
            # A follower looks again for the answer it waited for. So does a leader when this
            # process stored into the table after its lookup: another thread's miss on the
            # same question may have finished between that lookup and this call's turn (a
            # would-be hit being explored has decided already, and is not drawn again).
            stored_since = self.cache.writes(self.partition.key) != writes
            if not leader or (stored_since and self.serving.explored is None):
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
        begun, and no lock may be held for as long as a caller takes to read a stream. For the
        same reason a ``fallback`` does not apply to a stream: an invalid streamed answer has
        already reached the caller (paid, not lost), and is recorded as invalid, not stored.
        """
        mode = self.policy.mode
        if mode is Mode.OFF or self.policy.bypass:
            self._pending: tuple[str, Any, str | None] = ("bypass", None, None)
            return None
        text, vector = self._embed()
        if mode is not Mode.COLLECT:
            served = self._look_up(vector, mode)
            if served is not None:
                return self._finish(served)[0]
        self._pending = ("collect" if mode is Mode.COLLECT else "miss", vector, text)
        # Said at once: a caller reading the stream's cache_info while it runs (a server
        # sending the outcome in its headers) must not read a miss as a bypass.
        self.info.outcome = self._pending[0]  # type: ignore[assignment]
        return None

    def close_stream(self, response: Any, *, complete: bool) -> CallInfo:
        """The second half of a streamed miss: store the assembled ``response`` when the stream
        completed and the answer validates, then account and record the call."""
        outcome, vector, text = self._pending
        self.info.outcome = outcome  # type: ignore[assignment]
        self.info.attempts = 1
        # An abandoned stream was still paid for: its prompt, and what arrived of the answer.
        u = self.shape.usage(response, self.messages)
        cost = self.prices.cost(self.model, u)
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
            self._answered(content)
        if reason is None and vector is not None and text is not None and self.options.store:
            attempt = Attempts(
                completion=response,
                content=content or "",
                attempts=1,
                escalated=False,
                usage=u,
                final_usage=u,
                cost=cost,
            )
            self.info.entry_id = self._store(attempt, vector, text)
        return self._finish(response)[1]

    def file_paid(self, completion: Any) -> int | None:
        """Store ``completion``, an answer paid for outside the cache, as a miss's answer is
        stored (embedded, validated, the table's slot profile told), without a lookup and
        without counting a call: its id, or ``None`` when it is not stored. Never raises: the
        call it answered is over."""
        if self.policy.mode is Mode.OFF or self.policy.bypass or not self.options.store:
            return None
        try:
            content = self.shape.content(completion)
            if self.shape.has_tool_calls(completion) or check(self.validate, content) is not None:
                return None
            usage = self.shape.usage(completion, self.messages)
            text, vector = self._embed()
        except Exception:
            logger.warning("could not file an answer paid for while learning", exc_info=True)
            return None
        cost = self.prices.cost(self.model, usage)
        return self._store(
            Attempts(completion, content or "", 1, False, usage, usage, cost), vector, text
        )

    def _look_up(self, vector: Any, mode: Mode) -> Any:
        """The hit for this call, if the table has one that is close enough and usable."""
        try:
            candidates, corrupt = self.cache.lookup(
                self.partition,
                vector,
                k=self.serving.lookup_k,
                check=self.shape.answer_problem,
                band=self.serving.lookup_band,
                judge=self._judge if self.options.slots or self.policy.lead_words else None,
                # Without slots the judge only rules entries out (their leading words): the
                # index's order still says when no candidate left can score higher.
                rescores=bool(self.options.slots),
            )
        except StoreError:
            # The cache cannot be read (a failing disk, a lost database): answer without it.
            logger.warning("cache lookup failed; calling the LLM instead", exc_info=True)
            self.info.store_failed = True
            return None
        self.info.corrupt_dropped += corrupt
        ruling = self.serving.rule(candidates, mode)
        refused = self._refused
        if (
            ruling.candidate is None
            and refused is not None
            and self.serving.would_serve(refused[0], mode)
        ):
            # Close enough to be served but for an exact slot: the cost of that slot, counted
            # (by the ledger) when the lookup ends a miss.
            self.info.exact_refused = refused[1]
        if ruling.candidate is None:
            return None
        return self._serve(
            ruling.candidate,
            explore=ruling.action in ("explore", "audit"),
            audit=ruling.action == "audit",
        )

    def _answered(self, fresh: str | None) -> None:
        """Tell the serving decision what the LLM answered (it labels the table by it)."""

        def adapt_free(candidate: Candidate) -> Adapted:
            # Only a modifier that needs no LLM labels a miss: a label must cost nothing.
            return self.hits.adapt(
                candidate,
                self.options,
                messages=self.messages,
                request=self.kwargs,
                call=None,
                shape=self.shape,
                policy=self.policy,
            )

        self.serving.answered(fresh, adapt_free)

    def _embed(self) -> tuple[str, Any]:
        """The call's embedding text and vector, with what embedding it cost."""
        text = self._slot_text()
        if text is None:
            text = embedding_text(self.policy.embed, self.options, self.messages)
        self.info.embed_text = text
        vector = self.cache.embed(text)
        self._vector = vector
        self.info.embed_tokens, self.info.embed_usd = self.cache.embedding_cost(text)
        return text, vector

    def _slot_text(self) -> str | None:
        """A templated call's embedding text: its chosen slots' values, deciding first
        (``None``: the call gives its keywords, is in full mode, or gives no slots)."""
        slots = self.options.slots
        if not slots:
            return None
        self.exact = exact_slot_names(
            slots, self.options.exact_slots, detect=self.policy.detect_exact
        )
        if self.policy.embed is not EmbedMode.KEYWORD or self.options.keywords is not None:
            return None
        shared = not self.options.agent
        echo = echoed(slots) if shared else frozenset()
        self.exact |= echo
        chosen, partitions = self.cache.choose_slots(
            self.stats_key, slots, self.exact, shared=shared, anchors=echo
        )
        self.exact |= partitions
        picked = tuple(n for n in self.policy.keyword_slots or () if n in slots)
        if picked and slot_text(slots, picked):
            # The category's keyword slots, chosen on a recording (tune): the other slots were
            # shown not to change the answer, so they neither embed nor match (a clock or a
            # status line in every prompt), but for the slots the call itself names exact and,
            # in a table the agents share, the names: those it repeats and the short ones its
            # roles say tell the callers apart (a recording may not have shown who asked).
            chosen = picked
            self.exact = (
                (frozenset(self.options.exact_slots or ()) & frozenset(slots))
                | echo
                | named(slots, partitions)
            )
        text = slot_text(slots, chosen)
        if not text:
            # The chosen slots are blank in this call: embedded by all its slots instead.
            chosen = tuple(slots)
            text = slot_text(slots, chosen)
        if not text:
            raise ConfigurationError(
                f"category {self.options.category!r} is cached in keyword mode but every slot "
                "of the call is blank: give a slot a value, or use embed=EmbedMode.FULL"
            )
        self.chosen = chosen
        self.info.embedded_slots = chosen
        return keywords_text([text])

    def _judge(self, entry: CacheEntry, cosine: float) -> float | None:
        """The cosine a stored entry is scored by for this call, or ``None`` when it may not be
        served: an exact slot or the leading words differ (``lead_words``), or it was embedded
        under another choice of slots and cannot be re-scored under this one."""
        slots = self.options.slots or {}
        differs = exact_differs(slots, self.exact, entry.slots) if self.exact else ""
        if not differs and lead_differs(
            self.info.embed_text or "", entry.embed_text, self.policy.lead_words
        ):
            differs = LEADING_WORDS
        if not differs and self.chosen and self.policy.detect_exact and self.policy.exact_times:
            # The times and dates inside the embedded slots' values must match too.
            differs = times_differ(slots, self.chosen, entry.slots)
        if differs:
            if self._refused is None or cosine > self._refused[0]:
                self._refused = (cosine, differs)
            return None
        if entry.embedded_slots == self.chosen:
            return cosine
        # Embedded under another choice (the table's slots varied since, or the entry was
        # stored with explicit keywords): its stored score compares unlike texts. Re-scored
        # by its own slot values under this call's choice, never served on the stale score.
        if self.chosen is None or entry.slots is None:
            return None
        text = slot_text(entry.slots, self.chosen)
        if not text:
            return None
        text = keywords_text([text])
        if text not in self._rescored:
            other = np.asarray(self.cache.embed(text), dtype=np.float64)
            query = np.asarray(self._vector, dtype=np.float64).reshape(-1)
            norms = float(np.linalg.norm(other) * np.linalg.norm(query))
            score = float(np.dot(other, query)) / norms if norms else 0.0
            self._rescored[text] = min(1.0, max(-1.0, score))
        return self._rescored[text]

    def _serve(self, candidate: Candidate, *, explore: bool = False, audit: bool = False) -> Any:
        # The public hit step, with this call's endpoint (its Shape) and policy.
        adapted = self.hits.adapt(
            candidate,
            self.options,
            messages=self.messages,
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
            self.serving.unusable(candidate)
            return None
        if explore:
            # Explored: the LLM is asked as on a miss, its answer served and compared with
            # this one (Serving.answered).
            self.serving.exploring(candidate, adapted, audit=audit)
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
        self.info.avoided_usd = self.prices.cost(self.model, avoided)
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
            config = self.cache.config
            result = send_validated(
                self.call,
                self.request,
                self.validate,
                prices=self.prices,
                attempts=config.max_attempts,
                escalate_to=config.superior_model,
                escalation_attempts=config.escalation_attempts,
                on_invalid=self._record_invalid,
                shape=self.shape,
            )
        except InvalidResponseError as exc:
            self.info.attempts = exc.attempts
            if isinstance(exc.usage, Usage):
                self.info.usage = self.info.usage + exc.usage
                self.info.cost_usd += exc.cost_usd
                self._explored_cost(exc.usage, exc.cost_usd)
            if self.serving.explored is not None:
                # Exploring a hit whose cached answer is valid: the LLM giving none is no reason
                # to fail the call. Serve the cached answer (the exploration was paid, but it
                # taught nothing: no label).
                candidate, adapted = self.serving.explored
                self._mark_hit(candidate.entry, adapted.modifier)
                return self.shape.rebuild(candidate.entry, adapted.content, adapted.usage)
            if self.policy.fallback is not None:
                # What the caller's own code would answer after its last attempt: returned as
                # the endpoint's response, counted (``fallbacks``), never stored, so that the
                # next identical call asks the LLM again.
                self.info.fallback = True
                logger.info("no valid answer; returning the fallback: %s", exc.last_error[:200])
                return self.shape.fallback(exc.last_response, self.policy.fallback, self.model)
            self._settle()
            self._account()
            raise
        self.info.attempts = result.attempts
        self.info.escalated = result.escalated
        self.info.usage = self.info.usage + result.usage
        self.info.cost_usd += result.cost
        self._explored_cost(result.usage, result.cost)
        tools = self.shape.has_tool_calls(result.completion)
        self._answered(None if tools else result.content)
        if store and vector is not None and text is not None:
            self.info.entry_id = self._store(result, vector, text)
            # A twin is for a call that made no pair yet: a plain miss, or an explored hit
            # whose cached answer was for another prompt (that comparison is a label, not a
            # pair). Without pairs a sampling model's table can never be proven, so an
            # explored call that makes none would be spent on a table that cannot open.
            unpaired = outcome == "miss" and self.info.pair is None
            if unpaired and not tools and self.serving.twin_wanted():
                self._ask_twin(result, vector, text)
        return result.completion

    def _ask_twin(self, first: Attempts, vector: Any, text: str) -> None:
        """Ask the miss's request once more: the two valid answers, compared by the category's
        equivalence, are a pair (the model's own variability); the second is stored beside
        the first (another answer to draw from). What it costs is this call's, counted as
        ``twin_tokens``/``twin_usd``. It is optional: nothing it meets fails the call."""
        self.info.twin = True
        try:
            twin = send_validated(
                self.call,
                # A seeded request's next seed: the accepted answer's own would repeat it.
                reseeded(self.request, first.attempts),
                self.validate,
                prices=self.prices,
                attempts=1,
                on_invalid=self._record_invalid,
                shape=self.shape,
            )
        except InvalidResponseError as exc:
            if isinstance(exc.usage, Usage):
                self._spend_twin(exc.usage, exc.cost_usd)
            return
        except Exception:
            logger.warning("the second answer of a twin failed; no pair", exc_info=True)
            return
        self._spend_twin(twin.usage, twin.cost)
        if self.shape.has_tool_calls(twin.completion):
            return
        same = self.serving.same(first.content, twin.content)
        if same is None:
            return
        self.serving.paired(same)
        self._store(twin, vector, text)

    def _spend_twin(self, usage: Usage, cost: float) -> None:
        self.info.usage = self.info.usage + usage
        self.info.cost_usd += cost
        self.info.twin_tokens += usage.total_tokens
        self.info.twin_usd += cost

    def _explored_cost(self, usage: Usage, cost: float) -> None:
        """What exploring (or auditing) cost: the paid answer, and the revision of the cached
        one if any."""
        tokens, usd = usage.total_tokens + self.info.revise_tokens, cost + self.info.revise_usd
        if self.info.explored:
            self.info.explore_tokens, self.info.explore_usd = tokens, usd
        elif self.info.audited:
            self.info.audit_tokens, self.info.audit_usd = tokens, usd

    def _store(self, result: Attempts, vector: Any, text: str) -> int | None:
        """Store a valid answer; its entry's id, or ``None`` when it could not be stored."""
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
                slots=self.options.slots or None,
                embedded_slots=self.chosen,
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
            return self.cache.put(entry)
        except Exception:
            logger.warning("could not store a cache entry", exc_info=True)
            self.info.store_failed = True
            return None

    # -- bookkeeping -------------------------------------------------------------------------

    def _settle(self) -> None:
        """Close the call's figures (latency, embedding cost) before it is recorded."""
        self.info.latency_s = time.perf_counter() - self.started
        self.info.cost_usd += self.info.embed_usd

    def _account(self) -> None:
        self.cache.record(self.info)

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
        self.serving.queue_verification()
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

    def __init__(self, call: _CachedCall) -> None:
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
    return StreamedCall(_CachedCall(cache, kwargs, options, call, recorder, shape))


def file_paid(
    cache: SemanticCache,
    kwargs: dict[str, Any],
    options: CacheOptions,
    completion: Any,
    shape: Shape = CHAT,
) -> int | None:
    """Store an answer paid for outside the cache under ``options`` (a call passed through
    while its template was learned: ``llmcache/_late.py``); its entry's id, or ``None``."""
    try:
        call = _CachedCall(cache, kwargs, options, _no_call, None, shape)
    except Exception:  # the call it answered is over: never raised into it
        logger.warning("could not file an answer paid for while learning", exc_info=True)
        return None
    return call.file_paid(completion)


def _no_call(request: dict[str, Any]) -> Any:
    raise AssertionError("an answer filed late is never asked for")  # pragma: no cover


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
    return _CachedCall(cache, kwargs, options, call, recorder, shape).run()
