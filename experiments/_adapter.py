"""The hit step as the experiments run it: a cached candidate made the answer to a query the way
the live cache makes it, through :class:`llmcache.modifiers.HitStep` with the town's category
policies (modifier, validation, revision), within a budget of revise calls.

A candidate that step cannot adapt (no answer, one that fails validation, or beyond the revise
budget) is counted as a failure: the live cache would have called the LLM instead.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from agent_core.llm import cache_config, town_options, town_request
from llmcache import EmbedMode
from llmcache.embedders import Embedder
from llmcache.modifiers import HitStep
from llmcache.types import CacheEntry, Candidate, Partition, PriceTable, Similarity, Usage

from ._cost import study_price_table
from ._data import MODES, Prompt

__all__ = ["AdaptOutcome", "Adapter"]

logger = logging.getLogger("experiments")


@dataclass(frozen=True)
class AdaptOutcome:
    """One candidate through the hit step (see :meth:`Adapter.outcome`)."""

    content: str
    status: Literal["adapted", "refused", "over budget"]
    cost_usd: float = 0.0  # what the modifier's LLM calls cost at the adapter's prices


@dataclass
class Adapter:
    """Makes a cached candidate the answer to a query the way the live cache does: through
    :meth:`llmcache.modifiers.HitStep.adapt`, on a cache configured with the town's category
    policies, within a budget of revise calls.

    The step needs the town's cache configuration, the embedder and the prices (the study's
    LLM price for whatever model revises, as in the cost replay), not a cache: the experiments
    retrieve candidates themselves.
    """

    client: Any
    model: str
    embedder: Embedder
    revise_budget: int
    prices: PriceTable = field(default_factory=study_price_table)
    revise_calls: int = 0
    usage: Usage = field(default_factory=Usage)
    failures: Counter[str] = field(default_factory=Counter)
    _step: HitStep = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._step = HitStep(cache_config(), self.embedder, self.prices)

    def adapt(self, query: Prompt, cached: Prompt, similarity: float, mode: str) -> str:
        """The answer the cache would give ``query`` from ``cached`` (or the cached text)."""
        return self.outcome(query, cached, similarity, mode).content

    def outcome(self, query: Prompt, cached: Prompt, similarity: float, mode: str) -> AdaptOutcome:
        """What the hit step made of ``cached`` for ``query``: the answer, whether the cache
        would serve it (``adapted``), refuse it (``refused``: it would call the LLM instead)
        or the budget left it untried (``over budget``), and what the modifier spent."""
        call = query.call()
        options = town_options(call)
        modifier = self._step.config.resolve(options).modifier
        if (
            modifier is not None
            and modifier.name == "revise"
            and self.revise_calls >= self.revise_budget
        ):
            self.failures[mode] += 1
            return AdaptOutcome(content=cached.response, status="over budget")
        try:
            adapted = self._step.adapt(
                Candidate(
                    # A baseline's candidate ("random") is no mode's: any mode's entry serves.
                    entry=_entry(cached, mode if mode in MODES else "keyword", self.embedder),
                    similarity=Similarity.from_normalized(similarity),
                ),
                options,
                messages=query.messages,
                request=town_request(call, self.model),
                call=self._send,
            )
        except Exception as exc:  # a failed revision call is a modifier failure, not a crash
            logger.warning("%s: modifier failed: %s", query.category, exc)
            self.failures[mode] += 1
            return AdaptOutcome(content=cached.response, status="refused")
        self.usage = self.usage + adapted.usage
        if adapted.valid and adapted.content is not None:
            return AdaptOutcome(
                content=adapted.content, status="adapted", cost_usd=adapted.cost_usd
            )
        self.failures[mode] += 1
        return AdaptOutcome(content=cached.response, status="refused", cost_usd=adapted.cost_usd)

    def _send(self, request: dict[str, Any]) -> Any:
        self.revise_calls += 1
        return self.client.chat.completions.create(**request)


def _entry(cached: Prompt, mode: str, embedder: Embedder) -> CacheEntry:
    """A recorded prompt as the cache entry it would have been (without its vector and the
    server's envelope: the modifiers read the answer's text, its options and its prompt)."""
    return CacheEntry(
        partition=Partition(category=cached.category, agent=cached.agent, params_hash=""),
        embed_text=cached.description(mode),
        embed_mode=EmbedMode(mode),
        embedder_id=embedder.model_id,
        vector_b64="",
        keywords=tuple(cached.keywords),
        options=tuple(cached.options) if cached.options else None,
        messages=cached.messages,
        content=cached.response,
        completion={},
        usage=Usage(),
        metadata=cached.metadata,
    )
