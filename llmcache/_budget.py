"""The wrong-hit budget: a threshold per table, learned online from labels, that bounds the
*excess* of wrong hits over the model's own variability.

A model that samples disagrees with itself: asked one prompt twice, it often answers two ways
that its own equivalence would not call the same. So "the cached answer differs from a freshly
paid one" is not, by itself, a wrong hit. A table under a budget δ (``wrong_hit_budget``) serves
a hit only at a cosine at or above the lowest threshold ``t`` whose labels *prove*

    excess(t) = P(a hit at cosine ≥ t is not acceptable) - P(a second fresh answer is not)

at most δ. The second rate is the model's **self-disagreement**, measured on *pairs* of fresh
answers to one prompt under the same equivalence; for a deterministic upstream it is 0, and the
excess is the plain wrong-hit rate: one rule, not two modes.

**The proof is anytime-valid.** A table re-decides after every label: a bound valid only at
one planned look (a one-sided 95% Wilson or Newcombe bound, as this was first written) is met by
chance sooner or later, and served over δ in most runs of a labelled paraphrase stream (issue
44; ``benchmarks/bench_guard_promise.py``). So an edge is proven only where the upper end of the
excess's **confidence sequence** (``_audit.py``'s mixture sequences, the audit guard's own) is
at most δ, at the edge's level (the wrong rate's sequence and the self-disagreement's at half
of it each), and an edge *passes* when it is proven and its own bin holds labels. Which edges
are tested, in which order and at which level, is fixed before any label by the table's
configured threshold ``start`` (the one it would serve at without a guard):

- **the descent**: from ``start`` rounded up to an edge (never looser than configured),
  downward, each edge at ``PROVE_ALPHA / 2``; the threshold is the last edge passed before the
  first that does not. A failing edge stops it, and so does an empty bin (below the lowest
  label there is no evidence): the descent never passes over an edge it could not choose;
- **the edges above** ``start``, tried only when ``start`` itself does not pass: the lowest
  that passes, those edges sharing ``PROVE_ALPHA / 2`` (each at that over their number).

Why that keeps the promise at ``PROVE_ALPHA`` over a table's whole life, however often it is
looked at: an edge's sequence covers that edge's true excess at every look at once, except with
probability its level (Ville's inequality on the mixture martingale). In the descent, let
``e*`` be the first edge of its fixed order whose true excess is over δ: the descent ends at or
below ``e*`` only by passing ``e*``, which needs ``e*``'s sequence to miss its excess at some
look, probability at most ``PROVE_ALPHA / 2`` however many looks; every edge it ends at above
``e*`` is within δ. The other edges need no share of the level, since the descent stops at the
first that fails. Above ``start`` the lowest of several edges that pass is a choice among them,
so they split their half (Bonferroni): with probability at least ``1 - PROVE_ALPHA / 2`` none
whose excess is over δ ever passes. Together, at most ``PROVE_ALPHA``. A caller that knows no
configured threshold tests all ``N_BINS`` edges, each at ``PROVE_ALPHA / N_BINS``, and takes
the lowest that passes (Bonferroni over all): sound too, but a proof at a hundredth of the level
takes more labels. The promise is per start: a table asked under several thresholds (a call's
own ``threshold``) runs one descent for each. The self-disagreement is credited through its own
sequence's lower end, so a model whose pairs are few or never disagreed gets no credit (no rules
on top: the level already holds however few the counts). The idea of a user error bound with
thresholds learned from labels is vCache's; this is a reimplementation per table, relative to
the model's variability, and shares no code with it.

Labels are ``(cosine of the nearest entry, was its answer acceptable)`` and cost little:

- a **miss** whose nearest entry could be served without the LLM (``read``, ``choose``) is
  labelled for free by comparing that entry's answer with the answer just paid for;
- a would-be **hit** is *explored* -- always until labels prove a threshold, then with a small
  probability that decays with the explorations: the LLM is called as on a miss, the two
  answers compared, and the paid answer served (a paid answer is never dropped), so nothing is
  served before there is evidence for it;
- a served answer that fails the query's validator is a wrong label, and so is a caller's
  ``SemanticCache.feedback(info, ok=False)`` (``ok=True`` a correct one).

Pairs come from labels whose cached entry answered the very same prompt (an explored hit or a
miss on an identical prompt: two fresh answers), and, while a pool has fewer pairs than its
estimate needs, from **twins**: a sampled share of misses (explored hits included, unless
their comparison was already a pair) asked twice.

**Pooling.** Tables that share a category and output parameters (one template, many agents)
add every label and pair to their *pool* as well. A table serves at the lowest threshold that
either its own labels prove, or its pool's labels prove while its own do not show it over
budget there (their lower bound above δ): a table with little evidence of its own borrows its
template's, and one that is worse than the rest is held back whatever the pool says. Only
evidence is pooled; answers never leave their table. Pooling assumes that a template's tables
share one relation between cosine and acceptability (docs/wrong-hit-budget.md).

A verifier's verdict is not a label where answers can be compared: it is a guess, and a budget
kept on guesses holds only as far as the guesser is right. Instead, a table keeps a second
stream of labels, ``verified``: the labels of near misses the verifier said yes to, learned and
explored by the same rule (``_serving.py``).

Labels are kept as counters of the table and of its pool (``wh_ok_<bin>`` / ``wh_bad_<bin>``,
bins of 0.005 cosine from 0.5 up; pairs as ``sd_same`` / ``sd_diff``), written through the
ledger like every other counter: so they persist in every backend, add up across processes and
survive reopening. A table's counters name its pool (``max_pool_<key>``, written with every
call's counters), so that ``stats`` can read a table with its pool's evidence.

Comparing miss labels (every miss below the threshold) with explored ones (a sample above it)
over-weights the band just under the threshold. Where wrong hits grow rarer with similarity, as
they do, that makes the estimate for a lower threshold pessimistic, never optimistic.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ._audit import (
    AUDIT_ALPHA,
    AuditState,
    audit_probability,
    excess_sequence,
    rate_sequence,
    rate_sequence_below,
)
from ._equivalence import same_answer
from ._ledger import POOL_MARKER, UNTABLED_KEY, Ledger, TableStats
from ._protocols import CacheBackend
from ._types import Guard

logger = logging.getLogger("llmcache")

__all__ = [
    "BIN_WIDTH",
    "EXACT_THRESHOLD",
    "LABEL_FLOOR",
    "NO_HIT_THRESHOLD",
    "PROVE_ALPHA",
    "STRICT_THRESHOLD",
    "Z_ONE_SIDED",
    "AuditState",
    "BudgetBook",
    "Decision",
    "Labels",
    "Stream",
    "TableEvidence",
    "audit_state",
    "closes",
    "decide",
    "excess_interval",
    "explore_probability",
    "learned_threshold",
    "paired_excess_interval",
    "pairs_wanted",
    "pool_of",
    "proven_threshold",
    "proves",
    "same_answer",
    "start_index",
    "table_stats",
    "wilson_interval",
    "with_budget",
]

# The counter that keeps a table caught by the audit guard (a ``max_`` counter: merged by max).
SHOWN_OVER = "max_wa_shown_over"

# Labels below this cosine are not kept: no threshold anyone would use lies under it, and
# keeping them would only add counters.
LABEL_FLOOR = 0.5
BIN_WIDTH = 0.005
N_BINS = round((1.0 - LABEL_FLOOR) / BIN_WIDTH)

# Until labels prove a threshold safe, a table under a budget considers would-be hits only at or
# above this cosine, and explores every one of them (serves none). When labels show even this
# to be over budget (the lower bound of its excess above δ), only exact repeats remain
# candidates; when they show that even near-identical prompts (the top bin, cosine ≥ 0.995)
# get answers worse than the model's own second answers by more than δ, nothing hits. Misses
# keep labelling the table, so it can earn its hits back.
STRICT_THRESHOLD = 0.97
EXACT_THRESHOLD = 1.0 - 1e-6  # identical texts embed to cosines a rounding error under 1
NO_HIT_THRESHOLD = 2.0  # above every cosine


def closes(threshold: float) -> bool:
    """Whether a threshold in force closes its table (no cosine reaches it)."""
    return threshold >= NO_HIT_THRESHOLD


# One-sided 95% (whether labels show a table over budget; the bound tune keeps, Figures.bound)
# and two-sided 95% (the interval `stats` shows).
Z_ONE_SIDED = 1.6449
_Z_TWO_SIDED = 1.96

# Exploration: until labels prove a threshold safe, every would-be hit is also paid for (an
# unproven threshold must not serve). Once proven, the probability is START / (1 + explored),
# decaying like 1/n and never under FLOOR (a table keeps being watched as its traffic drifts).
_EXPLORE_START = 5.0
_EXPLORE_FLOOR = 0.005

# Twins: a miss (or an explored hit that made no pair) is asked twice (with probability
# ``twin_rate``) while its pool has fewer pairs than its estimate can use: at least TWIN_MIN
# (enough to see a sampling model disagree with itself at all), and, once it has, as many as the
# labels at the threshold being tested (a difference of two rates is estimated best with as many
# of each), up to TWIN_MAX. A pool whose pairs never disagreed needs no more: its
# self-disagreement bound is 0 whatever more agreeing pairs come.
TWIN_MIN = 20
TWIN_MAX = 2000

#: The proving guard's level: the chance, over a table's whole life and however often it is
#: re-tested, that it ever serves at a threshold whose excess is over δ. Half of it is the
#: descent's from the configured threshold (each edge at ``PROVE_ALPHA / 2``), half the edges'
#: above it; without a configured threshold each of the ``N_BINS`` edges is proven at
#: ``PROVE_ALPHA / N_BINS`` (see the module documentation). Whether labels *show* a table over
#: budget (a lower bound above δ, which only ever stops hits) is read at one-sided 95%, as before.
PROVE_ALPHA = 0.05

# How often a process re-reads labels other processes added.
_RELOAD_S = 30.0

# A table's two streams of labels: every labelled nearest entry (``hits``), and those of them
# a verifier said yes to (``verified``). Their counters' prefixes.
Stream = Literal["hits", "verified"]
_PREFIX: dict[str, str] = {"hits": "wh_", "verified": "wv_"}


def wilson_interval(wrong: int, n: int, z: float = _Z_TWO_SIDED) -> tuple[float, float]:
    """The Wilson score interval of a rate ``wrong / n`` (``(0, 1)`` when ``n`` is 0)."""
    if n <= 0:
        return 0.0, 1.0
    p = wrong / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _rate_difference(
    first: tuple[int, int], second: tuple[int, int], z: float, phi: float = 0.0
) -> tuple[float, float]:
    """Newcombe's interval of ``first`` rate minus ``second`` rate (each ``(count, n)``), from
    the Wilson interval of each, with ``phi`` their correlation (0: independent samples).

    Without a first sample it is ``(-1, 1)``. Without a second, or one that never counted, the
    second rate is taken as 0: no credit for variability nobody saw, so the interval is the
    first rate's own Wilson interval."""
    (k1, n1), (k2, n2) = first, second
    if n1 <= 0:
        return -1.0, 1.0
    p1 = k1 / n1
    low1, high1 = wilson_interval(k1, n1, z)
    if n2 <= 0 or k2 <= 0:
        return low1, high1
    p2 = k2 / n2
    low2, high2 = wilson_interval(k2, n2, z)
    below = (p1 - low1) ** 2 - 2 * phi * (p1 - low1) * (high2 - p2) + (high2 - p2) ** 2
    above = (high1 - p1) ** 2 - 2 * phi * (high1 - p1) * (p2 - low2) + (p2 - low2) ** 2
    low = p1 - p2 - math.sqrt(max(below, 0.0))
    high = p1 - p2 + math.sqrt(max(above, 0.0))
    return max(-1.0, low), min(1.0, high)


