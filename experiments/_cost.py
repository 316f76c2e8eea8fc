"""The study's cost model (thesis 3.4.5, Fig 3.12/3.13): dollars with and without a cache.

The thesis gives only its totals; this is the model that reproduces them, pure arithmetic so
every figure can be checked by hand.

Tokens are characters / ``chars_per_token`` (the study: 4); prices are dollars per 1M tokens,
the list prices llmcache's ledger uses (:class:`llmcache.types.PriceTable`) for the study's models,
gpt-4o-mini and text-embedding-3-small.

- **No caching** (``none``): every held-out query is a full LLM call,
  ``baseline = sum(llm_usd(prompt, answer))``.
- **Building** a table (``full`` / ``keyword``): the embeddings of the table run's descriptions
  in that mode, ``sum(embed_usd(description))``. The table run's LLM calls are *not* counted:
  that simulation happens anyway, the cache only records it.
- **Usage**: per held-out query, the embedding of its description (always: it is searched
  with, and stored on a miss); on a hit with the ``revise`` modifier, the revise prompt and its
  answer at LLM prices (``read`` and ``choose`` cost nothing more); on a miss (its table was
  empty), the full LLM call.
- ``total = building + usage``; ``reduction = 1 - total / baseline``;
  ``usage_reduction = 1 - usage / baseline``.

The study's own figures fit this reading: without caching $3.30; full $1.11 in total with usage
76.6% below the baseline, so usage $0.77 and building $0.34; keyword $0.65 with usage 84.2%
below, so usage $0.52 and building $0.13 (keyword descriptions are shorter, so cheaper to embed;
1 - 0.65 / 3.3 is the headline 80.3%). Building is positive and well below the baseline in both, as
table embeddings alone would be; the table run's LLM calls, a run like the held-out one, would
alone cost about the baseline.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from experiments._results import GroupCost, ModeCost
from llmcache.types import Price, PriceTable

__all__ = [
    "LOCAL_EMBEDDER_PRICES",
    "STUDY_PRICES",
    "CostPrompt",
    "Prices",
    "description_lengths",
    "embed_usd",
    "llm_usd",
    "mode_cost",
    "mode_costs",
    "no_cache_cost",
    "study_price_table",
]

CacheMode = Literal["full", "keyword"]


class Prices(BaseModel):
    """What the cost model charges: the list prices of an LLM and an embedding model, as
    llmcache prices them (:class:`llmcache.types.Price`, dollars per 1M tokens), and how many
    characters make a token."""

    model_config = ConfigDict(frozen=True)

    chars_per_token: float = Field(default=4.0, gt=0)
    llm_model: str
    llm: Price
    embed_model: str
    embed: Price

    @classmethod
    def listed(cls, llm_model: str, embed_model: str, *, chars_per_token: float = 4.0) -> Prices:
        """The two models' prices in llmcache's price table (``KeyError`` if one is not
        listed: a cost model must not price an unknown model silently)."""
        table = PriceTable().prices
        return cls(
            chars_per_token=chars_per_token,
            llm_model=llm_model,
            llm=table[llm_model],
            embed_model=embed_model,
            embed=table[embed_model],
        )

    def as_dict(self) -> dict[str, float]:
        """The prices as a result file records them: ``llm_in``, ``llm_out``, ``embed``."""
        return {
            "llm_in": self.llm.input_per_m,
            "llm_out": self.llm.output_per_m,
            "embed": self.embed.input_per_m,
        }


# The study's models: gpt-4o-mini answers, text-embedding-3-small embeds, 4 characters a token.
STUDY_PRICES = Prices.listed("gpt-4o-mini", "text-embedding-3-small")
# A local embedder (the bundled MiniLM) costs no dollars; the LLM prices stay the study's.
LOCAL_EMBEDDER_PRICES = STUDY_PRICES.model_copy(
    update={"embed_model": "local embedder", "embed": Price(input_per_m=0.0)}
)


def study_price_table() -> PriceTable:
    """llmcache's price table with every unlisted model priced as the study's LLM: how the
    measured (replayed, revised) tokens of a local model are priced beside the study's."""
    return PriceTable(fallback_model=STUDY_PRICES.llm_model)


def _tokens(chars: float, prices: Prices) -> float:
    return chars / prices.chars_per_token


def llm_usd(prompt_chars: float, answer_chars: float, prices: Prices = STUDY_PRICES) -> float:
    """One LLM call: prompt tokens at the input price, answer tokens at the output price."""
    return (
        _tokens(prompt_chars, prices) * prices.llm.input_per_m
        + _tokens(answer_chars, prices) * prices.llm.output_per_m
    ) / 1e6


def embed_usd(chars: float, prices: Prices = STUDY_PRICES) -> float:
    """Embedding ``chars`` characters of description."""
    return _tokens(chars, prices) * prices.embed.input_per_m / 1e6


