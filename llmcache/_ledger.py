"""What the cache spent and avoided, per table, in tokens and dollars.

Counters are kept as *deltas* in memory and added to the backend's counters in batches, so
several processes sharing one cache directory (or one database) sum up instead of overwriting
each other.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from ._config import Limits
from ._protocols import CacheBackend
from ._slots import (
    LEADING_WORDS,
    embedded_from_counters,
    partition_values_from_counters,
    partitions_from_counters,
)
from ._types import CallInfo, Partition, Usage

__all__ = [
    "POOL_MARKER",
    "CacheStats",
    "Ledger",
    "Price",
    "PriceTable",
    "TableStats",
    "info_stats_key",
    "verify_counters",
]

logger = logging.getLogger("llmcache")

HIST_BINS = 10  # similarity histogram over the normalised scale (cos + 1) / 2, bins of 0.1


class Price(BaseModel):
    """US dollars per million tokens."""

    input_per_m: float
    output_per_m: float = 0.0

    def cost(self, usage: Usage) -> float:
        return (
            usage.prompt_tokens * self.input_per_m + usage.completion_tokens * self.output_per_m
        ) / 1e6


# Public list prices as used by the thesis (gpt-4o-mini, text-embedding-3-small) and gpt-4o.
DEFAULT_PRICES: dict[str, Price] = {
    "gpt-4o-mini": Price(input_per_m=0.15, output_per_m=0.60),
    "gpt-4o": Price(input_per_m=2.50, output_per_m=10.00),
    "text-embedding-3-small": Price(input_per_m=0.02),
    "text-embedding-3-large": Price(input_per_m=0.13),
}


class PriceTable(BaseModel):
    """Prices by model name. Dated variants (``gpt-4o-mini-2024-07-18``) match their base name.

    A model that is not listed (a local model, say) is priced as ``fallback_model`` so that
    savings stay comparable to the thesis; reports name the model it was priced as.
    """

    prices: dict[str, Price] = Field(default_factory=lambda: dict(DEFAULT_PRICES))
    fallback_model: str | None = "gpt-4o-mini"

    def lookup(self, model: str) -> tuple[Price | None, str | None]:
        if model in self.prices:
            return self.prices[model], model
        # Longest listed prefix wins, so "gpt-4o-mini-…" is not priced as "gpt-4o".
        for name in sorted(self.prices, key=len, reverse=True):
            if model.startswith(name):
                return self.prices[name], name
        if self.fallback_model is not None and self.fallback_model in self.prices:
            return self.prices[self.fallback_model], self.fallback_model
        return None, None

    def cost(self, model: str, usage: Usage) -> float:
        price, _ = self.lookup(model)
        return price.cost(usage) if price else 0.0


#: A table's counter of lookups refused because an exact slot differed: ``exact_refused:<slot>``.
EXACT_REFUSED = "exact_refused:"


def stats_key(partition: Partition) -> str:
    """The counters' key: readable without the store (``python -m llmcache stats``)."""
    return _stats_key(partition.category, partition.agent, partition.model, partition.key)


#: The counter a table's counters carry to name its pool: ``max_pool_<pool key>`` (the
#: ``max_`` prefix keeps it at 1 however often it is added).
POOL_MARKER = "max_pool_"


def pool_stats_key(partition: Partition) -> str:
    """The counters' key of a table's pool (see :attr:`Partition.pool_key`)."""
    return _stats_key(partition.category, "", partition.model, partition.pool_key)


def info_stats_key(info: CallInfo) -> str:
    """The counters' key of the table a call went to."""
    return _stats_key(
        info.category or "", info.agent or "", info.model or "", info.partition_key or ""
    )


#: The counters' key of calls that reached no table: a call without cache options whose prompt
#: no template was recognised in (it went to the wrapped client uncached). Not a table.
UNTABLED_KEY = "untabled"


#: A learned template's description among the untabled counters:
#: ``max_learned:<name>:<its fixed text, shortened>`` (``max_``: written once however often).
LEARNED_PREFIX = "max_learned:"