def excess_interval(
    wrong: int, n: int, disagree: int, pairs: int, z: float = _Z_TWO_SIDED
) -> tuple[float, float]:
    """The interval of ``wrong / n - disagree / pairs``: Newcombe's hybrid score interval for
    a difference of two independent proportions, from the Wilson interval of each.

    Without pairs, or with pairs that never disagreed, the second rate is taken as 0: no credit
    for variability nobody saw, and a model that has not disagreed with itself is held to the
    plain wrong-hit rate both ways. The interval is then the first rate's own Wilson interval,
    which makes the budget of a deterministic model exactly the plain budget. Without labels
    it is ``(-1, 1)``. (What proves a threshold is :func:`proves`: a confidence
    sequence, valid however often it is re-tested.)
    """
    return _rate_difference((wrong, n), (disagree, pairs), z)


def paired_excess_interval(
    both: int, served_only: int, second_only: int, neither: int, z: float = _Z_TWO_SIDED
) -> tuple[float, float]:
    """The interval of the excess measured on the same queries: of ``n`` served queries,
    ``both`` had a served answer and a second answer of the model that were unacceptable,
    ``served_only`` only the served one, ``second_only`` only the model's second answer, and
    ``neither`` neither. The excess is ``(served_only - second_only) / n``.

    Newcombe's method 10 (1998) for a difference of paired proportions: each rate's Wilson
    interval, combined with the correlation between the two on the same queries, which a
    difficult query that both get wrong makes positive and the interval narrower than the
    unpaired one (:func:`excess_interval`) over the same counts. As there, a second answer
    that was never unacceptable earns no credit: the interval is the served rate's own.
    """
    n = both + served_only + second_only + neither
    # The phi coefficient of the 2x2 table, with Newcombe's continuity correction of a
    # positive association (a negative one is kept as it is: it only widens the interval).
    cross: float = both * neither - served_only * second_only
    if cross > 0:
        cross = max(cross - n / 2, 0.0)
    margins = (both + served_only) * (second_only + neither) * (both + second_only)
    margins *= served_only + neither
    phi = cross / math.sqrt(margins) if margins > 0 else 0.0
    return _rate_difference((both + served_only, n), (both + second_only, n), z, phi)