class CostPrompt(BaseModel):
    """One prompt as the cost model sees it: lengths in characters, and what the cache did.

    A table run's prompts need only the description lengths; a held-out query also needs
    ``hit`` and, for the ``revise`` modifier, the revise prompt the cache sent in each mode.
    """

    model_config = ConfigDict(frozen=True)

    group: str
    category: str
    prompt_chars: int  # all message contents of the original call
    answer_chars: int
    full_chars: int  # embedding description in full mode
    keyword_chars: int  # embedding description in keyword mode
    modifier: Literal["read", "choose", "revise"] = "read"
    # Whether the query's table (category x agent of the table run) had any entry. In serve mode
    # any entry answers, and both modes' tables hold the same entries, so it is one flag.
    hit: bool = True
    # mode -> characters of the revise prompt built (by the real builder) from that mode's best
    # candidate, and of the LLM's revision; only read for revise hits, and required then.
    revise_prompt_chars: dict[str, int] = Field(default_factory=dict)
    revise_answer_chars: dict[str, int] = Field(default_factory=dict)

    def description_chars(self, mode: CacheMode) -> int:
        return self.full_chars if mode == "full" else self.keyword_chars


def no_cache_cost(queries: Iterable[CostPrompt], prices: Prices = STUDY_PRICES) -> float:
    """Every query answered by the LLM."""
    return sum(llm_usd(q.prompt_chars, q.answer_chars, prices) for q in queries)


def _query_usd(q: CostPrompt, mode: CacheMode, prices: Prices) -> float:
    usd = embed_usd(q.description_chars(mode), prices)
    if not q.hit:
        return usd + llm_usd(q.prompt_chars, q.answer_chars, prices)
    if q.modifier == "revise":
        if mode not in q.revise_prompt_chars:
            # Silently costing a revise hit at zero would flatter the cache.
            raise ValueError(f"revise hit of {q.category!r} has no {mode} revise prompt length")
        return usd + llm_usd(
            q.revise_prompt_chars[mode], q.revise_answer_chars.get(mode, 0), prices
        )
    return usd


def _reduction(usd: float, baseline: float) -> float | None:
    return None if baseline <= 0 else 1.0 - usd / baseline


def mode_cost(
    mode: Literal["none", "full", "keyword"],
    table_prompts: Sequence[CostPrompt],
    queries: Sequence[CostPrompt],
    prices: Prices = STUDY_PRICES,
    baseline: float | None = None,
) -> ModeCost:
    """The cost of answering ``queries`` in ``mode`` from a table built of ``table_prompts``.

    ``baseline`` is the no-caching cost of the same queries (computed when not given); the
    reductions are None when it is zero.
    """
    if baseline is None:
        baseline = no_cache_cost(queries, prices)
    if mode == "none":
        building, usage = 0.0, baseline
    elif mode in ("full", "keyword"):
        building = sum(embed_usd(p.description_chars(mode), prices) for p in table_prompts)
        usage = sum(_query_usd(q, mode, prices) for q in queries)
    else:
        raise ValueError(f"unknown mode {mode!r}; expected 'none', 'full' or 'keyword'")
    total = building + usage
    return ModeCost(
        mode=mode,
        building_usd=building,
        usage_usd=usage,
        total_usd=total,
        reduction=_reduction(total, baseline),
        usage_reduction=_reduction(usage, baseline),
    )


def mode_costs(
    table_prompts: Sequence[CostPrompt],
    queries: Sequence[CostPrompt],
    prices: Prices = STUDY_PRICES,
) -> list[ModeCost]:
    """``none``, ``full`` and ``keyword`` against one baseline, in that order."""
    baseline = no_cache_cost(queries, prices)
    modes: tuple[Literal["none", "full", "keyword"], ...] = ("none", "full", "keyword")
    return [mode_cost(m, table_prompts, queries, prices, baseline) for m in modes]


def description_lengths(
    prompts: Iterable[CostPrompt], groups: Sequence[str] | None = None
) -> tuple[list[GroupCost], float]:
    """Mean description length per group in both modes, and the overall reduction.

    Groups come in ``groups`` order when given (groups without prompts are left out), else in
    order of first appearance. The overall reduction is over all prompts together,
    ``1 - sum(keyword) / sum(full)``, so large groups weigh more, as in the study's total.
    """
    sums: dict[str, list[int]] = {}  # group -> [count, full chars, keyword chars]
    for p in prompts:
        s = sums.setdefault(p.group, [0, 0, 0])
        s[0] += 1
        s[1] += p.full_chars
        s[2] += p.keyword_chars
    order = [g for g in groups if g in sums] if groups is not None else list(sums)
    out: list[GroupCost] = []
    for g in order:
        n, full, keyword = sums[g]
        out.append(
            GroupCost(
                group=g,
                full_chars=full / n,
                keyword_chars=keyword / n,
                reduction=1.0 - keyword / full if full else 0.0,
            )
        )
    total_full = sum(s[1] for s in sums.values())
    total_keyword = sum(s[2] for s in sums.values())
    overall = 1.0 - total_keyword / total_full if total_full else 0.0
    return out, overall
