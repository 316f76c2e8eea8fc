"""Importance ratings of one moment answered by one prompt, below the cache.

The town rates every memory it forms (``importance score``, two thirds of its prompts), and the
memories of one moment -- what an agent notices in one step, a reflection's insights, the seed
memory's sentences -- come in groups. Asked one by one, each rating pays for a request, a read of
the prompt's tail and a JSON object of its own; asked as one prompt ("rate each of the following
memories"), the group pays for them once.

The batching sits *below* :class:`~llmcache.CachedLLM`, between it and the real client, so
nothing above it changes: each rating is still its own ``importance score`` call -- looked up in
the cache, validated, recorded with its own messages and answer, stored as its own entry -- as in
the study the town reproduces. Only the calls the cache did not answer reach the model, and
those of one group reach it as one prompt:

- :meth:`RatingBatcher.group` opens a group for calls that :meth:`TownLLM.send_many
  <agent_core.llm.TownLLM.send_many>` runs side by side, one thread each;
- a call that reaches the client (a miss) waits there; a call the cache answered leaves the
  group; once every call has done one or the other, the waiting ones are asked in one prompt
  (:data:`~agent_core.templates.IMPORTANCE_BATCH`), and each gets a completion holding its own
  ``{"score": n}`` and its share of the prompt's tokens;
- anything else -- a single miss, a resubmission after an invalid answer, an escalation to
  another model, a batch answer that fails, a group whose calls differ in agent, time or request
  parameters -- is sent as the call's own request, unchanged.

So the grouping is decided by what the cache answered, never by timing, and a run's batches do
not depend on which thread runs first. A wait is bounded (:attr:`RatingBatcher.wait_seconds`):
a call stuck elsewhere (another thread's lock) cannot hold the group forever.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from openai.types.chat import ChatCompletion

from .call import TownCall
from .schemas import MAX_ANSWER_TOKENS, worst_case_tokens
from .templates import IMPORTANCE, IMPORTANCE_BATCH

__all__ = ["BATCHED_CATEGORY", "RatingBatcher", "RatingGroup", "batch_request"]

logger = logging.getLogger("agent_core")

#: The category whose calls are batched.
BATCHED_CATEGORY = IMPORTANCE.category

# Request keys a batch replaces (its seed is its first call's); every other key must agree
# across the group's requests.
_OWN_KEYS = ("messages", "response_format", "max_tokens", "seed")


def batch_request(calls: Sequence[TownCall], request: dict[str, Any]) -> dict[str, Any]:
    """The request that rates ``calls`` (one agent's memories of one moment) in one prompt.

    ``request`` is one of the calls' own requests: its model and parameters are kept; its
    messages, schema and answer cap become the batch's. The schema asks for exactly one score per
    memory, each in the single rating's range, and the cap is that schema's worst case."""
    first = calls[0]
    item = IMPORTANCE.json_schema()["properties"]["score"]
    schema = {
        "type": "object",
        "properties": {
            "scores": {
                "type": "array",
                "items": item,
                "minItems": len(calls),
                "maxItems": len(calls),
            }
        },
        "required": ["scores"],
        "additionalProperties": False,
    }
    messages = IMPORTANCE_BATCH.render(
        first.summary_block,
        first.agent,
        {"memories": [str(c.slots["memory"]) for c in calls]},
        first.time,
    )
    response_format = IMPORTANCE_BATCH.response_format()
    response_format["json_schema"]["schema"] = schema
    return {
        **request,
        "messages": messages,
        "response_format": response_format,
        "max_tokens": min(MAX_ANSWER_TOKENS, worst_case_tokens(schema)),
    }


def _scores(completion: Any, n: int) -> list[int]:
    """The ``n`` scores of a batch answer; ``ValueError`` when it holds anything else."""
    try:
        content = completion.choices[0].message.content
        scores = json.loads(content)["scores"]
    except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not a batch answer: {exc}") from exc
    if (
        not isinstance(scores, list)
        or len(scores) != n
        or not all(isinstance(s, int) and not isinstance(s, bool) and 1 <= s <= 10 for s in scores)
    ):
        raise ValueError(f"expected {n} scores from 1 to 10, got {scores!r}")
    return scores


def _shares(total: int, n: int) -> list[int]:
    """``total`` split into ``n`` whole shares that add up to it."""
    base, extra = divmod(total, n)
    return [base + (1 if i < extra else 0) for i in range(n)]


def _member_completions(batch: Any, scores: list[int]) -> list[ChatCompletion]:
    """One completion per rating: its own answer, the batch's model and id, and its share of the
    batch's tokens (so a run's recorded tokens add up to what the server counted)."""
    n = len(scores)
    usage = getattr(batch, "usage", None)
    prompt = _shares(int(getattr(usage, "prompt_tokens", 0) or 0), n) if usage else None
    completion = _shares(int(getattr(usage, "completion_tokens", 0) or 0), n) if usage else None
    out = []
    for i, score in enumerate(scores):
        data: dict[str, Any] = {
            "id": f"{batch.id}-{i + 1}of{n}",
            "object": "chat.completion",
            "created": batch.created,
            "model": batch.model,
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": json.dumps({"score": score})},
                }
            ],
        }
        if prompt is not None and completion is not None:
            data["usage"] = {
                "prompt_tokens": prompt[i],
                "completion_tokens": completion[i],
                "total_tokens": prompt[i] + completion[i],
            }
        out.append(ChatCompletion.model_validate(data))
    return out


@dataclass
class _Member:
    call: TownCall
    messages: list[dict[str, str]]
    request: dict[str, Any] | None = None  # set when it reached the client
    answer: ChatCompletion | None = None
    served: bool = False  # its first request has been handled (batched or not)


@dataclass
class RatingGroup:
    """The calls of one :meth:`RatingBatcher.group`; see the module docstring."""

    members: list[_Member]
    wait_seconds: float
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _left: set[int] = field(default_factory=set)  # answered without reaching the client
    _fired: bool = False
    batches: int = 0  # batch prompts sent (0 or 1)
    batched: int = 0  # ratings those answered
    timed_out: bool = False  # a call neither arrived nor left within wait_seconds

    def _settled(self) -> bool:
        return all(m.request is not None or i in self._left for i, m in enumerate(self.members))

    def leave(self, index: int) -> None:
        """Call ``index`` is done (answered by the cache, failed, or answered here)."""
        with self._cond:
            self._left.add(index)
            self._cond.notify_all()

    def arrive(self, index: int, request: dict[str, Any], client: Any) -> Any:
        """Call ``index`` reached the client with ``request``: its completion, from the group's
        batch once every call has arrived or left, else from its own request."""
        with self._cond:
            member = self.members[index]
            member.request = request
            self._cond.notify_all()
            settled = self._cond.wait_for(
                lambda: self._fired or self._settled(), timeout=self.wait_seconds
            )
            if not self._fired:
                if not settled:
                    self.timed_out = True
                    logger.warning(
                        "rating group: a call neither reached the model nor was answered "
                        "within %.0f s; asking the ones that arrived",
                        self.wait_seconds,
                    )
                self._fired = True
                self._fire(client)
                self._cond.notify_all()
            member.served = True
            answer = member.answer
        if answer is not None:
            return answer
        return client.chat.completions.create(**request)

    def _fire(self, client: Any) -> None:
        """Ask the waiting calls in one prompt (under the lock: the others wait for it)."""
        waiting = [m for m in self.members if m.request is not None and not m.served]
        if len(waiting) < 2:
            return
        first = waiting[0].request
        assert first is not None
        same = all(
            m.call.agent == waiting[0].call.agent
            and m.call.summary_block == waiting[0].call.summary_block
            and m.call.time == waiting[0].call.time
            and {k: v for k, v in (m.request or {}).items() if k not in _OWN_KEYS}
            == {k: v for k, v in first.items() if k not in _OWN_KEYS}
            for m in waiting
        )
        if not same:
            return
        try:
            batch = client.chat.completions.create(
                **batch_request([m.call for m in waiting], first)
            )
            answers = _member_completions(batch, _scores(batch, len(waiting)))
        except Exception as exc:  # each call then asks on its own, as without batching
            logger.info("rating batch of %d failed, asking one by one: %s", len(waiting), exc)
            return
        for member, answer in zip(waiting, answers, strict=True):
            member.answer = answer
        self.batches += 1
        self.batched += len(waiting)


class _Completions:
    def __init__(self, owner: RatingBatcher) -> None:
        self._owner = owner

    def create(self, **kwargs: Any) -> Any:
        return self._owner.create(**kwargs)


class _Chat:
    def __init__(self, owner: RatingBatcher) -> None:
        self.completions = _Completions(owner)


class RatingBatcher:
    """An OpenAI-shaped client that answers a group's missed ratings with one prompt.

    Wrap the real client with it and the cache around it: ``CachedLLM(RatingBatcher(client))``.
    Requests outside a group, and everything but a call's first request, pass through to
    ``client`` unchanged; other attributes are the client's.
    """

    def __init__(self, client: Any, *, max_size: int = 8, wait_seconds: float = 30.0) -> None:
        if max_size < 2:
            raise ValueError(f"a batch holds at least 2 ratings, not {max_size}")
        self.client = client
        self.max_size = max_size
        self.wait_seconds = wait_seconds
        self.chat = _Chat(self)
        self._local = threading.local()
        self._lock = threading.Lock()
        self.batches = 0  # batch prompts sent
        self.batched = 0  # ratings they answered
        self.timeouts = 0  # groups that stopped waiting for a call (see RatingGroup.timed_out)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    @contextmanager
    def group(self, calls: Sequence[TownCall]) -> Iterator[RatingGroup]:
        """A group for ``calls`` (at most :attr:`max_size`, all ``importance score``). Each call
        runs in its own thread inside :meth:`member`."""
        if len(calls) > self.max_size:
            raise ValueError(f"a group holds at most {self.max_size} calls, not {len(calls)}")
        if any(c.category != BATCHED_CATEGORY for c in calls):
            raise ValueError(f"only {BATCHED_CATEGORY!r} calls are batched")
        g = RatingGroup([_Member(c, c.messages()) for c in calls], self.wait_seconds)
        try:
            yield g
        finally:
            with self._lock:
                self.batches += g.batches
                self.batched += g.batched
                self.timeouts += g.timed_out

    @contextmanager
    def member(self, g: RatingGroup, index: int) -> Iterator[None]:
        """Run call ``index`` of ``g`` in this thread: its first request joins the group."""
        self._local.slot = (g, index)
        try:
            yield
        finally:
            self._local.slot = None
            g.leave(index)

    def create(self, **kwargs: Any) -> Any:
        slot = getattr(self._local, "slot", None)
        if slot is not None:
            g, index = slot
            m = g.members[index]
            if m.request is None and kwargs.get("messages") == m.messages:
                return g.arrive(index, kwargs, self.client)
        return self.client.chat.completions.create(**kwargs)
