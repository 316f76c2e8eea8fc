"""The wrong-hit budget: a threshold per table, learned online from labels.

A table under a budget δ (``wrong_hit_budget``) keeps its *estimated* rate of wrong hits at or
under δ: it serves a hit only at a cosine at or above the lowest threshold ``t`` for which the
one-sided 95% Wilson upper bound of the wrong-hit rate among labelled lookups with best cosine
``≥ t`` is at most δ. The idea (a user error bound, thresholds learned from labels) is vCache's;
this is a reimplementation of it per table, not per entry, and shares no code with it.

Labels are ``(cosine of the nearest entry, did its answer answer the query)`` and cost little:

- a **miss** whose nearest entry could be served without the LLM (``read``, ``choose``) is
  labelled for free by comparing that entry's answer with the answer just paid for;
- a would-be **hit** is *explored* -- always until the table's labels prove a threshold, then
  with a small probability that decays with the table's explorations: the LLM is called as on
  a miss, the two answers compared, and the paid answer served (a paid answer is never
  dropped), so nothing is served before there is evidence for it;
- a served answer that fails the query's validator is a wrong label, and so is a caller's
  ``SemanticCache.feedback(info, ok=False)`` (``ok=True`` a correct one).

A verifier's verdict is not a label where answers can be compared: it is a guess, and a budget
kept on guesses holds only as far as the guesser is right. Instead, a table keeps a second
stream of labels, ``verified``: the labels of near misses the verifier said yes to. On the
request path a yes is a would-be hit of that stream, served only at cosines its own labels
prove within the budget and explored like any would-be hit until then, so the verifier's own
errors count against δ (``_cached_call.py``).

Labels are kept as counters of the table (``wh_ok_<bin>`` / ``wh_bad_<bin>``, bins of 0.005
cosine from 0.5 up), written through the ledger like every other counter: so they persist with
the table in every backend, add up across processes, and survive reopening. A process reads the
other processes' labels when it opens the table and every ``_RELOAD_S`` seconds after.

Comparing miss labels (every miss below the threshold) with explored ones (a sample above it)
over-weights the band just under the threshold. Where wrong hits grow rarer with similarity, as
they do, that makes the estimate for a lower threshold pessimistic, never optimistic.
"""

from __future__ import annotations

import json
import math
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ._ledger import Ledger, TableStats
from ._protocols import CacheBackend

__all__ = [
    "BIN_WIDTH",
    "EXACT_THRESHOLD",
    "LABEL_FLOOR",
    "NO_HIT_THRESHOLD",
    "STRICT_THRESHOLD",
    "BudgetBook",
    "Labels",
    "Stream",
    "explore_probability",
    "learned_threshold",
    "proven_threshold",
    "same_answer",
    "table_stats",
    "wilson_interval",
    "with_budget",
]

# Labels below this cosine are not kept: no threshold anyone would use lies under it, and
# keeping them would only add counters.
LABEL_FLOOR = 0.5
BIN_WIDTH = 0.005
N_BINS = round((1.0 - LABEL_FLOOR) / BIN_WIDTH)

# Until labels prove a threshold safe, a table under a budget considers would-be hits only at or
# above this cosine, and explores every one of them (serves none). When labels show even this
# to be over budget (its lower bound above δ), only exact repeats remain candidates; when they
# show that even near-identical prompts (the top bin, cosine ≥ 0.995) get answers that
# disagree more often than δ -- an LLM that samples answers its own prompt differently --
# nothing hits. Misses keep labelling the table, so it can earn its hits back.
STRICT_THRESHOLD = 0.97
EXACT_THRESHOLD = 1.0 - 1e-6  # identical texts embed to cosines a rounding error under 1
NO_HIT_THRESHOLD = 2.0  # above every cosine

# One-sided 95% (the bound the budget keeps) and two-sided 95% (the interval `stats` shows).
_Z_ONE_SIDED = 1.6449
_Z_TWO_SIDED = 1.96

# Exploration: until labels prove a threshold safe, every would-be hit is also paid for (an
# unproven threshold must not serve: with long shared templates or an LLM that samples, even
# cosine 0.97 can be wrong far more often than δ). Once proven, the probability is
# START / (1 + explored), decaying like 1/n and never under FLOOR (a table keeps being watched
# as its traffic drifts).
_EXPLORE_START = 5.0
_EXPLORE_FLOOR = 0.005