def proves(
    wrong: int,
    n: int,
    disagree: int,
    pairs: int,
    budget: float,
    level: float = PROVE_ALPHA / N_BINS,
) -> bool:
    """Whether ``wrong`` of ``n`` labels at an edge prove its excess within ``budget``: the
    upper end of its confidence sequence (:func:`~llmcache._audit.excess_sequence`, the wrong
    rate's upper end less the self-disagreement's lower end, each at half of ``level``) is at
    most ``budget``. ``level`` is the chance, over every look, that this one edge is proven
    while its excess is over ``budget``: the edge's share of :data:`PROVE_ALPHA`, which
    :func:`decide` gives (by default the share of an edge among all ``N_BINS``)."""
    half = level / 2
    credit = rate_sequence(disagree, pairs, half)[0] if disagree else 0.0
    return rate_sequence_below(wrong, n, budget + credit, half)


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
    """One table's (or pool's) labels, binned by cosine; its pairs of fresh answers; and what
    exploring and twins have cost."""

    ok: list[int] = field(default_factory=lambda: [0] * N_BINS)
    bad: list[int] = field(default_factory=lambda: [0] * N_BINS)
    explored: int = 0
    explore_tokens: int = 0
    explore_usd: float = 0.0
    pairs_same: int = 0
    pairs_differ: int = 0
    twins: int = 0
    twin_tokens: int = 0
    twin_usd: float = 0.0
    audits: int = 0
    audit_tokens: int = 0
    audit_usd: float = 0.0
    # The highest starting threshold the audit guard's evidence has shown over budget (0:
    # none): once shown, it stays shown, so a table caught does not drift back to serving
    # there as later labels come in (the confidence sequence's "ever" is what holds at α).
    shown_over: float = 0.0

    @classmethod
    def from_counters(cls, counters: Mapping[str, float], stream: Stream = "hits") -> Labels:
        """One stream's labels from a table's counters. Exploration spend, pairs and twins are
        the table's, over both streams, and kept with ``hits``."""
        prefix = _PREFIX[stream]
        labels = cls(explored=int(counters.get(f"{prefix}explored", 0)))
        if stream == "hits":
            labels.explore_tokens = int(counters.get("wh_explore_tokens", 0))
            labels.explore_usd = float(counters.get("wh_explore_usd", 0.0))
            labels.pairs_same = int(counters.get("sd_same", 0))
            labels.pairs_differ = int(counters.get("sd_diff", 0))
            labels.twins = int(counters.get("sd_twins", 0))
            labels.twin_tokens = int(counters.get("sd_twin_tokens", 0))
            labels.twin_usd = float(counters.get("sd_twin_usd", 0.0))
            labels.audits = int(counters.get("wa_audits", 0))
            labels.shown_over = float(counters.get(SHOWN_OVER, 0.0))
            labels.audit_tokens = int(counters.get("wa_audit_tokens", 0))
            labels.audit_usd = float(counters.get("wa_audit_usd", 0.0))
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

    @staticmethod
    def pair_delta(same: bool) -> dict[str, float]:
        """The counters one pair of fresh answers adds."""
        return {"sd_same" if same else "sd_diff": 1}

    def copy(self) -> Labels:
        return Labels(
            ok=list(self.ok),
            bad=list(self.bad),
            explored=self.explored,
            explore_tokens=self.explore_tokens,
            explore_usd=self.explore_usd,
            pairs_same=self.pairs_same,
            pairs_differ=self.pairs_differ,
            twins=self.twins,
            twin_tokens=self.twin_tokens,
            twin_usd=self.twin_usd,
            audits=self.audits,
            shown_over=self.shown_over,
            audit_tokens=self.audit_tokens,
            audit_usd=self.audit_usd,
        )

    def add(self, cosine: float, ok: bool) -> None:
        index = _bin(cosine)
        if index is not None:
            (self.ok if ok else self.bad)[index] += 1

    def add_pair(self, same: bool) -> None:
        if same:
            self.pairs_same += 1
        else:
            self.pairs_differ += 1

    @property
    def count(self) -> int:
        return sum(self.ok) + sum(self.bad)

    @property
    def wrong(self) -> int:
        return sum(self.bad)

    @property
    def pairs(self) -> int:
        return self.pairs_same + self.pairs_differ

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

    def excess(self, threshold: float, pairs: Labels, z: float) -> tuple[float, float] | None:
        """The interval of the excess at ``threshold`` (self-disagreement from ``pairs``'s
        pairs), or ``None`` without labels there."""
        n, wrong = self.above(threshold)
        if not n:
            return None
        return excess_interval(wrong, n, pairs.pairs_differ, pairs.pairs, z)