class LearnedTemplateStats(BaseModel):
    """A template learned from the traffic (``CachedLLM(learn_templates=True)``): its name (its
    tables' category), its fixed text shortened, its slots with their roles as its tables
    learned them, and the calls and hits of its tables."""

    name: str
    text: str
    #: Slots that partition (whose call it is: never embedded), and those embedded.
    partition_slots: list[str] = Field(default_factory=list)
    embedded_slots: list[str] = Field(default_factory=list)
    calls: int = 0
    hits: int = 0


def untabled_counts(counters: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
    """The counters of calls that reached no table (``unrecognised``, ``learning``) and the
    learned templates with their tables' figures, as :class:`CacheStats` fields."""
    untabled = counters.get(UNTABLED_KEY, {})
    learned: dict[str, LearnedTemplateStats] = {}
    for name in untabled:
        if name.startswith(LEARNED_PREFIX):
            template, _, text = name[len(LEARNED_PREFIX) :].partition(":")
            learned.setdefault(template, LearnedTemplateStats(name=template, text=text))
    for key, c in counters.items():
        if key == UNTABLED_KEY or not learned:
            continue
        category, agent, _, pkey = _stats_parts(key)
        # A namespaced proxy key's tables are "<namespace>/<name>".
        found = learned.get(category.rpartition("/")[2])
        if found is None or pkey.startswith("pool:"):
            continue
        found.calls += int(c.get("lookups", 0) + c.get("collects", 0) + c.get("bypasses", 0))
        found.hits += int(c.get("hits", 0))
        parts = partitions_from_counters(c, shared=not agent)
        found.partition_slots = sorted({*found.partition_slots, *parts})
        embedded = embedded_from_counters(c, shared=not agent) or ()
        found.embedded_slots = sorted({*found.embedded_slots, *embedded} - set(parts))
    return {
        "unrecognised": int(untabled.get("unrecognised", 0)),
        "learning": int(untabled.get("learning", 0)),
        "filed_late": int(untabled.get("filed_late", 0)),
        "learned": sorted(learned.values(), key=lambda t: -t.calls),
    }


def _stats_key(category: str, agent: str, model: str, key: str) -> str:
    return json.dumps([category, agent, model, key], ensure_ascii=False)


def _stats_parts(key: str) -> tuple[str, str, str, str]:
    """A counters' key's (category, agent, model, table key); a key of another form is its
    own category and table key."""
    try:
        category, agent, model, pkey = json.loads(key)
    except (ValueError, TypeError):
        return key, "", "", key
    return str(category), str(agent), str(model), str(pkey)


# How two values of one counter combine, wherever counters meet (the ledger's pending deltas,
# a store adding them up, a Postgres upsert): most add up; a counter named "max_…" or "min_…"
# keeps the extreme. By prefix, so that a store needs no list of counters. The SQL name is for
# stores that merge in the database (see COUNTER_MERGE_SQL).
EXTREME_COUNTERS: dict[str, tuple[Callable[[float, float], float], str]] = {
    "max_": (max, "greatest"),
    "min_": (min, "least"),
}


def merge_counter(name: str, old: float | None, new: float) -> float:
    """One counter's value after adding ``new`` to ``old`` (``None``: not counted yet)."""
    if old is None:
        return new
    for prefix, (pick, _) in EXTREME_COUNTERS.items():
        if name.startswith(prefix):
            return pick(old, new)
    return old + new


def merge_counters(counters: MutableMapping[str, float], delta: Mapping[str, float]) -> None:
    """Add ``delta`` into ``counters`` in place, by :func:`merge_counter`."""
    for name, value in delta.items():
        counters[name] = merge_counter(name, counters.get(name), float(value))


def counter_merge_sql(name: str, old: str, new: str) -> str:
    """:func:`merge_counter` as an SQL expression over the columns ``name``, ``old``, ``new``."""
    cases = " ".join(
        f"WHEN starts_with({name}, '{prefix}') THEN {function}({old}, {new})"
        for prefix, (_, function) in EXTREME_COUNTERS.items()
    )
    return f"CASE {cases} ELSE {old} + {new} END"


def verify_counters(
    *, verified: bool | None = None, failed: bool = False, tokens: int = 0, usd: float = 0.0
) -> dict[str, float]:
    """The counters of one verification, on the request path or off it: asked (``verified``
    the verdict, ``failed`` when the verifier raised) and what asking cost."""
    if verified is None and not failed:
        return {}
    return {
        "vf_calls": 1,
        "vf_yes": int(verified is True),
        "vf_no": int(verified is False),
        "vf_failed": int(failed),
        "vf_tokens": tokens,
        "vf_usd": usd,
    }


class TableStats(BaseModel):
    """Counters of one table (category × agent × request parameters)."""

    category: str
    agent: str
    model: str
    key: str
    lookups: int = 0
    hits: int = 0
    misses: int = 0
    collects: int = 0
    bypasses: int = 0
    corrupt: int = 0  # damaged entries met and evicted (by lookups and index rebuilds)
    store_failures: int = 0  # answers returned but not stored, lookups the store failed
    record_failures: int = 0  # answers returned but not recorded by the Recorder
    evicted: int = 0  # entries evicted to keep the cache within its bounds (least recently hit)
    expired: int = 0  # entries evicted past their time to live (never served)
    attempts: int = 0
    escalations: int = 0
    # Calls whose every attempt was invalid, answered with their fallback text (never stored).
    fallbacks: int = 0
    # Candidates over the threshold refused by the opposites gate (their text meant the
    # opposite of the query's): each call a miss.
    refused_opposites: int = 0
    similarity_mean: float | None = None  # raw cosine of the best candidate, over lookups
    similarity_std: float | None = None
    similarity_min: float | None = None
    similarity_max: float | None = None
    similarity_hist: list[int] = Field(default_factory=lambda: [0] * HIST_BINS)
    tokens_spent: int = 0
    usd_spent: float = 0.0
    tokens_avoided: int = 0
    usd_avoided: float = 0.0
    revise_tokens: int = 0
    revise_usd: float = 0.0
    embed_tokens: int = 0
    embed_usd: float = 0.0
    modifiers: dict[str, int] = Field(default_factory=dict)
    # The wrong-hit budget (see docs/wrong-hit-budget.md). Labels and exploration are counted
    # in every table; the rest is filled by SemanticCache.stats for a table under a budget.
    labels: int = 0  # (cosine, right or wrong) labels of the table, from 0.5 cosine up
    labels_wrong: int = 0
    explored: int = 0  # would-be hits also sent to the LLM to label them
    explore_tokens: int = 0
    explore_usd: float = 0.0
    wrong_hit_budget: float | None = None
    # How the table keeps its budget: "prove" (fail-closed: labels prove a threshold before it
    # serves) or "audit" (fail-open: serves from its starting threshold, audits a share of
    # hits, tightens where the audits show it over δ); None without a budget.
    guard: str | None = None
    audits: int = 0  # would-be hits audited (asked anyway and compared) under the audit guard
    audit_tokens: int = 0
    audit_usd: float = 0.0
    threshold_in_force: float | None = None  # raw cosine: learned, or the strict fallback
    # The labels show even near-identical prompts disagreeing more often than the budget
    # allows: the table serves no hit (its threshold in force is above every cosine).
    closed: bool = False
    labels_in_force: int = 0  # labels at or above the threshold in force (the strict one
    # while no threshold is proven)
    wrong_rate: float | None = None  # wrong among them: the estimated wrong-hit rate
    wrong_rate_ci: tuple[float, float] | None = None  # its two-sided 95% Wilson interval
    # Verification of near misses (see docs/wrong-hit-budget.md), on the request path and off.
    verifications: int = 0  # the verifier asked (answered or failed)
    verified_yes: int = 0
    verified_no: int = 0
    verify_failed: int = 0  # the verifier raised: the call went on as a miss
    verify_queued: int = 0  # near misses queued for verification off the request path
    verify_dropped: int = 0  # queued but never verified (queue full, cache closed)
    verify_tokens: int = 0  # what asking cost (also inside tokens_spent / usd_spent)
    verify_usd: float = 0.0
    # The table's labels of near misses the verifier said yes to: on the request path under a
    # budget, a yes is served only where these prove the budget kept.
    verified_labels: int = 0
    verified_labels_wrong: int = 0
    verified_explored: int = 0  # verified near misses also sent to the LLM to label them
    verified_threshold: float | None = None  # raw cosine a yes must reach to be served
    verified_wrong_rate: float | None = None
    verified_wrong_rate_ci: tuple[float, float] | None = None
    # The model's own variability (see docs/wrong-hit-budget.md): pairs of fresh answers to one
    # prompt, and the twins (misses asked twice) that added some of them.
    pairs: int = 0  # this table's pairs
    twins: int = 0
    twin_tokens: int = 0
    twin_usd: float = 0.0
    # The self-disagreement the budget uses (the pool's, when the table pools): the share of
    # pairs whose two answers the equivalence called different, with its two-sided 95% Wilson
    # interval, over this many pairs.
    self_disagreement: float | None = None
    self_disagreement_ci: tuple[float, float] | None = None
    self_disagreement_pairs: int = 0
    pool_labels: int = 0  # labels of the table's pool (every table of its template)
    threshold_source: str | None = None  # whose labels prove the threshold: "table" or "pool"
    # At the threshold in force: wrong-hit rate minus self-disagreement, and its two-sided 95%
    # interval (Newcombe's, for a difference of two rates). What the budget keeps at most δ is
    # its one-sided upper bound: at 95%, or at 99% where it credits the self-disagreement.
    excess: float | None = None
    excess_ci: tuple[float, float] | None = None
    # Hits served from one of several near-identical answers drawn at random (variety).
    varied: int = 0
    # Hits served as an answer stored for the very same prompt: the model's own answer to it
    # (a guard serves them without a threshold, exploration or audit; docs/promise.md).
    identical: int = 0
    # A templated table's embedded slots, deciding first: those whose values have varied in
    # the table (every non-exact slot until one has), see llmcache/_slots.py. None: its calls
    # give their keywords, or are not templated.
    embedded_slots: tuple[str, ...] | None = None
    # Its partitioning slots (see llmcache/_slots.py): exact, never embedded, each with how
    # many distinct values it has held; and, per exact slot, the lookups that slot turned
    # into a miss although the nearest entry was close enough to be served.
    partition_slots: dict[str, int] = Field(default_factory=dict)
    # Where no agent is given: the values of the slots that separate the table's callers (the
    # agents' names), by slot.
    partition_values: dict[str, list[str]] = Field(default_factory=dict)
    exact_refused: dict[str, int] = Field(default_factory=dict)

    @property
    def hit_rate(self) -> float:
        return self.hits / self.lookups if self.lookups else 0.0

    @property
    def pool(self) -> bool:
        """Whether these are a pool's counters (evidence shared by a template's tables)."""
        return self.key.startswith("pool:")

    @classmethod
    def from_counters(cls, key: str, c: dict[str, float]) -> TableStats:
        category, agent, model, pkey = _stats_parts(key)
        n = c.get("sim_n", 0.0)
        mean = c.get("sim_sum", 0.0) / n if n else None
        std = math.sqrt(max(0.0, c.get("sim_sumsq", 0.0) / n - (mean or 0.0) ** 2)) if n else None
        return cls(
            category=category,
            agent=agent,
            model=model,
            key=pkey,
            lookups=int(c.get("lookups", 0)),
            hits=int(c.get("hits", 0)),
            misses=int(c.get("misses", 0)),
            collects=int(c.get("collects", 0)),
            bypasses=int(c.get("bypasses", 0)),
            corrupt=int(c.get("corrupt", 0)),
            store_failures=int(c.get("store_failures", 0)),
            record_failures=int(c.get("record_failures", 0)),
            evicted=int(c.get("evicted", 0)),
            expired=int(c.get("expired", 0)),
            attempts=int(c.get("attempts", 0)),
            escalations=int(c.get("escalations", 0)),
            fallbacks=int(c.get("fallbacks", 0)),
            refused_opposites=int(c.get("refused_opposites", 0)),
            similarity_mean=mean,
            similarity_std=std,
            similarity_min=c.get("min_sim") if n else None,
            similarity_max=c.get("max_sim") if n else None,
            similarity_hist=[int(c.get(f"sim_bin_{i}", 0)) for i in range(HIST_BINS)],
            tokens_spent=int(c.get("tokens_spent", 0)),
            usd_spent=c.get("usd_spent", 0.0),
            tokens_avoided=int(c.get("tokens_avoided", 0)),
            usd_avoided=c.get("usd_avoided", 0.0),
            revise_tokens=int(c.get("revise_tokens", 0)),
            revise_usd=c.get("revise_usd", 0.0),
            embed_tokens=int(c.get("embed_tokens", 0)),
            embed_usd=c.get("embed_usd", 0.0),
            modifiers={
                k.removeprefix("modifier_"): int(v)
                for k, v in c.items()
                if k.startswith("modifier_")
            },
            verifications=int(c.get("vf_calls", 0)),
            verified_yes=int(c.get("vf_yes", 0)),
            verified_no=int(c.get("vf_no", 0)),
            verify_failed=int(c.get("vf_failed", 0)),
            verify_queued=int(c.get("vf_queued", 0)),
            verify_dropped=int(c.get("vf_dropped", 0)),
            verify_tokens=int(c.get("vf_tokens", 0)),
            verify_usd=c.get("vf_usd", 0.0),
            varied=int(c.get("varied", 0)),
            identical=int(c.get("identical", 0)),
            embedded_slots=embedded_from_counters(c, shared=not agent),
            partition_slots=partitions_from_counters(c, shared=not agent),
            partition_values=partition_values_from_counters(c),
            exact_refused={
                k.removeprefix(EXACT_REFUSED): int(v)
                for k, v in c.items()
                if k.startswith(EXACT_REFUSED)
            },
        )


class CacheStats(BaseModel):
    """Every table's counters, and their sum; for a bounded backend also the bounds in force
    and how many entries (and bytes of them) the cache holds."""

    tables: list[TableStats]
    #: Calls without cache options whose prompt matched no template, or more than one (with
    #: ``CachedLLM(..., templates=...)``): sent to the wrapped client uncached, in no table.
    unrecognised: int = 0
    #: Calls without cache options that a template learner (``learn_templates=True``) passed
    #: through uncached: their template was still being learned (or they fit none).
    learning: int = 0
    #: Of those, the answers filed once their template was learned (``llmcache/_late.py``):
    #: paid for while it was learned, kept for later calls to be served.
    filed_late: int = 0
    #: The templates learned from the traffic, most called first.
    learned: list[LearnedTemplateStats] = Field(default_factory=list)
    limits: Limits | None = None
    entries: int | None = None
    bytes: int | None = None

    @property
    def total(self) -> TableStats:
        total = TableStats(category="(all)", agent="", model="", key="")
        means: list[tuple[int, float]] = []
        for t in self.tables:
            for name in (
                "lookups", "hits", "misses", "collects", "bypasses", "corrupt",
                "store_failures", "record_failures", "evicted", "expired", "attempts",
                "escalations", "fallbacks", "refused_opposites", "tokens_spent",
                "tokens_avoided", "revise_tokens", "embed_tokens",
                "verifications", "verified_yes", "verified_no", "verify_failed",
                "verify_queued", "verify_dropped", "verify_tokens",
            ):  # fmt: skip
                setattr(total, name, getattr(total, name) + getattr(t, name))
            for name in ("usd_spent", "usd_avoided", "revise_usd", "embed_usd", "verify_usd"):
                setattr(total, name, getattr(total, name) + getattr(t, name))
            total.similarity_hist = [
                a + b for a, b in zip(total.similarity_hist, t.similarity_hist, strict=False)
            ]
            if t.similarity_mean is not None:
                means.append((t.lookups, t.similarity_mean))
        weight = sum(n for n, _ in means)
        if weight:
            total.similarity_mean = sum(n * m for n, m in means) / weight
        return total

    def render(self) -> str:
        """A plain-text table, one row per table and a total row."""
        header = (
            f"{'category':<26} {'agent':<16} {'lookups':>7} {'hits':>6} {'hit%':>6} "
            f"{'sim(cos)':>8} {'spent $':>10} {'avoided $':>10} {'tok spent':>10} "
            f"{'tok avoided':>11} {'evicted':>7} {'expired':>7}"
        )
        lines = [header, "-" * len(header)]
        rows = sorted(self.tables, key=lambda t: (t.category, t.agent))
        for t in [*rows, self.total]:
            sim = f"{t.similarity_mean:.3f}" if t.similarity_mean is not None else "-"
            lines.append(
                f"{t.category[:26]:<26} {t.agent[:16]:<16} {t.lookups:>7} {t.hits:>6} "
                f"{100 * t.hit_rate:>5.1f}% {sim:>8} {t.usd_spent:>10.6f} {t.usd_avoided:>10.6f} "
                f"{t.tokens_spent:>10} {t.tokens_avoided:>11} {t.evicted:>7} {t.expired:>7}"
            )
        budgeted = [t for t in rows if t.wrong_hit_budget is not None or t.labels]
        if budgeted:
            # Only when a budget is set or labels exist: the table above stays the whole
            # output otherwise. "self" is the model's own disagreement (pairs of fresh answers
            # to one prompt), "excess" the wrong-hit rate over it: what the budget bounds.
            lines.append(
                f"{'wrong-hit budget':<26} {'agent':<16} {'guard':>5} {'budget':>6} "
                f"{'thresh':>6} {'from':>9} {'labels':>7} {'wrong':>6} {'self [95% CI]':>20} "
                f"{'excess [95% CI]':>23} {'explored':>8} {'audits':>6} {'twins':>6} "
                f"{'budget $':>10}"
            )
            for t in budgeted:
                lines.append(_budget_row(t))
        verifying = [t for t in rows if t.verifications or t.verify_queued]
        if verifying:
            # Only when a verifier was used: the table above stays the whole output otherwise.
            lines.append(
                f"{'verification':<26} {'agent':<16} {'asked':>7} {'yes':>6} {'no':>6} "
                f"{'failed':>6} {'queued':>6} {'dropped':>7} {'tokens':>10} {'verify $':>10} "
                f"{'yes thresh':>10} {'yes labels':>10} {'yes wrong':>9} {'explored':>8}"
            )
            for t in verifying:
                vthresh = "-"
                if t.verified_threshold is not None:
                    vthresh = (
                        "closed" if t.verified_threshold > 1.0 else f"{t.verified_threshold:.3f}"
                    )
                lines.append(
                    f"{t.category[:26]:<26} {t.agent[:16]:<16} {t.verifications:>7} "
                    f"{t.verified_yes:>6} {t.verified_no:>6} {t.verify_failed:>6} "
                    f"{t.verify_queued:>6} {t.verify_dropped:>7} {t.verify_tokens:>10} "
                    f"{t.verify_usd:>10.6f} {vthresh:>10} {t.verified_labels:>10} "
                    f"{t.verified_labels_wrong:>9} {t.verified_explored:>8}"
                )
        refusing = [t for t in rows if t.refused_opposites]
        if refusing:
            # Only when the opposites gate refused a candidate: the table above stays the whole
            # output otherwise. Each refusal made a miss of a would-be hit.
            lines.append(
                f"{'refused as opposite':<26} {'agent':<16} {'refused':>7} {'of lookups':>10}"
            )
            for t in refusing:
                lines.append(
                    f"{t.category[:26]:<26} {t.agent[:16]:<16} {t.refused_opposites:>7} "
                    f"{t.lookups:>10}"
                )
        templated = [t for t in rows if t.embedded_slots is not None]
        if templated:
            # Only when templated calls chose their slots: which slots each table embeds.
            lines.append(
                f"{'embedded slots':<26} {'agent':<16} slots (deciding first); "
                "partitioning slots (values); lookups refused by an exact slot"
            )
            for t in templated:
                # Where no agent is given, the partitioning slots name whose calls share it.
                parts = ", ".join(f"{s} ({n})" for s, n in t.partition_slots.items()) or "-"
                for s, values in t.partition_values.items():
                    parts += f"; {s}: {', '.join(values)}"
                refused = ", ".join(f"{s}: {n}" for s, n in t.exact_refused.items()) or "-"
                lines.append(
                    f"{t.category[:26]:<26} {t.agent[:16]:<16} "
                    f"{', '.join(t.embedded_slots or ())}; {parts}; {refused}"
                )
        lines += _leading_lines(rows)
        if self.unrecognised:
            lines.append(
                f"unrecognised: {self.unrecognised} calls matched no template (or more than "
                "one) and went to the LLM uncached"
            )
        if self.learned or self.learning:
            # Only when templates are learned: the table above stays the whole output otherwise.
            lines += _learned_lines(self.learned, self.learning, self.filed_late)
        if self.limits is not None and self.limits.bounded:
            # Only for a bounded cache: the table above stays the whole output otherwise.
            lines.append(
                f"limits: {self.limits.describe()}; "
                f"holding {self.entries} entries, {self.bytes} bytes"
            )
        return "\n".join(lines)


def _leading_lines(rows: Sequence[TableStats]) -> list[str]:
    """The tables that refused close candidates by their leading words (``lead_words``): a
    table without slots shows it nowhere else. None: no lines."""
    leading = [t for t in rows if t.exact_refused.get(LEADING_WORDS)]
    if not leading:
        return []
    lines = [f"{'refused by leading words':<26} {'agent':<16} {'lookups':>7}"]
    for t in leading:
        n = t.exact_refused[LEADING_WORDS]
        lines.append(f"{t.category[:26]:<26} {t.agent[:16]:<16} {n:>7}")
    return lines


def _learned_lines(
    learned: Sequence[LearnedTemplateStats], learning: int, filed_late: int
) -> list[str]:
    """The learned templates' rows of :meth:`CacheStats.render`."""
    lines = [
        f"{'learned template':<26} {'calls':>7} {'hits':>6} partitioning slots; "
        "embedded slots; fixed text"
    ]
    for template in learned:
        parts = ", ".join(template.partition_slots) or "-"
        lines.append(
            f"{template.name[:26]:<26} {template.calls:>7} {template.hits:>6} {parts}; "
            f"{', '.join(template.embedded_slots) or '-'}; {template.text}"
        )
    lines.append(
        f"learning: {learning} calls passed through uncached while their template was being "
        f"learned; {filed_late} of their answers filed once it was learned"
    )
    return lines


def _interval(rate: float | None, ci: tuple[float, float] | None) -> str:
    if rate is None or ci is None:
        return "-"
    return f"{rate:.3f} [{ci[0]:.2f}, {ci[1]:.2f}]"


def _budget_row(t: TableStats) -> str:
    """One table's line of the wrong-hit budget block of :meth:`CacheStats.render`."""
    budget = f"{t.wrong_hit_budget:.3f}" if t.wrong_hit_budget is not None else "-"
    thresh = f"{t.threshold_in_force:.3f}" if t.threshold_in_force is not None else "-"
    if t.closed:
        thresh = "closed"
    source = t.threshold_source or "-"
    spent = t.explore_usd + t.twin_usd + t.audit_usd
    return (
        f"{t.category[:26]:<26} {t.agent[:16]:<16} {t.guard or '-':>5} {budget:>6} "
        f"{thresh:>6} {source:>9} {t.labels:>7} {t.labels_wrong:>6} "
        f"{_interval(t.self_disagreement, t.self_disagreement_ci):>20} "
        f"{_interval(t.excess, t.excess_ci):>23} {t.explored:>8} {t.audits:>6} {t.twins:>6} "
        f"{spent:>10.6f}"
    )


class Ledger:
    """Accumulates per-table counter deltas and adds them to the backend in batches."""

    def __init__(
        self, backend: CacheBackend, *, flush_every: int = 64, flush_seconds: float = 1.0
    ) -> None:
        self._backend = backend
        self._lock = threading.Lock()
        self._pending: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self._events = 0
        self._last_flush = time.monotonic()
        self._flush_every = flush_every
        self._flush_seconds = flush_seconds

    def record(self, info: CallInfo) -> None:
        """Count one call in its table's pending deltas; flushed in batches."""
        key = info_stats_key(info)
        plural = {"hit": "hits", "miss": "misses", "collect": "collects", "bypass": "bypasses"}
        delta: dict[str, float] = {plural[info.outcome]: 1}
        if info.outcome in ("hit", "miss"):
            delta["lookups"] = 1
        delta |= {
            "attempts": info.attempts,
            "escalations": int(info.escalated),
            "fallbacks": int(info.fallback),
            "corrupt": info.corrupt_dropped,
            "store_failures": int(info.store_failed),
            "record_failures": int(info.record_failed),
        }
        if info.refused_by == "opposites":
            delta["refused_opposites"] = 1
        if info.similarity is not None:
            s = info.similarity.cosine
            b = min(HIST_BINS - 1, max(0, int(info.similarity.normalized * HIST_BINS)))
            # "max_"/"min_" counters keep the extreme when merged (merge_counter).
            delta |= {"sim_n": 1, "sim_sum": s, "sim_sumsq": s * s, "max_sim": s, "min_sim": s}
            delta[f"sim_bin_{b}"] = 1
        if info.outcome == "hit" and info.modifier:
            delta[f"modifier_{info.modifier}"] = 1
        delta |= {
            "tokens_spent": info.usage.total_tokens,
            "usd_spent": info.cost_usd,
            "tokens_avoided": info.tokens_avoided,
            "usd_avoided": info.avoided_usd,
        }
        if info.revise_tokens:
            delta |= {"revise_tokens": info.revise_tokens, "revise_usd": info.revise_usd}
        delta |= {"embed_tokens": info.embed_tokens, "embed_usd": info.embed_usd}
        delta |= verify_counters(
            verified=info.verified,
            failed=info.verify_failed,
            tokens=info.verify_tokens,
            usd=info.verify_usd,
        )
        if info.verify_queued:
            delta["vf_queued"] = 1
        if info.pool_key:
            # The table names its pool, so that stats read the table with the pool's evidence.
            delta[f"{POOL_MARKER}{_stats_parts(info.pool_key)[3]}"] = 1
        if info.twin:
            # The second answer of a miss asked twice (also inside the spent figures).
            delta |= {
                "sd_twins": 1,
                "sd_twin_tokens": info.twin_tokens,
                "sd_twin_usd": info.twin_usd,
            }
        if info.outcome == "miss" and info.exact_refused:
            # A lookup an exact slot turned into a miss: what that slot costs (see _slots.py).
            delta[f"{EXACT_REFUSED}{info.exact_refused}"] = 1
        if info.outcome == "hit" and info.choices > 1:
            delta["varied"] = 1
        if info.outcome == "hit" and info.identical:
            delta["identical"] = 1
        if info.audited:
            # The audit guard's own figures (also inside the spent ones), apart from exploring.
            delta |= {
                "wa_audits": 1,
                "wa_audit_tokens": info.audit_tokens,
                "wa_audit_usd": info.audit_usd,
            }
        if info.explored:
            # Exploration's own figures (also inside the spent ones): what the budget costs.
            # A near miss the verifier said yes to is explored in the table's verified stream.
            delta |= {
                "wv_explored" if info.verified else "wh_explored": 1,
                "wh_explore_tokens": info.explore_tokens,
                "wh_explore_usd": info.explore_usd,
            }
        self.add(key, delta)

    def add(self, key: str, delta: Mapping[str, float]) -> None:
        """Add counters to a table's pending deltas (by its counters' key); flushed in batches."""
        with self._lock:
            merge_counters(self._pending[key], delta)
            self._events += 1
            due = (
                self._events >= self._flush_every
                or time.monotonic() - self._last_flush >= self._flush_seconds
            )
        if due:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            pending = {k: dict(v) for k, v in self._pending.items()}
            self._pending.clear()
            self._events = 0
            self._last_flush = time.monotonic()
        failed: dict[str, dict[str, float]] = {}
        for key, delta in pending.items():
            try:
                self._backend.add_stats(key, delta)
            except Exception:
                # Counting must never break a caller's call; keep the delta for the next flush.
                logger.warning("could not write cache counters; will retry", exc_info=True)
                failed[key] = delta
        if failed:
            with self._lock:
                for key, delta in failed.items():
                    merge_counters(self._pending[key], delta)

    def counters(self) -> dict[str, dict[str, float]]:
        """Every table's counters, this process's pending ones included."""
        self.flush()
        return self._backend.read_stats()

    def stats(self) -> CacheStats:
        counters = self.counters()
        tables = [TableStats.from_counters(k, c) for k, c in counters.items() if k != UNTABLED_KEY]
        return CacheStats(tables=tables, **untabled_counts(counters))

    def snapshot(self) -> dict[str, Any]:
        """Pending (unflushed) deltas, for debugging."""
        with self._lock:
            return {k: dict(v) for k, v in self._pending.items()}
