"""The hit step: what a cached candidate becomes as the answer to a new query.

The query's modifier (its options', else its category's, else ``read``) turns the cached answer
into an answer for the query; that answer is then checked against the query's validator. A
``revise`` modifier asks the LLM, and its revision is sent like a miss is (validated,
resubmitted while invalid, priced), so the step needs the configuration, the embedder (for
``choose``) and the prices -- not a cache. Nothing is looked up, stored or counted here: the
cached call does that around this step, and an experiment can run the same step on candidates
it retrieved itself.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._attempts import CallFn, InvalidFn, ignore_invalid, send_validated
from ._config import CacheConfig, ResolvedPolicy
from ._errors import ConfigurationError, InvalidResponseError
from ._ledger import PriceTable
from ._modifiers import Read, modifier_name
from ._protocols import Embedder, ModifyContext
from ._shapes import CHAT, Shape
from ._types import Adapted, CacheOptions, Candidate, Usage
from ._validation import as_validator, check

__all__ = ["HitStep"]

logger = logging.getLogger("llmcache")

# How many times a revision prompt may be resubmitted before the hit is given up as a miss.
_REVISE_ATTEMPTS = 3


@dataclass(frozen=True)
class HitStep:
    """The step every hit is made by, for one configuration, embedder and price table.

    >>> from llmcache import CacheConfig, CacheOptions          # doctest: +SKIP
    >>> step = HitStep(CacheConfig(), embedder)                 # doctest: +SKIP
    >>> step.adapt(candidate, CacheOptions(category="c"), messages=msgs).content  # doctest: +SKIP
    """

    config: CacheConfig
    embedder: Embedder
    prices: PriceTable = field(default_factory=PriceTable)

    def adapt(
        self,
        candidate: Candidate,
        options: CacheOptions,
        *,
        messages: Sequence[Mapping[str, Any]],
        request: Mapping[str, Any] | None = None,
        call: CallFn | None = None,
        on_invalid: InvalidFn | None = None,
        shape: Shape = CHAT,
        policy: ResolvedPolicy | None = None,
    ) -> Adapted:
        """What ``candidate`` becomes as the answer to the query of ``messages`` and
        ``options``: the modifier's answer and whether it passed the query's validator.

        A ``revise`` modifier asks the LLM through ``call`` (a request's keyword arguments in,
        a response out), sending ``request`` -- the query's keyword arguments as given to
        ``create`` -- plus its constraints, with the revision prompt as its messages; an
        invalid revision is resubmitted a few times, each invalid answer passed to
        ``on_invalid(attempt, model, content, usage, reason)``. What that spent, and what it
        cost at these prices, is in the result. ``shape`` is the endpoint (the cached client's
        ``parse`` and Responses calls pass their own; a chat completion by default) and
        ``policy`` the one a call already resolved from ``options``.
        """
        if policy is None:
            policy = self.config.resolve(options)
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
        sent = {**(request or {}), **options.constraints}
        spent = Usage()
        cost = 0.0

        def complete(prompt: list[dict[str, Any]]) -> str:
            nonlocal spent, cost
            if call is None:
                raise ConfigurationError(
                    f"the {name!r} modifier asks the LLM: pass call= to HitStep.adapt"
                )
            result = send_validated(
                call,
                shape.revision_request(sent, prompt),
                validate,
                prices=self.prices,
                attempts=_REVISE_ATTEMPTS,
                on_invalid=on_invalid or ignore_invalid,
                shape=shape,
            )
            spent = spent + result.usage
            cost += result.cost
            return result.content

        ctx = ModifyContext(
            query_messages=[dict(m) for m in messages],
            options=options,
            candidate=candidate,
            embedder=self.embedder,
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