# How often a process re-reads labels other processes added.
_RELOAD_S = 30.0

# A table's two streams of labels: every labelled nearest entry (``hits``), and those of them
# a verifier said yes to (``verified``). Their counters' prefixes.
Stream = Literal["hits", "verified"]
_PREFIX: dict[str, str] = {"hits": "wh_", "verified": "wv_"}


def same_answer(cached: str, fresh: str) -> bool:
    """The default equivalence of two answers: equal JSON values when both parse as JSON (key
    order and spacing do not matter), else equal texts after collapsing whitespace and case.

    Strict on purpose: a paraphrased free-text answer counts as different, so the labels err
    towards "wrong" and the learned threshold towards strict. Give a category a looser
    ``equivalence`` (option identity, one field of a parsed answer, embedding similarity)
    where a different wording is still a right answer.
    """
    try:
        return bool(json.loads(cached) == json.loads(fresh))
    except (ValueError, TypeError):
        pass
    return " ".join(cached.split()).casefold() == " ".join(fresh.split()).casefold()


def wilson_interval(wrong: int, n: int, z: float = _Z_TWO_SIDED) -> tuple[float, float]:
    """The Wilson score interval of a rate ``wrong / n`` (``(0, 1)`` when ``n`` is 0)."""
    if n <= 0:
        return 0.0, 1.0
    p = wrong / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _bin(cosine: float) -> int | None:
    if cosine < LABEL_FLOOR:
        return None
    # A hair added so that a cosine on an edge (0.9) lands in the bin it starts, whatever the
    # rounding of the division.
    return min(N_BINS - 1, int((cosine - LABEL_FLOOR) / BIN_WIDTH + 1e-9))


def _edge(index: int) -> float:
    return round(LABEL_FLOOR + index * BIN_WIDTH, 6)


@dataclass
class Labels:
    """One table's labels, binned by cosine, and what exploring it has cost."""

    ok: list[int] = field(default_factory=lambda: [0] * N_BINS)
    bad: list[int] = field(default_factory=lambda: [0] * N_BINS)
    explored: int = 0
    explore_tokens: int = 0
    explore_usd: float = 0.0

    @classmethod
    def from_counters(cls, counters: Mapping[str, float], stream: Stream = "hits") -> Labels:
        """One stream's labels from a table's counters. Exploration spend is the table's, over
        both streams, and kept with ``hits``."""
        prefix = _PREFIX[stream]
        labels = cls(explored=int(counters.get(f"{prefix}explored", 0)))
        if stream == "hits":
            labels.explore_tokens = int(counters.get("wh_explore_tokens", 0))
            labels.explore_usd = float(counters.get("wh_explore_usd", 0.0))
        for name, value in counters.items():
            for start, bins in ((f"{prefix}ok_", labels.ok), (f"{prefix}bad_", labels.bad)):
                if name.startswith(start):
                    index = name.removeprefix(start)
                    if index.isdigit() and int(index) < N_BINS:
                        bins[int(index)] += int(value)
        return labels

    @staticmethod
    def delta(cosine: float, ok: bool, stream: Stream = "hits") -> dict[str, float]:
        """The counters one label adds (none below :data:`LABEL_FLOOR`)."""
        index = _bin(cosine)
        if index is None:
            return {}
        return {f"{_PREFIX[stream]}{'ok' if ok else 'bad'}_{index}": 1}

    def add(self, cosine: float, ok: bool) -> None:
        index = _bin(cosine)
        if index is not None:
            (self.ok if ok else self.bad)[index] += 1

    @property
    def count(self) -> int:
        return sum(self.ok) + sum(self.bad)

    @property
    def wrong(self) -> int:
        return sum(self.bad)

    def above(self, threshold: float) -> tuple[int, int]:
        """How many labels lie at or above ``threshold``, and how many of them are wrong."""
        start = _bin(max(threshold, LABEL_FLOOR))
        if start is None or threshold > 1.0:
            return 0, 0
        if threshold > _edge(start) + 1e-9:
            # Not on a bin edge: the bin it falls in holds labels on both sides of it, and a
            # bound must not count the ones below, so it starts at the next edge.
            start += 1
        ok, bad = sum(self.ok[start:]), sum(self.bad[start:])
        return ok + bad, bad