@dataclass(frozen=True)
class Decision:
    """The threshold a table serves at under a budget: whether labels prove it (``proven``),
    and whose labels did (``source``: ``"table"``, ``"pool"``, or ``""`` while unproven)."""

    threshold: float
    proven: bool
    source: Literal["table", "pool", ""] = ""


def _cumulative(labels: Labels) -> list[tuple[int, int, int]]:
    """Per bin index: (labels in the bin, labels at or above its edge, wrong among them)."""
    out: list[tuple[int, int, int]] = [(0, 0, 0)] * N_BINS
    n = wrong = 0
    for index in range(N_BINS - 1, -1, -1):
        here = labels.ok[index] + labels.bad[index]
        n += here
        wrong += labels.bad[index]
        out[index] = (here, n, wrong)
    return out


def start_index(start: float) -> int:
    """The bin edge a proving guard's descent starts from: ``start`` (a table's configured
    threshold) rounded *up* to an edge, so the first edge tested is never looser than
    configured; a start above the top edge starts at the top edge, one under the lowest at
    the lowest (no label lies below it)."""
    steps = math.ceil((start - LABEL_FLOOR) / BIN_WIDTH - 1e-9)
    return min(N_BINS - 1, max(0, steps))


def decide(
    table: Labels,
    budget: float,
    pool: Labels | None = None,
    pairs: Labels | None = None,
    start: float | None = None,
) -> Decision:
    """The threshold a table serves at under ``budget``, from its own labels and, when it
    pools, its pool's (see the module documentation). The self-disagreement is measured on
    the pairs of ``pairs`` (by default the pool's when pooling, else the table's own).

    An edge *passes* when :func:`proves` proves it from labels at or above it and its own bin
    holds labels (below the lowest label there is no evidence): the table's labels, or its
    pool's where the table's do not show it over budget (a pool's proof is about the pool's
    traffic). Which edges are tested, and at what level, is fixed before any label, so that
    the threshold may be re-decided after every label and the promise still holds at
    :data:`PROVE_ALPHA` (see the module documentation):

    - with ``start`` (the table's configured threshold): a **descent** from ``start`` rounded
      up to an edge (:func:`start_index`), edge by edge downward, each at ``PROVE_ALPHA / 2``;
      the threshold is the last edge passed before the first that does not pass (an empty
      bin stops the descent: it is never skipped). Only when ``start`` itself does not pass,
      the lowest edge *above* it that passes, those edges sharing the other half
      (Bonferroni);
    - without (a caller that knows no configured threshold): the lowest edge that passes
      among all ``N_BINS``, each at ``PROVE_ALPHA / N_BINS``.

    With none passed the table stays at :data:`STRICT_THRESHOLD`, where every would-be hit is
    explored (:func:`explore_probability`), so nothing unproven is served;
    :data:`EXACT_THRESHOLD` once labels show the strict one over budget (the lower bound of
    its excess above ``budget``); :data:`NO_HIT_THRESHOLD` once they show even the top bin
    over budget.
    """
    if pairs is None:
        pairs = pool if pool is not None else table
    p_n, p_d = pairs.pairs, pairs.pairs_differ
    own = _cumulative(table)
    shared = _cumulative(pool) if pool is not None else None

    def passes(index: int, level: float) -> Decision | None:
        here, n, wrong = own[index]
        if here and proves(wrong, n, p_d, p_n, budget, level):
            return Decision(_edge(index), True, "table")
        if shared is None:
            return None
        pool_here, pool_n, pool_wrong = shared[index]
        shown_over = n > 0 and excess_interval(wrong, n, p_d, p_n, Z_ONE_SIDED)[0] > budget
        if pool_here and not shown_over and proves(pool_wrong, pool_n, p_d, p_n, budget, level):
            return Decision(_edge(index), True, "pool")
        return None

    def lowest_passing(indices: range, level: float) -> Decision | None:
        best: Decision | None = None
        for index in indices:
            best = passes(index, level) or best
        return best

    best: Decision | None = None
    if start is None:
        best = lowest_passing(range(N_BINS - 1, -1, -1), PROVE_ALPHA / N_BINS)
    else:
        first = start_index(start)
        for index in range(first, -1, -1):
            passed = passes(index, PROVE_ALPHA / 2)
            if passed is None:
                break
            best = passed
        above = N_BINS - 1 - first
        if best is None and above:
            best = lowest_passing(range(N_BINS - 1, first, -1), PROVE_ALPHA / 2 / above)
    if best is not None:
        return best
    return Decision(_unproven_threshold(table, budget, pool, pairs), False)


