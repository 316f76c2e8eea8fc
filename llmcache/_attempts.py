"""Sending one request until its answer validates: the loop a miss and a revision share.

A request is sent up to ``attempts`` times on the requested model, then, when an escalation
model is given, up to ``escalation_attempts`` times on it. A request that carries an integer
``seed`` is resubmitted with the next seeds (``seed + 1``, ``seed + 2``, ...): a provider that
honours the seed would give the same invalid answer again, so the resubmission would pay for
nothing (and a second answer asked on purpose would measure nothing); a run stays reproducible,
its seeds still decide every answer. Every answer is read through the endpoint's
:class:`~llmcache._shapes.Shape` and checked by the validator; an invalid one is handed to
``on_invalid`` (for the record) and never stored. What every attempt spent is added up and
priced, so that a call that ends without a valid answer still accounts for what it paid.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._errors import InvalidResponseError
from ._ledger import PriceTable
from ._shapes import CHAT, Shape
from ._types import Usage
from ._validation import CheckFn, check

__all__ = ["Attempts", "CallFn", "InvalidFn", "ignore_invalid", "reseeded", "send_validated"]

logger = logging.getLogger("llmcache")

#: The LLM, as the cache reaches it: a request's keyword arguments in, the endpoint's response
#: out. The sync client sends it directly, the async one hops back to its event loop.
CallFn = Callable[[dict[str, Any]], Any]

#: Told of each invalid answer: ``(attempt, model, content, usage, reason)``.
InvalidFn = Callable[[int, str, "str | None", Usage, str], None]


def ignore_invalid(attempt: int, model: str, content: str | None, usage: Usage, why: str) -> None:
    return None


@dataclass
class Attempts:
    """The result of sending one request until it validated."""

    completion: Any  # the endpoint's response (a ChatCompletion for chat.completions)
    content: str  # "" for an answer made only of tool calls
    attempts: int
    escalated: bool
    usage: Usage  # all attempts
    final_usage: Usage  # the accepted answer alone
    cost: float


_SEED_RANGE = 2**31  # llama.cpp and OpenAI both take a seed in [0, 2**31)


def reseeded(request: dict[str, Any], n: int) -> dict[str, Any]:
    """``request`` as its ``n``-th resubmission sends it (``n`` = 0: unchanged). A second
    answer asked on purpose (the model measured against itself) is a resubmission too."""
    seed = request.get("seed")
    if n == 0 or not isinstance(seed, int) or isinstance(seed, bool):
        return request
    return {**request, "seed": (seed + n) % _SEED_RANGE}


def send_validated(
    call: CallFn,
    request: dict[str, Any],
    validate: CheckFn,
    *,
    prices: PriceTable,
    attempts: int,
    escalate_to: str | None = None,
    escalation_attempts: int = 0,
    on_invalid: InvalidFn = ignore_invalid,
    shape: Shape = CHAT,
) -> Attempts:
    """Send ``request`` until its answer validates; raise :class:`InvalidResponseError` (with
    what was spent) when no attempt gave a valid one."""
    plan: list[dict[str, Any]] = [reseeded(request, n) for n in range(attempts)]
    if escalate_to and escalate_to != request.get("model"):
        escalated = {**request, "model": escalate_to}
        plan += [reseeded(escalated, n) for n in range(escalation_attempts)]
    usage = Usage()
    cost = 0.0
    last_reason = ""
    last_content: str | None = None
    last_response: Any = None
    for n, sent in enumerate(plan, start=1):
        completion = call(sent)
        u = shape.usage(completion, shape.messages(sent))
        usage = usage + u
        model = str(sent.get("model", ""))
        cost += prices.cost(model, u)
        content = shape.content(completion)
        # Tool calls are the answer: the validator reads text, which such an answer need not
        # have, and resubmitting a valid answer would only pay for it again.
        reason = None if shape.has_tool_calls(completion) else check(validate, content)
        if reason is None:
            return Attempts(
                completion=completion,
                content=content or "",
                attempts=n,
                escalated=n > attempts,
                usage=usage,
                final_usage=u,
                cost=cost,
            )
        on_invalid(n, model, content, u, reason)
        last_reason, last_content, last_response = reason, content, completion
        logger.info("invalid answer (attempt %d/%d): %s", n, len(plan), reason[:200])
    raise InvalidResponseError(
        f"no valid answer after {len(plan)} attempts (last reason: {last_reason[:300]})",
        attempts=len(plan),
        last_content=last_content,
        last_error=last_reason,
        usage=usage,
        cost_usd=cost,
        last_response=last_response,
    )