def proven_threshold(labels: Labels, budget: float) -> float | None:
    """The lowest bin edge whose labelled lookups at or above it have a one-sided 95% upper
    bound of the wrong rate at most ``budget``; ``None`` while no edge is proven so. Only the
    edges of bins holding labels qualify: below the lowest label there is no evidence."""
    n = wrong = 0
    best: float | None = None
    # From the top down, so that each edge's counts are the running sums.
    for index in range(N_BINS - 1, -1, -1):
        here = labels.ok[index] + labels.bad[index]
        n += here
        wrong += labels.bad[index]
        if here and wilson_interval(wrong, n, _Z_ONE_SIDED)[1] <= budget:
            best = _edge(index)
    return best


def learned_threshold(labels: Labels, budget: float) -> float:
    """The threshold a table under ``budget`` uses: :func:`proven_threshold` once labels prove
    one. Before that it is :data:`STRICT_THRESHOLD`, where every would-be hit is explored
    (:func:`explore_probability`), so nothing unproven is served;
    :data:`EXACT_THRESHOLD` once labels show the strict one over budget (its lower bound
    above ``budget``); :data:`NO_HIT_THRESHOLD` once they show even the top bin over budget.
    """
    best = proven_threshold(labels, budget)
    return best if best is not None else _unproven_threshold(labels, budget)


def _unproven_threshold(labels: Labels, budget: float) -> float:
    """The threshold in force while no edge is proven (see :func:`learned_threshold`)."""
    n, wrong = labels.above(STRICT_THRESHOLD)
    if n and wilson_interval(wrong, n, _Z_ONE_SIDED)[0] > budget:
        top = labels.ok[-1] + labels.bad[-1]
        if top and wilson_interval(labels.bad[-1], top, _Z_ONE_SIDED)[0] > budget:
            return NO_HIT_THRESHOLD
        return EXACT_THRESHOLD
    return STRICT_THRESHOLD


def explore_probability(explored: int, *, proven: bool = True) -> float:
    """How likely a would-be hit is to be explored, after ``explored`` explorations: always
    while the table's threshold is not ``proven`` (:func:`proven_threshold`)."""
    if not proven:
        return 1.0
    return max(_EXPLORE_FLOOR, min(1.0, _EXPLORE_START / (1 + max(0, explored))))


def with_budget(
    table: TableStats, labels: Labels, budget: float | None, verified: Labels | None = None
) -> TableStats:
    """``table`` with its labels, exploration spend and (under a budget) the threshold in force
    and the estimated wrong-hit rate at it, with its two-sided 95% interval; the same for its
    ``verified`` stream when given."""
    update: dict[str, Any] = {
        "labels": labels.count,
        "labels_wrong": labels.wrong,
        "explored": labels.explored,
        "explore_tokens": labels.explore_tokens,
        "explore_usd": labels.explore_usd,
    }
    if verified is not None:
        update |= {
            "verified_labels": verified.count,
            "verified_labels_wrong": verified.wrong,
            "verified_explored": verified.explored,
        }
    if budget is not None:
        threshold = learned_threshold(labels, budget)
        n, wrong = labels.above(threshold)
        update |= {
            "wrong_hit_budget": budget,
            "threshold_in_force": threshold,
            "closed": threshold >= NO_HIT_THRESHOLD,
            "labels_in_force": n,
            "wrong_rate": wrong / n if n else None,
            "wrong_rate_ci": wilson_interval(wrong, n) if n else None,
        }
        if verified is not None:
            vthreshold = learned_threshold(verified, budget)
            vn, vwrong = verified.above(vthreshold)
            update |= {
                "verified_threshold": vthreshold,
                "verified_wrong_rate": vwrong / vn if vn else None,
                "verified_wrong_rate_ci": wilson_interval(vwrong, vn) if vn else None,
            }
    return table.model_copy(update=update)