def _unproven_threshold(table: Labels, budget: float, pool: Labels | None, pairs: Labels) -> float:
    """The threshold in force while no edge is proven (see :func:`decide`)."""

    def over(labels: Labels, threshold: float) -> bool:
        interval = labels.excess(threshold, pairs, Z_ONE_SIDED)
        return interval is not None and interval[0] > budget

    def shown_over(threshold: float) -> bool:
        return over(table, threshold) or (pool is not None and over(pool, threshold))

    if shown_over(STRICT_THRESHOLD):
        top = _edge(N_BINS - 1)
        return NO_HIT_THRESHOLD if shown_over(top) else EXACT_THRESHOLD
    return STRICT_THRESHOLD


def audit_state(
    table: Labels,
    budget: float,
    start: float,
    pool: Labels | None = None,
    pairs: Labels | None = None,
    alpha: float = AUDIT_ALPHA,
    *,
    samples: bool = True,
) -> AuditState:
    """Where a table under the audit guard stands (see ``_audit.py``): at its starting
    threshold until its evidence shows the excess there above ``budget`` (fail-open); then at
    the lowest bin edge above it whose evidence keeps the excess within ``budget`` (its upper
    bound at most ``budget``), or closed while none does. Every bound is anytime-valid at
    ``alpha``. A table's own labels decide, or its pool's where its own do not decide the
    other way. ``samples``: whether the table's requests sample (see
    :func:`~llmcache._audit.excess_sequence`)."""
    if pairs is None:
        pairs = pool if pool is not None else table
    p_n, p_d = pairs.pairs, pairs.pairs_differ
    first = _bin(max(start, LABEL_FLOOR))
    edges = [start]
    if first is not None:
        edges += [_edge(i) for i in range(first + 1, N_BINS) if _edge(i) > start + 1e-9]
    level = alpha

    def sequence(labels: Labels, threshold: float) -> tuple[int, int, tuple[float, float]]:
        n, wrong = labels.above(threshold)
        return n, wrong, excess_sequence(wrong, n, p_d, p_n, level, samples=samples)

    n, wrong, own = sequence(table, start)
    over = start <= table.shown_over + 1e-9 or own[0] > budget
    if not over and pool is not None and own[1] > budget:
        over = sequence(pool, start)[2][0] > budget
    if not over:
        return AuditState(
            threshold=start, tightened=False, closed=False, labels=n, wrong=wrong, excess=own
        )
    # Shown over at its start: the table serves again only where its evidence (or its pool's,
    # where its own do not show it over there) keeps the excess within the budget. The edges
    # share the level (Bonferroni): the lowest of several proven is a choice among them.
    level = alpha / max(1, len(edges) - 1)
    for threshold in edges[1:]:
        n, wrong, own = sequence(table, threshold)
        within = own[1] <= budget
        if not within and pool is not None and own[0] <= budget:
            within = sequence(pool, threshold)[2][1] <= budget
        if n and within:
            return AuditState(
                threshold=threshold, tightened=True, closed=False, labels=n, wrong=wrong, excess=own
            )
    level = alpha
    n, wrong, own = sequence(table, start)
    return AuditState(
        threshold=NO_HIT_THRESHOLD,
        tightened=True,
        closed=True,
        labels=n,
        wrong=wrong,
        excess=own if n else None,
    )


def proven_threshold(labels: Labels, budget: float, start: float | None = None) -> float | None:
    """The bin edge that ``labels`` alone prove within ``budget`` (their own pairs as the
    self-disagreement; from ``start``, as :func:`decide` reads it); ``None`` while no edge is
    proven so."""
    decision = decide(labels, budget, start=start)
    return decision.threshold if decision.proven else None


def learned_threshold(
    labels: Labels, budget: float, pool: Labels | None = None, start: float | None = None
) -> float:
    """The threshold a table under ``budget`` uses (:func:`decide`'s)."""
    return decide(labels, budget, pool, start=start).threshold


def explore_probability(explored: int, *, proven: bool = True) -> float:
    """How likely a would-be hit is to be explored, after ``explored`` explorations: always
    while the threshold is not ``proven``."""
    if not proven:
        return 1.0
    return max(_EXPLORE_FLOOR, min(1.0, _EXPLORE_START / (1 + max(0, explored))))


