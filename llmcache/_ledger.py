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
from typing import Any

from pydantic import BaseModel, Field

from ._config import Limits
from ._protocols import CacheBackend
from ._types import CallInfo, Partition, Usage

__all__ = ["CacheStats", "Ledger", "Price", "PriceTable", "TableStats"]

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


def stats_key(partition: Partition) -> str:
    """The counters' key: readable without the store (``python -m llmcache stats``)."""
    return json.dumps(
        [partition.category, partition.agent, partition.model, partition.key], ensure_ascii=False
    )


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

    @property
    def hit_rate(self) -> float:
        return self.hits / self.lookups if self.lookups else 0.0

    @classmethod
    def from_counters(cls, key: str, c: dict[str, float]) -> TableStats:
        try:
            category, agent, model, pkey = json.loads(key)
        except (ValueError, TypeError):
            category, agent, model, pkey = key, "", "", key
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
        )


class CacheStats(BaseModel):
    """Every table's counters, and their sum; for a bounded backend also the bounds in force
    and how many entries (and bytes of them) the cache holds."""

    tables: list[TableStats]
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
                "escalations", "tokens_spent",
                "tokens_avoided", "revise_tokens", "embed_tokens",
            ):  # fmt: skip
                setattr(total, name, getattr(total, name) + getattr(t, name))
            for name in ("usd_spent", "usd_avoided", "revise_usd", "embed_usd"):
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
        if self.limits is not None and self.limits.bounded:
            # Only for a bounded cache: the table above stays the whole output otherwise.
            lines.append(
                f"limits: {self.limits.describe()}; "
                f"holding {self.entries} entries, {self.bytes} bytes"
            )
        return "\n".join(lines)


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

    def record(
        self,
        partition: Partition,
        info: CallInfo,
        *,
        revise_usage: Usage | None = None,
        revise_usd: float = 0.0,
        embed_tokens: int = 0,
        embed_usd: float = 0.0,
        tokens_avoided: int = 0,
    ) -> None:
        key = stats_key(partition)
        with self._lock:
            c = self._pending[key]
            plural = {"hit": "hits", "miss": "misses", "collect": "collects", "bypass": "bypasses"}
            c[plural[info.outcome]] += 1
            if info.outcome in ("hit", "miss"):
                c["lookups"] += 1
            c["attempts"] += info.attempts
            c["escalations"] += int(info.escalated)
            c["corrupt"] += info.corrupt_dropped
            c["store_failures"] += int(info.store_failed)
            c["record_failures"] += int(info.record_failed)
            if info.similarity is not None:
                s = info.similarity.cosine
                c["sim_n"] += 1
                c["sim_sum"] += s
                c["sim_sumsq"] += s * s
                # "max_"/"min_" keys are merged by max/min in the store, not summed.
                c["max_sim"] = max(c.get("max_sim", -2.0), s)
                c["min_sim"] = min(c.get("min_sim", 2.0), s)
                b = min(HIST_BINS - 1, max(0, int(info.similarity.normalized * HIST_BINS)))
                c[f"sim_bin_{b}"] += 1
            if info.outcome == "hit" and info.modifier:
                c[f"modifier_{info.modifier}"] += 1
            c["tokens_spent"] += info.usage.total_tokens
            c["usd_spent"] += info.cost_usd
            c["tokens_avoided"] += tokens_avoided
            c["usd_avoided"] += info.avoided_usd
            if revise_usage is not None:
                c["revise_tokens"] += revise_usage.total_tokens
                c["revise_usd"] += revise_usd
            c["embed_tokens"] += embed_tokens
            c["embed_usd"] += embed_usd
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
                    c = self._pending[key]
                    for name, value in delta.items():
                        if name.startswith("max_"):
                            c[name] = max(c.get(name, value), value)
                        elif name.startswith("min_"):
                            c[name] = min(c.get(name, value), value)
                        else:
                            c[name] += value

    def stats(self) -> CacheStats:
        self.flush()
        tables = [TableStats.from_counters(k, c) for k, c in self._backend.read_stats().items()]
        return CacheStats(tables=tables)

    def snapshot(self) -> dict[str, Any]:
        """Pending (unflushed) deltas, for debugging."""
        with self._lock:
            return {k: dict(v) for k, v in self._pending.items()}
