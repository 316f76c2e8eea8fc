"""The audit guard's statistics: anytime-valid bounds on a table's excess, and the threshold
they leave in force.

The proving guard (``_budget.py``) serves nothing until labels prove a threshold; the audit
guard serves from the first candidate at a starting threshold and lets evidence take away
what it shows to be bad. Its evidence is re-read after every audit, so a bound that is valid
only at one planned look would be met by chance sooner or later (re-testing a 95% Wilson bound
after every label is how the proving guard came to hold its δ in two runs of ten). The bounds
here are **confidence sequences**: valid at every look at once.

For a rate (the share of audited hits whose answer was not acceptable, or of pairs of fresh
answers that disagreed) the sequence is the beta-binomial mixture martingale's (Robbins'
method of mixtures): after ``n`` Bernoulli outcomes with ``k`` ones,

    M_n(p) = B(a + k, b + n - k) / B(a, b) / (p^k (1 - p)^(n - k))

is a nonnegative martingale under the true ``p``, so by Ville's inequality it ever exceeds
``1/α`` with probability at most ``α``; the set of ``p`` where it has not is a ``1 - α``
confidence sequence (Howard, Ramdas, McAuliffe and Sekhon, 2021). ``a = b = 1/2`` (Jeffreys)
keeps it tight for the small rates a good table has. The set is an interval around ``k / n``,
found by bisection on each side.

The excess is a difference of two rates, the served answers' wrong rate ``r`` and the model's
self-disagreement ``s``: its lower bound is ``low(r) - high(s)``, each side at ``α / 2``, and
valid at every look because each side is. For a model that samples, ``s`` is unknown until
pairs of its fresh answers show it (``high(s)`` is 1 without pairs), so a table is not caught
for variability that may be the model's own; for a deterministic request (``temperature=0``)
``s`` is 0 and ``r``'s own sequence at ``α`` decides. (The proving guard credits no
variability nobody saw: there the cautious side is the other one.)

A table is tested at its starting threshold and then at each bin edge above it, in that
order, each at the full ``α``, and stands at the first one whose lower bound is not above δ:
fail-open, a table keeps serving until evidence *shows* it over budget, then moves up to
where the evidence does not; where even the top bin is shown over, it closes. Testing a fixed
order of hypotheses one after another, each only once all before it were rejected, keeps the
level of the whole family (a fixed-sequence procedure): a threshold within budget can be
passed over only if the first such threshold in the order was shown over, which its own
sequence allows with probability ``α`` at most, however long the table lives.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

__all__ = [
    "AUDIT_ALPHA",
    "AUDIT_FLOOR",
    "AUDIT_START",
    "AuditState",
    "audit_probability",
    "excess_sequence",
    "rate_sequence",
    "rate_sequence_below",
]

#: The level of every audit guard's bound: the chance that a table within budget is ever
#: shown over it (and so tightened), over its whole life.
AUDIT_ALPHA = 0.05

# How often a would-be hit is audited: START / (1 + audits so far), never under FLOOR. A
# table's first two would-be hits are audited (its evidence is thinnest), then ever fewer, so
# that after n would-be hits about sqrt(2 START n) were audited (some 30 of 245, 140 of 10,000)
# until the floor: one in 50. START = 5 audited some 50 of 245 on the shared real agent and
# cost 4 to 6 points more of the cut (docs/wrong-hit-budget.md) for no faster catch counted in
# audits: what a bad table needs is a number of audited labels, whenever they come.
AUDIT_START = 2.0
AUDIT_FLOOR = 0.02

_PRIOR = 0.5  # Jeffreys' Beta(1/2, 1/2)


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


@lru_cache(maxsize=65536)
def rate_sequence(ones: int, n: int, alpha: float) -> tuple[float, float]:
    """The ``1 - alpha`` confidence sequence of a Bernoulli rate after ``ones`` of ``n``:
    valid however often it is looked at (see the module documentation). ``(0, 1)`` when
    ``n`` is 0."""
    if n <= 0:
        return 0.0, 1.0
    k, f = ones, n - ones
    # log of the mixture's marginal likelihood, the part of log M_n(p) that does not move
    mixture = _log_beta(_PRIOR + k, _PRIOR + f) - _log_beta(_PRIOR, _PRIOR)
    level = math.log(1.0 / alpha)

    def log_m(p: float) -> float:
        likelihood = (k * math.log(p) if k else 0.0) + (f * math.log1p(-p) if f else 0.0)
        return mixture - likelihood

    centre = k / n

    def edge(lo: float, hi: float, inside_is_lo: bool) -> float:
        # log_m is convex with its minimum at the centre: below `level` inside the sequence,
        # above it outside; bisect for the crossing between an inside and an outside point.
        for _ in range(60):
            mid = (lo + hi) / 2
            if (log_m(mid) < level) == inside_is_lo:
                lo = mid
            else:
                hi = mid
        return lo if inside_is_lo else hi

    tiny = 1e-12
    low = 0.0 if k == 0 or log_m(tiny) < level else edge(tiny, centre, inside_is_lo=False)
    high = 1.0 if f == 0 or log_m(1 - tiny) < level else edge(centre, 1 - tiny, inside_is_lo=True)
    return max(0.0, low), min(1.0, high)


def rate_sequence_below(ones: int, n: int, rate: float, alpha: float) -> bool:
    """Whether the ``1 - alpha`` confidence sequence of a Bernoulli rate after ``ones`` of
    ``n`` lies wholly below ``rate`` (its upper end under it): :func:`rate_sequence`'s own
    test, read at one point rather than bisected for the end, so that a guard re-testing many
    thresholds after every label pays one evaluation each."""
    if rate > 1.0:
        return True  # every rate is under it
    if n <= 0 or rate <= 0.0 or ones / n >= rate:
        return False  # (0, 1) without outcomes; the centre is never outside
    k, f = ones, n - ones
    if rate == 1.0:
        return True  # f > 0 here: a rate of 1 has likelihood 0
    mixture = _log_beta(_PRIOR + k, _PRIOR + f) - _log_beta(_PRIOR, _PRIOR)
    likelihood = (k * math.log(rate) if k else 0.0) + (f * math.log1p(-rate) if f else 0.0)
    return mixture - likelihood >= math.log(1.0 / alpha)


def excess_sequence(
    wrong: int, n: int, disagree: int, pairs: int, alpha: float, *, samples: bool = True
) -> tuple[float, float]:
    """The ``1 - alpha`` confidence sequence of ``wrong / n - disagree / pairs``: each rate's
    own sequence at ``alpha / 2``. A model that ``samples`` has an unknown self-disagreement
    until its pairs show it (with none, anywhere in [0, 1]), so its excess is shown over a
    budget only once its pairs bound how much of the wrong rate is its own variability; a
    deterministic one (``samples=False``: ``temperature=0``) disagrees with itself never, and
    its excess is the wrong rate's own sequence at ``alpha``. Without labels, ``(-1, 1)``."""
    if n <= 0:
        return -1.0, 1.0
    if not samples:
        return rate_sequence(wrong, n, alpha)
    r_low, r_high = rate_sequence(wrong, n, alpha / 2)
    s_low, s_high = rate_sequence(disagree, pairs, alpha / 2)
    return max(-1.0, r_low - s_high), min(1.0, r_high - s_low)


def audit_probability(audits: int) -> float:
    """How likely a would-be hit is to be audited after ``audits`` audits of its evidence."""
    return max(AUDIT_FLOOR, min(1.0, AUDIT_START / (1 + max(0, audits))))


@dataclass(frozen=True)
class AuditState:
    """Where an audited table stands: the ``threshold`` in force (above every cosine when
    ``closed``), whether evidence moved it up from the start (``tightened``), and the labels,
    wrong ones and the excess's two-sided ``1 - alpha`` sequence at it (``None`` without
    labels there; when closed, at the top bin, which showed even it over budget)."""

    threshold: float
    tightened: bool
    closed: bool
    labels: int
    wrong: int
    excess: tuple[float, float] | None