def pairs_wanted(pairs: Labels, labels_in_force: int) -> bool:
    """Whether an estimate with these pairs, tested against ``labels_in_force`` labels, would
    gain from more pairs (see TWIN_MIN)."""
    if pairs.pairs < TWIN_MIN:
        return True
    if pairs.pairs_differ == 0:
        return False
    return pairs.pairs < min(TWIN_MAX, max(TWIN_MIN, labels_in_force))


def with_budget(
    table: TableStats,
    labels: Labels,
    budget: float | None,
    verified: Labels | None = None,
    pool: Labels | None = None,
    *,
    guard: Guard = "prove",
    start: float | None = None,
) -> TableStats:
    """``table`` with its labels, pairs, exploration and twin spend, and (under a budget) the
    threshold in force, the estimated wrong-hit rate and excess at it with their two-sided 95%
    intervals; the same for its ``verified`` stream when given. ``pool``: its pool's
    evidence, when the table pools. ``start``: the table's configured threshold, where the
    audit guard starts and the proving guard's proof descends from (``None``: not known, and
    the proving guard's threshold is read over all edges, :func:`decide`)."""
    pairs = pool if pool is not None else labels
    update: dict[str, Any] = {
        "labels": labels.count,
        "labels_wrong": labels.wrong,
        "explored": labels.explored,
        "explore_tokens": labels.explore_tokens,
        "explore_usd": labels.explore_usd,
        "pairs": labels.pairs,
        "twins": labels.twins,
        "twin_tokens": labels.twin_tokens,
        "twin_usd": labels.twin_usd,
        "audits": labels.audits,
        "audit_tokens": labels.audit_tokens,
        "audit_usd": labels.audit_usd,
    }
    if pairs.pairs:
        update |= {
            "self_disagreement": pairs.pairs_differ / pairs.pairs,
            "self_disagreement_ci": wilson_interval(pairs.pairs_differ, pairs.pairs),
            "self_disagreement_pairs": pairs.pairs,
        }
    if pool is not None:
        update |= {"pool_labels": pool.count}
    if verified is not None:
        update |= {
            "verified_labels": verified.count,
            "verified_labels_wrong": verified.wrong,
            "verified_explored": verified.explored,
        }
    if budget is not None and guard == "audit" and start is not None:
        state = audit_state(labels, budget, start, pool, pairs)
        update |= {
            "guard": guard,
            "wrong_hit_budget": budget,
            "threshold_in_force": state.threshold,
            "threshold_source": "tightened" if state.tightened else "start",
            "closed": state.closed,
            "labels_in_force": state.labels,
            "wrong_rate": state.wrong / state.labels if state.labels else None,
            "wrong_rate_ci": rate_sequence(state.wrong, state.labels, AUDIT_ALPHA)
            if state.labels
            else None,
            "excess": (
                state.wrong / state.labels
                - (pairs.pairs_differ / pairs.pairs if pairs.pairs else 0.0)
            )
            if state.labels
            else None,
            "excess_ci": state.excess,
        }
    elif budget is not None:
        update["guard"] = "prove"
        decision = decide(labels, budget, pool, pairs, start)
        evidence = pool if decision.source == "pool" and pool is not None else labels
        # Unproven, the evidence that matters is the one at the strict threshold (what keeps
        # it closed, or will open it).
        tested = decision.threshold if decision.proven else STRICT_THRESHOLD
        n, wrong = evidence.above(tested)
        excess = evidence.excess(tested, pairs, _Z_TWO_SIDED)
        update |= {
            "wrong_hit_budget": budget,
            "threshold_in_force": decision.threshold,
            "threshold_source": decision.source or None,
            "closed": closes(decision.threshold),
            "labels_in_force": n,
            "wrong_rate": wrong / n if n else None,
            "wrong_rate_ci": wilson_interval(wrong, n) if n else None,
            "excess": (wrong / n - pairs.pairs_differ / pairs.pairs if pairs.pairs else wrong / n)
            if n
            else None,
            "excess_ci": excess,
        }
        if verified is not None:
            vdecision = decide(verified, budget, pairs=pairs)
            vn, vwrong = verified.above(vdecision.threshold)
            update |= {
                "verified_threshold": vdecision.threshold,
                "verified_wrong_rate": vwrong / vn if vn else None,
                "verified_wrong_rate_ci": wilson_interval(vwrong, vn) if vn else None,
            }
    return table.model_copy(update=update)


def pool_of(counters: Mapping[str, float]) -> str | None:
    """The pool key a table's counters name, if any."""
    for name in counters:
        if name.startswith(POOL_MARKER):
            return name.removeprefix(POOL_MARKER)
    return None


def table_stats(
    counters: Mapping[str, Mapping[str, float]],
    guard_for: Callable[[str], tuple[Guard, float | None, float | None]] | None = None,
) -> list[TableStats]:
    """Every table's stats from the backend's counters, labels included (each table read with
    its pool's evidence, when it has a pool); pools themselves are not tables and are left
    out. ``guard_for`` gives a category's guard, budget and starting threshold
    (``None``: they are not known, as to
    ``python -m llmcache stats``)."""
    pools: dict[str, Mapping[str, float]] = {}
    for key, table_counters in counters.items():
        stats_key = TableStats.from_counters(key, {})
        if stats_key.pool:
            pools[stats_key.key] = table_counters
    tables = []
    for key, table_counters in counters.items():
        if key == UNTABLED_KEY:
            continue
        table = TableStats.from_counters(key, dict(table_counters))
        if table.pool:
            continue
        guard, budget, start = (
            guard_for(table.category) if guard_for is not None else ("prove", None, None)
        )
        pool_key = pool_of(table_counters)
        pool_counters = pools.get(pool_key) if pool_key is not None else None
        tables.append(
            with_budget(
                table,
                Labels.from_counters(table_counters),
                budget,
                Labels.from_counters(table_counters, "verified"),
                Labels.from_counters(pool_counters) if pool_counters is not None else None,
                guard=guard,
                start=start,
            )
        )
    return tables


