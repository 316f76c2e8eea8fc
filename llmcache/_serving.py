"""Whether a looked-up candidate is served: the one place a hit is decided.

One cached call asks once per lookup, with the candidates the table gave
(:meth:`Serving.rule`), and gets a :class:`Ruling`: **serve** this candidate, **explore** it
(the LLM is asked as on a miss, the caller gets the fresh answer, and the cached one is judged
against it), or **miss**. What goes into that ruling lives here and nowhere else:

- the threshold in force: the static one, or the one a wrong-hit budget learned
  (``_budget.py`` keeps the labels and proves thresholds; this module asks it);
- serve mode's "best candidate, any similarity";
- exploration of would-be hits while (and after) a budget proves a threshold;
- variety: a hit drawn from the answers stored for the nearest entry's very prompt;
- near misses handed to a verifier, on the request path (its verdict is part of the ruling)
  or queued off it;
- the table's evidence that every call leaves: labels of its nearest entry, pairs of fresh
  answers, and whether a miss is asked twice (a twin) for such a pair;
- the opposites gate: a candidate whose text means the opposite of the query's (a negation,
  an antonym, another number: ``_opposites.py``) is never served, whatever its cosine.

The orchestrator (``_cached_call.py``) runs what the ruling says -- the hit step, the LLM, the
store -- and reports back what happened (:meth:`Serving.unusable`, :meth:`Serving.exploring`,
:meth:`Serving.answered`, :meth:`Serving.paired`), so that no decision is taken there and
nothing here calls the LLM, stores or records. Keeping a budget must never break a call:
every step on its evidence that fails logs and goes on (``TableEvidence``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ._budget import NO_HIT_THRESHOLD, STRICT_THRESHOLD, TableEvidence, same_answer
from ._cache import SemanticCache
from ._config import ResolvedPolicy
from ._errors import ConfigurationError
from ._opposites import opposition
from ._shapes import Shape
from ._types import Adapted, CallInfo, Candidate, Mode, Verdict
from ._verify import VerifyJob, ask_verifier, verdict_cost

__all__ = ["VARIETY_BAND", "VARIETY_K", "Action", "Ruling", "Serving"]

logger = logging.getLogger("llmcache")

#: How far under the nearest entry's cosine a lookup still fetches candidates when variety may
#: draw from the answers to one prompt (their vectors are equal: only rounding lies between).
VARIETY_BAND = 1e-4
#: How many neighbours a lookup fetches when variety may draw from several.
VARIETY_K = 8

Action = Literal["serve", "explore", "audit", "miss"]


@dataclass(frozen=True)
class Ruling:
    """What one lookup's candidates come to: ``serve``, ``explore`` or ``audit``
    ``candidate``, or ``miss`` (``candidate`` is then ``None``). An audit is run as an
    exploration is (the LLM asked, its answer served, the cached one judged against it), and
    counted and priced apart: it is the audit guard's, not the proving guard's."""

    action: Action
    candidate: Candidate | None = None


_MISS = Ruling("miss")

#: What a cached candidate becomes for this query when no LLM may be asked (a label must cost
#: nothing): the hit step without ``call``; ``None`` when its modifier needs the LLM.
AdaptFree = Callable[[Candidate], "Adapted | None"]


class Serving:
    """The serving decision of one call, and the evidence it leaves in its table.

    ``info`` is the call's record: the ruling writes into it what a reader of the call needs
    (similarity, threshold in force, budget, exploration, the verifier's verdict, variety).
    """

    def __init__(
        self,
        cache: SemanticCache,
        policy: ResolvedPolicy,
        info: CallInfo,
        stats_key: str,
        shape: Shape,
        messages: list[dict[str, Any]],
        *,
        samples: bool,
    ) -> None:
        self.cache = cache
        self.policy = policy
        self.info = info
        self.stats_key = stats_key
        self.shape = shape
        # The query's messages: a label whose entry answered these very messages is a pair.
        self.messages = messages
        # Whether the request samples (no temperature=0): its model's answers vary, which the
        # audit guard must allow for, and a hit may then be drawn from several (variety).
        self.samples = samples
        self.variety = policy.variety if policy.variety is not None else samples
        # The wrong-hit evidence of the call's table (and pool): labels, pairs, thresholds.
        self.evidence = TableEvidence(cache.budget, stats_key, info.pool_key)
        # The would-be hit being explored (its candidate and what it became), or the nearest
        # entry of a miss; either is labelled against the answer the LLM gives.
        self.explored: tuple[Candidate, Adapted] | None = None
        self._near: Candidate | None = None
        # With a verifier: the entries this call already asked about (a second lookup after
        # another thread's miss must not ask again), and the near miss to verify off the
        # request path once the miss is answered.
        self._asked_about: set[int] = set()
        self._verify_later: Candidate | None = None

    @property
    def lookup_k(self) -> int | None:
        """How many neighbours the lookup fetches (``None``: the cache's ``k``)."""
        return max(self.cache.config.k, VARIETY_K) if self.variety else None

    @property
    def lookup_band(self) -> float:
        """How far under the nearest the lookup fetches candidates (see ``VARIETY_BAND``)."""
        return VARIETY_BAND if self.variety else 0.0

    # -- the one entry per lookup ------------------------------------------------------------

    def rule(self, candidates: list[Candidate], mode: Mode) -> Ruling:
        """Serve, explore or miss, given a lookup's ``candidates`` (best first) in ``mode``;
        whatever would be served, explored or audited passes the opposites gate first."""
        ruling = self._gated(self._rule(candidates, mode))
        # Whatever served it: an answer to this very prompt is the model's own answer to it
        # (replay and tune count such hits at their excess of 0, docs/promise.md).
        served = ruling.candidate if ruling.action == "serve" else None
        self.info.identical = served is not None and served.entry.messages == self.messages
        return ruling

    def _gated(self, ruling: Ruling) -> Ruling:
        """``ruling``, unless the opposites gate refuses its candidate (a miss then)."""
        if ruling.candidate is None or not self.policy.opposites_gate:
            return ruling
        found = opposition(self.info.embed_text or "", ruling.candidate.entry.embed_text)
        # A second look (after waiting for another thread's miss) says what it found itself.
        self.info.refused_by = "opposites" if found else None
        self.info.refused_pair = found.describe() if found else None
        if found is None:
            return ruling
        # Refused, not labelled: the gate keeps such candidates from ever being served, so
        # what they would have been worth says nothing about the answers that are.
        self._near = None
        return _MISS

    def _rule(self, candidates: list[Candidate], mode: Mode) -> Ruling:
        if not candidates:
            return _MISS
        best = candidates[0]
        self.info.similarity = best.similarity
        if mode is Mode.SERVE:
            self.info.threshold = None
            return Ruling("serve", self._varied(candidates, -1.0))
        budget = self.policy.wrong_hit_budget
        self.info.wrong_hit_budget = budget
        self.info.guard = self.policy.guard
        threshold = self._threshold()
        self.info.threshold = threshold
        if budget is not None and self.policy.serve_identical:
            identical = self._identical(candidates)
            if identical:
                # A stored answer to this very prompt, in this very table (same model and
                # output parameters), is a fresh answer of the model to it: served, it is
                # acceptable exactly as often as asking again would be, so its expected
                # excess is 0 by construction and no guard needs evidence to serve it, nor
                # pays to audit or explore it (docs/promise.md).
                return Ruling("serve", self._drawn(identical))
        if best.similarity.cosine >= threshold:
            if self._checked():
                # Explored or audited: labels the nearest entry; variety is for what is served.
                return Ruling("audit" if self.policy.guard == "audit" else "explore", best)
            return Ruling("serve", self._varied(candidates, threshold))
        self._near = best
        if self._is_near_miss(best, threshold):
            self._asked_about.add(best.entry.id)
            if self.policy.verify_path == "request":
                return self._verify_now(best)
            self._verify_later = best
        return _MISS

    def would_serve(self, cosine: float, mode: Mode) -> bool:
        """Whether a candidate at ``cosine`` is close enough to be served in ``mode`` by the
        threshold in force (what a candidate ruled out before the ruling, by an exact slot,
        would have needed: its cost is counted only where it was this close)."""
        return mode is Mode.SERVE or cosine >= self._threshold()

    def _threshold(self) -> float:
        """The threshold in force: the static one; under the proving guard the one its labels
        learned; under the audit guard the table's own until its audits show it over budget
        (see ``_audit.py``). A guard that cannot read its evidence stays strict."""
        budget = self.policy.wrong_hit_budget
        if budget is None:
            return self.policy.threshold
        if self.policy.guard == "audit":
            state = self.evidence.audit_state(budget, self.policy.threshold, samples=self.samples)
            return state.threshold if state is not None else STRICT_THRESHOLD
        # The proving guard's proof descends from the table's configured threshold.
        return self.evidence.threshold(
            budget, default=STRICT_THRESHOLD, start=self.policy.threshold
        )

    def _checked(self) -> bool:
        """Whether this would-be hit is asked anyway and compared: audited under the audit
        guard (a share, ever smaller), explored under the proving guard (all until proven)."""
        budget = self.policy.wrong_hit_budget
        if budget is None:
            return False
        if self.policy.guard == "audit":
            return self.evidence.audit()
        return self.evidence.explore(budget, default=False, start=self.policy.threshold)

    def _identical(self, candidates: list[Candidate]) -> list[Candidate]:
        """The candidates stored for this very prompt (the same messages): the nearest first."""
        best = candidates[0]
        if best.entry.messages != self.messages:
            return []
        return [c for c in candidates if c.entry.messages == self.messages]

    def _drawn(self, same: list[Candidate]) -> Candidate:
        """One of the answers stored for one prompt: with variety drawn at random (as the
        model would answer it again), else the nearest."""
        best = same[0]
        if not self.variety or len(same) < 2:
            return best
        chosen = self.cache.draw(same)
        if chosen is not best and self.shape.answer_problem(chosen.entry) is not None:
            return best  # damaged: the lookup evicts it when it is the nearest
        self.info.choices = len(same)
        return chosen

    def _varied(self, candidates: list[Candidate], floor: float) -> Candidate:
        """The candidate to serve: the nearest, or with variety one drawn at random from the
        answers stored for the nearest one's very prompt (the same embedding text: twins,
        explorations, earlier misses of it) that lie at or above ``floor`` and can be
        served. Only answers to the same prompt: a neighbour's answer, however close, is a
        different hit, which the threshold alone decides."""
        best = candidates[0]
        if not self.variety:
            return best
        same = [
            c
            for c in candidates
            if c.entry.embed_text == best.entry.embed_text and c.similarity.cosine >= floor
        ]
        return self._drawn(same)

    # -- near misses and the verifier (see _verify.py) ---------------------------------------

    def _is_near_miss(self, candidate: Candidate, threshold: float) -> bool:
        """Whether a verifier is to judge ``candidate``: one is in force, the candidate lies in
        the band under the threshold, and this call has not asked about it yet."""
        return (
            self.policy.verifier is not None
            and candidate.similarity.cosine >= threshold - self.policy.verify_band
            and candidate.entry.id not in self._asked_about
        )

    def _verify_now(self, candidate: Candidate) -> Ruling:
        """On the request path: ask the verifier whether the near miss answers the query; a
        no (or a verifier that fails) makes a miss. A yes serves it (if it then passes the
        query's validator) -- under a budget only where the table's ``verified`` labels prove
        a yes at this cosine within the budget, and explored like any would-be hit until then
        (a verdict is a guess, not a label: the verifier's own errors must count against δ)."""
        verdict = self._ask(candidate)
        if verdict is None:
            return _MISS
        self.info.verified = verdict.same
        budget = self.policy.wrong_hit_budget
        if not verdict.same:
            # A miss: under a budget its answer labels the near miss (answered()).
            return _MISS
        if budget is None:
            return Ruling("serve", candidate)
        # No start: the verified stream has no configured threshold of its own (its yeses lie
        # in a band under the one in force), so its proof is read over all edges.
        threshold = self.evidence.threshold(budget, "verified", default=NO_HIT_THRESHOLD)
        if candidate.similarity.cosine < threshold:
            return _MISS  # a miss, whose answer labels both streams
        explore = self.evidence.explore(budget, "verified", default=True)
        return Ruling("explore" if explore else "serve", candidate)

    def _ask(self, candidate: Candidate) -> Verdict | None:
        try:
            verdict = ask_verifier(
                self.policy.verifier,
                self.info.embed_text or "",
                candidate.entry.embed_text,
                candidate.similarity.cosine,
            )
        except Exception:
            # Whatever the verifier raises (its LLM's errors included) never reaches the
            # caller: the near miss is answered as the miss it is, and the failure counted.
            logger.warning("the verifier failed; answering the near miss as a miss", exc_info=True)
            self.info.verify_failed = True
            return None
        usd = verdict_cost(self.cache.prices, verdict)
        self.info.usage = self.info.usage + verdict.usage
        self.info.cost_usd += usd
        self.info.verify_tokens += verdict.usage.total_tokens
        self.info.verify_usd += usd
        return verdict

    def queue_verification(self) -> None:
        """Off the request path: hand the near miss of an answered (and stored) miss to the
        cache's worker, whose verdict becomes the table's label."""
        candidate = self._verify_later
        if candidate is None or self.info.outcome != "miss":
            return
        self.info.verify_queued = True
        job = VerifyJob(
            key=self.stats_key,
            verifier=self.policy.verifier,
            query=self.info.embed_text or "",
            cached=candidate.entry.embed_text,
            cosine=candidate.similarity.cosine,
            label=self.info.label,
            pool=self.info.pool_key,
        )
        self.cache.verify_later(job)

    # -- what the orchestrator reports back ---------------------------------------------------

    def unusable(self, candidate: Candidate) -> None:
        """The hit step refused ``candidate``'s answer for this query (its modifier or the
        query's validator): under a budget, a wrong label, for free."""
        if self.policy.wrong_hit_budget is not None and not self.shape.is_tool_call_entry(
            candidate.entry
        ):
            self._label(candidate, False)

    def exploring(self, candidate: Candidate, adapted: Adapted, *, audit: bool = False) -> None:
        """``candidate`` is explored (or ``audit``-ed): the LLM is asked as on a miss, and
        :meth:`answered` compares its answer with ``adapted``'s."""
        self.explored = (candidate, adapted)
        if audit:
            self.info.audited = True
        else:
            self.info.explored = True

    def answered(self, fresh: str | None, adapt_free: AdaptFree) -> None:
        """The LLM gave ``fresh`` (valid; ``None``: tool calls, nothing to compare): under a
        budget, label the explored hit or the miss's nearest entry by comparing its answer
        with ``fresh``."""
        if self.policy.wrong_hit_budget is None or self.info.label is not None or fresh is None:
            return
        adapted: Adapted | None
        if self.explored is not None:
            candidate, adapted = self.explored
        elif self._near is not None:
            candidate = self._near
            if self.shape.is_tool_call_entry(candidate.entry):
                return
            try:
                adapted = adapt_free(candidate)
            except ConfigurationError:
                return
            if adapted is None:
                return
        else:
            return
        if not adapted.valid or adapted.content is None:
            if not self.shape.is_tool_call_entry(candidate.entry):
                self._label(candidate, False)
            return
        ok = self.same(adapted.content, fresh)
        if ok is None:
            return
        self._label(candidate, ok)
        if not adapted.usage.total_tokens and candidate.entry.messages == self.messages:
            # The cached answer was itself a fresh answer to this very prompt, served as it
            # was: the two are a pair, a measure of the model's own variability.
            self.paired(ok)

    def twin_wanted(self) -> bool:
        """Whether this miss is asked a second time, for a pair of fresh answers."""
        budget = self.policy.wrong_hit_budget
        return budget is not None and self.evidence.twin(
            budget, self.policy.twin_rate, start=self.policy.threshold
        )

    def paired(self, same: bool) -> None:
        """Two fresh answers to this call's prompt were compared (``same``: alike)."""
        self.info.pair = same
        self.evidence.pair(same)

    def same(self, cached: str, fresh: str) -> bool | None:
        """Whether the category's equivalence calls two answers the same (``None``: it
        failed, which gives no label)."""
        equivalent = self.policy.equivalence or same_answer
        try:
            return bool(equivalent(cached, fresh))
        except Exception:
            logger.warning("the equivalence failed; no label for this call", exc_info=True)
            return None

    def _label(self, candidate: Candidate, ok: bool) -> None:
        """Label the table by ``candidate`` (the call's nearest entry), and its verified stream
        too when the verifier said yes to it."""
        self.info.label = ok
        cosine = candidate.similarity.cosine
        self.evidence.label(cosine, ok)
        if self.info.verified:
            self.evidence.label(cosine, ok, "verified")