def table_stats(
    counters: Mapping[str, Mapping[str, float]],
    budget_for: Callable[[str], float | None] | None = None,
) -> list[TableStats]:
    """Every table's stats from the backend's counters, labels included; ``budget_for`` gives a
    category's budget (``None``: the budget is not known, as to ``python -m llmcache stats``)."""
    tables = []
    for key, table_counters in counters.items():
        table = TableStats.from_counters(key, dict(table_counters))
        budget = budget_for(table.category) if budget_for is not None else None
        tables.append(
            with_budget(
                table,
                Labels.from_counters(table_counters),
                budget,
                Labels.from_counters(table_counters, "verified"),
            )
        )
    return tables


class BudgetBook:
    """The labels of every table of one open cache, kept in memory and written as counters.

    Shared by every view of the cache (like the ledger). Thresholds are recomputed only when a
    table's labels change, so that a lookup pays a dictionary read. Every method takes the
    table's counters' key and the stream of labels it is about (``hits`` unless said).
    """

    def __init__(self, backend: CacheBackend, ledger: Ledger, seed: int | None = None) -> None:
        self._backend = backend
        self._ledger = ledger
        self._lock = threading.Lock()
        self._tables: dict[tuple[str, Stream], Labels] = {}
        # (table, stream, budget) -> (threshold in force, whether labels prove it)
        self._thresholds: dict[tuple[str, Stream, float], tuple[float, bool]] = {}
        self._loaded_at: float | None = None
        self._random = random.Random(seed)  # seeded: a replayed stream explores the same calls

    def _load(self) -> None:
        """(Re)read every table's labels: this process's are flushed first, so none is lost or
        counted twice."""
        self._ledger.flush()
        counters = self._backend.read_stats()
        streams: tuple[Stream, ...] = ("hits", "verified")
        tables = {
            (key, stream): Labels.from_counters(c, stream)
            for key, c in counters.items()
            for stream in streams
        }
        with self._lock:
            self._tables = tables
            self._thresholds.clear()
            self._loaded_at = time.monotonic()

    def _table(self, key: str, stream: Stream) -> Labels:
        loaded = self._loaded_at
        if loaded is None or time.monotonic() - loaded >= _RELOAD_S:
            self._load()
        with self._lock:
            return self._tables.setdefault((key, stream), Labels())

    def labels(self, key: str, stream: Stream = "hits") -> Labels:
        """A table's labels as this process knows them (a copy)."""
        table = self._table(key, stream)
        with self._lock:
            return Labels(
                ok=list(table.ok),
                bad=list(table.bad),
                explored=table.explored,
                explore_tokens=table.explore_tokens,
                explore_usd=table.explore_usd,
            )

    def _state(self, key: str, budget: float, stream: Stream) -> tuple[Labels, float, bool]:
        table = self._table(key, stream)
        with self._lock:
            cached = self._thresholds.get((key, stream, budget))
            if cached is None:
                best = proven_threshold(table, budget)
                if best is None:
                    cached = (_unproven_threshold(table, budget), False)
                else:
                    cached = (best, True)
                self._thresholds[(key, stream, budget)] = cached
            return table, cached[0], cached[1]

    def threshold(self, key: str, budget: float, stream: Stream = "hits") -> float:
        """The threshold in force for a table's stream under ``budget``."""
        return self._state(key, budget, stream)[1]

    def explore(self, key: str, budget: float, stream: Stream = "hits") -> bool:
        """Whether this would-be hit under ``budget`` is explored (counted as one exploration
        of its stream when it is): always while labels prove no threshold."""
        table, _, proven = self._state(key, budget, stream)
        with self._lock:
            chosen = self._random.random() < explore_probability(table.explored, proven=proven)
            if chosen:
                table.explored += 1
            return chosen

    def add(self, key: str, cosine: float, ok: bool, stream: Stream = "hits") -> None:
        """Record one label for a table's stream: in memory now, in its counters with the
        ledger's next flush."""
        delta = Labels.delta(cosine, ok, stream)
        if not delta:
            return
        table = self._table(key, stream)
        with self._lock:
            table.add(cosine, ok)
            for cached in [k for k in self._thresholds if k[:2] == (key, stream)]:
                del self._thresholds[cached]
        self._ledger.add(key, delta)