class BudgetBook:
    """The labels of every table (and pool) of one open cache, kept in memory and written as
    counters.

    Shared by every view of the cache (like the ledger). Thresholds are recomputed only when a
    table's or its pool's labels change, so that a lookup pays a dictionary read. Every method
    takes the table's counters' key, its pool's (``None``: the table does not pool) and the
    stream of labels it is about (``hits`` unless said).
    """

    def __init__(self, backend: CacheBackend, ledger: Ledger, seed: int | None = None) -> None:
        self._backend = backend
        self._ledger = ledger
        self._lock = threading.Lock()
        self._tables: dict[tuple[str, Stream], Labels] = {}
        # (table, pool, stream, budget, start) -> the decision in force
        self._decisions: dict[tuple[str, str | None, Stream, float, float | None], Decision] = {}
        # (table, pool, budget, start) -> where the table stands under the audit guard
        self._audits: dict[tuple[str, str | None, float, float, bool], AuditState] = {}
        self._loaded_at: float | None = None
        self._random = random.Random(seed)  # seeded: a replayed stream draws the same calls
        # Twins draw apart from explorations, so that asking twins never moves which would-be
        # hits are explored (a deterministic model's stream explores as it did without twins).
        self._twin_random = random.Random(None if seed is None else f"twins:{seed}")

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
            self._decisions.clear()
            self._audits.clear()
            self._loaded_at = time.monotonic()

    def _table(self, key: str, stream: Stream) -> Labels:
        loaded = self._loaded_at
        if loaded is None or time.monotonic() - loaded >= _RELOAD_S:
            self._load()
        with self._lock:
            return self._tables.setdefault((key, stream), Labels())

    def labels(self, key: str, stream: Stream = "hits") -> Labels:
        """A table's (or pool's) labels as this process knows them (a copy)."""
        table = self._table(key, stream)
        with self._lock:
            return table.copy()

    def decision(
        self,
        key: str,
        budget: float,
        stream: Stream = "hits",
        pool: str | None = None,
        start: float | None = None,
    ) -> Decision:
        """The threshold in force for a table's stream under ``budget``, and its proof;
        ``start``: the table's configured threshold, where its proof descends from
        (:func:`decide`)."""
        table = self._table(key, stream)
        shared = self._table(pool, stream) if pool is not None else None
        # The model's variability is one whatever the stream: the pairs live with ``hits``.
        pairs = self._table(pool if pool is not None else key, "hits")
        with self._lock:
            cached = self._decisions.get((key, pool, stream, budget, start))
            if cached is None:
                cached = decide(table, budget, shared, pairs, start)
                self._decisions[(key, pool, stream, budget, start)] = cached
            return cached

    def threshold(
        self,
        key: str,
        budget: float,
        stream: Stream = "hits",
        pool: str | None = None,
        start: float | None = None,
    ) -> float:
        """The threshold in force for a table's stream under ``budget`` (from ``start``)."""
        return self.decision(key, budget, stream, pool, start).threshold

    def explore(
        self,
        key: str,
        budget: float,
        stream: Stream = "hits",
        pool: str | None = None,
        start: float | None = None,
    ) -> bool:
        """Whether this would-be hit under ``budget`` is explored (counted as one exploration
        of the table's stream, and of its pool's, when it is): always while labels prove no
        threshold; once proven, ever rarer as the evidence that proved it (the table's or its
        pool's) is explored."""
        decision = self.decision(key, budget, stream, pool, start)
        table = self._table(key, stream)
        shared = self._table(pool, stream) if pool is not None else None
        with self._lock:
            watched = shared if decision.source == "pool" and shared is not None else table
            chosen = self._random.random() < explore_probability(
                watched.explored, proven=decision.proven
            )
            if chosen:
                table.explored += 1
                if shared is not None:
                    shared.explored += 1
        if chosen and pool is not None:
            # The table's own count is written with its call's counters (Ledger.record).
            self._ledger.add(pool, {f"{_PREFIX[stream]}explored": 1})
        return chosen

    def audit_state(
        self, key: str, budget: float, start: float, pool: str | None = None, *, samples: bool
    ) -> AuditState:
        """Where a table under the audit guard stands (:func:`audit_state`)."""
        table = self._table(key, "hits")
        shared = self._table(pool, "hits") if pool is not None else None
        pairs = shared if shared is not None else table
        with self._lock:
            cached = self._audits.get((key, pool, budget, start, samples))
            if cached is None:
                cached = audit_state(table, budget, start, shared, pairs, samples=samples)
                self._audits[(key, pool, budget, start, samples)] = cached
            caught = cached.tightened and table.shown_over < start
            if caught:
                table.shown_over = start
        if caught:
            # Written like every counter, so that other processes keep the table caught too.
            self._ledger.add(key, {SHOWN_OVER: start})
        return cached

    def audit(self, key: str, pool: str | None = None) -> bool:
        """Whether this would-be hit of a table under the audit guard is audited (counted as
        an audit of the table, and of its pool): ever rarer as the evidence it feeds (the
        pool's, when pooling) has been audited (:func:`audit_probability`)."""
        table = self._table(key, "hits")
        shared = self._table(pool, "hits") if pool is not None else None
        with self._lock:
            watched = shared if shared is not None else table
            chosen = self._random.random() < audit_probability(watched.audits)
            if chosen:
                table.audits += 1
                if shared is not None:
                    shared.audits += 1
        if chosen and pool is not None:
            # The table's own count is written with its call's counters (Ledger.record).
            self._ledger.add(pool, {"wa_audits": 1})
        return chosen

    def twin(
        self,
        key: str,
        budget: float,
        rate: float,
        pool: str | None = None,
        start: float | None = None,
    ) -> bool:
        """Whether this miss under ``budget`` is also asked a second time, for a pair of fresh
        answers: with probability ``rate`` while the pairs (the pool's, when pooling) are too
        few for the estimate (:func:`pairs_wanted`)."""
        if rate <= 0.0:
            return False
        decision = self.decision(key, budget, "hits", pool, start)
        table = self._table(key, "hits")
        pairs = self._table(pool, "hits") if pool is not None else table
        evidence = pairs if pool is not None else table
        threshold = decision.threshold if decision.threshold <= 1.0 else STRICT_THRESHOLD
        with self._lock:
            wanted = pairs_wanted(pairs, evidence.above(threshold)[0])
            return wanted and self._twin_random.random() < rate

    def _write(self, key: str, pool: str | None, delta: Mapping[str, float]) -> None:
        self._ledger.add(key, delta)
        if pool is not None:
            self._ledger.add(pool, delta)

    def _changed(self, key: str, pool: str | None, streams: tuple[Stream, ...]) -> None:
        """Forget the decisions that the changed labels of a table and its pool feed: the
        table's own, and every table's of the pool (called with the lock held)."""
        stale = [
            k
            for k in self._decisions
            if k[2] in streams and (k[0] == key or (pool is not None and k[1] == pool))
        ]
        for cached in stale:
            del self._decisions[cached]
        if "hits" in streams:
            for audited in [k for k in self._audits if k[0] == key or (pool and k[1] == pool)]:
                del self._audits[audited]

    def add(
        self, key: str, cosine: float, ok: bool, stream: Stream = "hits", pool: str | None = None
    ) -> None:
        """Record one label for a table's stream (and its pool's): in memory now, in their
        counters with the ledger's next flush."""
        delta = Labels.delta(cosine, ok, stream)
        if not delta:
            return
        table = self._table(key, stream)
        shared = self._table(pool, stream) if pool is not None else None
        with self._lock:
            table.add(cosine, ok)
            if shared is not None:
                shared.add(cosine, ok)
            self._changed(key, pool, (stream,))
        self._write(key, pool, delta)

    def add_pair(self, key: str, same: bool, pool: str | None = None) -> None:
        """Record one pair of fresh answers to one prompt (``same``: the equivalence called
        them the same) for a table and its pool."""
        table = self._table(key, "hits")
        shared = self._table(pool, "hits") if pool is not None else None
        with self._lock:
            table.add_pair(same)
            if shared is not None:
                shared.add_pair(same)
            # Pairs are the self-disagreement of both streams.
            self._changed(key, pool, ("hits", "verified"))
        self._write(key, pool, Labels.pair_delta(same))


class TableEvidence:
    """One call's view of its table's evidence: the book, keyed by the table's counters and its
    pool's (``None``: the table does not pool). Keeping a budget must never break a call, so
    every step that fails (a store that cannot be read) logs and goes on with ``default``."""

    def __init__(self, book: BudgetBook, key: str, pool: str | None) -> None:
        self.book = book
        self.key = key
        self.pool = pool

    def _safely(self, step: Callable[[], Any], default: Any) -> Any:
        try:
            return step()
        except Exception:
            logger.warning("wrong-hit budget unavailable for this call", exc_info=True)
            return default

    def threshold(
        self,
        budget: float,
        stream: Stream = "hits",
        *,
        default: float,
        start: float | None = None,
    ) -> float:
        result: float = self._safely(
            lambda: self.book.threshold(self.key, budget, stream, self.pool, start), default
        )
        return result

    def explore(
        self,
        budget: float,
        stream: Stream = "hits",
        *,
        default: bool,
        start: float | None = None,
    ) -> bool:
        result: bool = self._safely(
            lambda: self.book.explore(self.key, budget, stream, self.pool, start), default
        )
        return result

    def audit_state(self, budget: float, start: float, *, samples: bool) -> AuditState | None:
        result: AuditState | None = self._safely(
            lambda: self.book.audit_state(self.key, budget, start, self.pool, samples=samples),
            None,
        )
        return result

    def audit(self) -> bool:
        result: bool = self._safely(lambda: self.book.audit(self.key, self.pool), False)
        return result

    def twin(self, budget: float, rate: float, start: float | None = None) -> bool:
        result: bool = self._safely(
            lambda: self.book.twin(self.key, budget, rate, self.pool, start), False
        )
        return result

    def label(self, cosine: float, ok: bool, stream: Stream = "hits") -> None:
        self._safely(lambda: self.book.add(self.key, cosine, ok, stream, self.pool), None)

    def pair(self, same: bool) -> None:
        self._safely(lambda: self.book.add_pair(self.key, same, self.pool), None)
