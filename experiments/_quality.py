"""Quality, measured: acceptable answers per group and mode, and cost-quality curves.

Every held-out query is answered the way a live cache would answer it: its table's nearest
entry (per embedding mode) goes through the cache's own hit step (:class:`~._adapter.Adapter`,
i.e. :meth:`llmcache.modifiers.HitStep.adapt`); the result is *acceptable* when its template says so
(:meth:`agent_core.Template.acceptable`: the query's requirements, then the template's tolerance
against the query's true answer). A candidate the hit step refuses is not served: the LLM
answers instead, so the agent gets the true answer and the cost of both.

A threshold decides only hit or miss, so one pass gives the whole sweep: at each threshold
(normalised similarity, hit when ``>=``), the cost of the held-out run -- a miss costs its
recorded call, a read or choose hit nothing (the local embedder is free), a revise hit its
measured revision, all priced at the study's LLM price (:func:`~._cost.study_price_table`) --
against the share of acceptable answers the agents got. Serve mode (every query with a table
hits: the study's operating point) comes first; a random same-table answer, served the same
way, is the baseline. Revise hits beyond the profile's revise budget are not tried: they stay
out of the rates and their cost is estimated from the category's measured revisions.

The free-text bound of each category is calibrated on pairs of true answers of one query
(the same messages answered in several runs): :func:`calibrate`.
"""

from __future__ import annotations

import itertools
import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Literal

import numpy as np

from agent_core import TextAgreement, calibrated_bound
from agent_core.templates import TEMPLATES, template
from agent_core.tolerance import DEFAULT_TEXT_BOUND

from ._adapter import Adapter
from ._data import ALL, MODES, EmbeddingStore, Prompt, cosine_of, kept_groups, messages_key
from ._judge import RANDOM_LABEL, Judge, JudgeCandidate, Judgement, JudgeQuery, reliability
from ._results import (
    PairwiseTally,
    QualityPoint,
    QualityResult,
    RateCI,
    TextCalibration,
)
from ._stats import STUDY_REGIONS, rate, split_regions
from ._tables import TableIndex

__all__ = [
    "SWEEP_STEPS",
    "Served",
    "calibrate",
    "quality",
    "reanswers",
    "sweep",
    "tally",
    "text_agreements",
    "thresholds",
]

#: Thresholds per mode: the mode's study similarity range in this many equal steps.
SWEEP_STEPS = 20
#: Pairs of true answers taken from one query (a prompt asked in every run has few; one asked
#: many times would otherwise outweigh the rest).
_PAIRS_PER_QUERY = 10

Outcome = Literal["acceptable", "unacceptable", "refused", "over budget"]


@dataclass(frozen=True)
class Served:
    """One held-out query, answered one way: its best candidate's similarity (``None``: the
    table is empty, always a miss), what the hit step made of it, and what each path costs."""

    group: str
    category: str
    similarity: float | None
    outcome: Outcome | None  # None with no candidate
    miss_usd: float  # the recorded call
    hit_usd: float = 0.0  # the modifier's LLM calls (revise), measured
    revise: bool = False


def _revise_estimates(rows: Iterable[Served]) -> dict[str, float]:
    """Per category, the mean measured cost of a tried revision."""
    spent: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r.revise and r.outcome not in (None, "over budget"):
            spent[r.category].append(r.hit_usd)
    return {c: fmean(v) for c, v in spent.items()}


def sweep(rows: Sequence[Served], levels: Sequence[float | None]) -> list[QualityPoint]:
    """The operating point of every threshold in ``levels`` (``None``: serve mode).

    Per query: a miss (similarity below the threshold, or no table) gets the true answer at
    its recorded cost; a hit the cache serves costs the modifier's calls and is acceptable as
    its verdict says; a refused hit gets the true answer at the cost of both; an untried hit
    (beyond the revise budget) is left out of the rate, its cost the category's mean measured
    revision (the full call when none was measured).
    """
    estimates = _revise_estimates(rows)
    baseline = sum(r.miss_usd for r in rows)
    points = []
    for level in levels:
        cost = 0.0
        good = answers = hits = refused = estimated = 0
        for r in rows:
            hit = r.similarity is not None and (level is None or r.similarity >= level)
            if not hit:
                cost += r.miss_usd
                good += 1
                answers += 1
                continue
            hits += 1
            if r.outcome == "over budget":
                cost += estimates.get(r.category, r.miss_usd)
                estimated += 1
                continue
            answers += 1
            if r.outcome == "refused":
                cost += r.hit_usd + r.miss_usd
                refused += 1
                good += 1
            else:
                cost += r.hit_usd
                good += r.outcome == "acceptable"
        points.append(
            QualityPoint(
                threshold=level,
                hits=hits,
                refused=refused,
                estimated=estimated,
                cost_reduction=1.0 - cost / baseline if baseline > 0 else None,
                acceptable=rate(good, answers),
            )
        )
    return points


def thresholds(mode: str, steps: int = SWEEP_STEPS) -> list[float | None]:
    """Serve mode, then the mode's study similarity range in ``steps`` equal steps."""
    regions = split_regions(*STUDY_REGIONS[mode], n=steps)
    return [None, regions[0].lo, *(r.hi for r in regions)]


def tally(judgements: Iterable[Judgement], cached: str = "cached") -> PairwiseTally:
    """Pairwise verdicts: the label ranked better in both orders wins; the orders
    disagreeing (mean positions equal) is a tie."""
    out = PairwiseTally()
    for j in judgements:
        if j.failed or cached not in j.ranks or "true" not in j.ranks:
            out.failures += 1
        elif j.ranks[cached] < j.ranks["true"]:
            out.cached += 1
        elif j.ranks[cached] > j.ranks["true"]:
            out.true += 1
        else:
            out.ties += 1
    return out


def _queries(runs: Sequence[Sequence[Prompt]]) -> list[tuple[str, list[Prompt]]]:
    """Every query (category and messages) with the prompts that asked it, across or within
    runs, in a fixed order: a query with more than one holds pairs of true answers."""
    asked: dict[tuple[str, str], list[Prompt]] = defaultdict(list)
    for run in runs:
        for p in run:
            asked[(p.category, messages_key(p.messages))].append(p)
    return [(category, prompts) for (category, _), prompts in sorted(asked.items())]


def calibrate(
    runs: Sequence[Sequence[Prompt]], similarity: Callable[[str, str], float]
) -> dict[str, TextCalibration]:
    """Each text-judged category's bound, from pairs of true answers of the same query (the
    same messages answered more than once, across or within runs). A category with too few
    pairs of its own takes the bound of all categories' pairs pooled, and with too few of
    those the documented default (``agent_core.tolerance.DEFAULT_TEXT_BOUND``)."""
    cosines: dict[str, list[float]] = defaultdict(list)
    for category, prompts in _queries(runs):
        t = template(category)
        texts = [x for p in prompts if (x := t.tolerance_text(p.response)) is not None]
        pairs = itertools.islice(itertools.combinations(texts, 2), _PAIRS_PER_QUERY)
        cosines[category] += [1.0 if a == b else similarity(a, b) for a, b in pairs]
    pooled = calibrated_bound([c for v in cosines.values() for c in v])
    out: dict[str, TextCalibration] = {}
    for t in TEMPLATES:
        if t.bypass or not t.uses_text:
            continue
        own = cosines.get(t.category, [])
        bound = calibrated_bound(own)
        if bound is not None:
            out[t.category] = TextCalibration(pairs=len(own), bound=bound, source="category")
        elif pooled is not None:
            out[t.category] = TextCalibration(pairs=len(own), bound=pooled, source="pooled")
        else:
            out[t.category] = TextCalibration(
                pairs=len(own), bound=DEFAULT_TEXT_BOUND, source="default"
            )
    return out


def reanswers(
    runs: Sequence[Sequence[Prompt]], texts: Callable[[str], TextAgreement]
) -> dict[str, RateCI]:
    """How often the LLM agrees with itself, per group (and :data:`ALL`): for every query
    answered more than once (the same messages, across or within runs), one true answer judged
    by the template's tolerance as if it had been served for another. No cache can be expected
    to serve acceptable answers more often than this. For text-judged categories the bound
    comes from these same pairs (their 10th percentile), so their part is about 90% by
    construction."""
    ok: dict[str, int] = defaultdict(int)
    n: dict[str, int] = defaultdict(int)
    for category, prompts in _queries(runs):
        t = template(category)
        if t.bypass:
            continue
        for served, query in itertools.islice(itertools.combinations(prompts, 2), _PAIRS_PER_QUERY):
            verdict = t.acceptable(
                served.response, query.response, query.call().requirements, text=texts(category)
            )
            for g in (query.group, ALL):
                ok[g] += verdict.acceptable
                n[g] += 1
    return {g: rate(ok[g], n[g]) for g in n}


def text_agreements(
    runs: Sequence[Sequence[Prompt]], store: EmbeddingStore
) -> tuple[dict[str, TextCalibration], Callable[[str], TextAgreement]]:
    """Each text-judged category's calibration (:func:`calibrate`) and the text agreement a
    category's tolerance compares with (its bound; the documented default for the rest)."""
    similarity = cosine_of(store)
    calibration = calibrate(runs, similarity)
    texts = {c: TextAgreement(similarity, cal.bound) for c, cal in calibration.items()}
    default = TextAgreement(similarity, DEFAULT_TEXT_BOUND)
    return calibration, lambda category: texts.get(category, default)


def _spread(queries: Sequence[Prompt], seed: int) -> list[Prompt]:
    """A seeded order that takes the groups in turn, so a budget (revisions, judge calls)
    spent from the front reaches every group."""
    rng = random.Random(f"{seed}:quality-order")
    by_group: dict[str, list[Prompt]] = defaultdict(list)
    for q in queries:
        by_group[q.group].append(q)
    for items in by_group.values():
        rng.shuffle(items)
    out: list[Prompt] = []
    while any(by_group.values()):
        for g in sorted(by_group):
            if by_group[g]:
                out.append(by_group[g].pop())
    return out


class _Answering:
    """Serves one query one way and judges the answer."""

    def __init__(self, adapter: Adapter, texts: Callable[[str], TextAgreement]) -> None:
        self.adapter = adapter
        self.texts = texts

    def serve(self, q: Prompt, cached: Prompt, similarity: float, mode: str) -> tuple[Served, str]:
        out = self.adapter.outcome(q, cached, similarity, mode)
        t = template(q.category)
        outcome: Outcome
        if out.status == "adapted":
            verdict = t.acceptable(
                out.content,
                q.response,
                q.call().requirements,
                text=self.texts(q.category),
            )
            outcome = "acceptable" if verdict.acceptable else "unacceptable"
        else:
            outcome = out.status
        served = Served(
            group=q.group,
            category=q.category,
            similarity=similarity,
            outcome=outcome,
            miss_usd=q.cost_usd,
            hit_usd=out.cost_usd,
            revise=t.modifier == "revise",
        )
        return served, out.content


def quality(
    table_run: Sequence[Prompt],
    queries: Sequence[Prompt],
    runs: Sequence[Sequence[Prompt]],
    store: EmbeddingStore,
    adapter: Adapter,
    judge: Judge | None,
    *,
    llm_judge_queries: int,
    seed: int,
    steps: int = SWEEP_STEPS,
    progress: Callable[[int], None] | None = None,
) -> QualityResult:
    """Acceptable rates, the cost-quality sweep and the pairwise judge on ``queries`` (the
    held-out run) against tables of ``table_run``; ``runs`` (every run) calibrate the text
    bounds. See the module docstring."""
    calibration, texts = text_agreements(runs, store)
    answering = _Answering(adapter, texts)
    rng = random.Random(f"{seed}:quality-random")
    indexes = {m: TableIndex(table_run, store, m) for m in MODES}
    ordered = _spread(queries, seed)
    vectors = {m: store.embed([q.description(m) for q in ordered]) for m in MODES}
    rows: dict[str, list[Served]] = {m: [] for m in (*MODES, "random")}
    to_judge: dict[str, list[JudgeQuery]] = {m: [] for m in MODES}
    # The judge's test against chance: the true answer against a random same-table one.
    chance: list[JudgeQuery] = []
    for n, q in enumerate(ordered):
        for mode in MODES:
            items, sims = indexes[mode].similarities(vectors[mode][n], q.key)
            if not items:
                rows[mode].append(Served(q.group, q.category, None, None, q.cost_usd))
                continue
            i = int(np.argmax(sims))
            served, content = answering.serve(q, items[i], float(sims[i]), mode)
            rows[mode].append(served)
            if served.outcome in ("acceptable", "unacceptable"):
                to_judge[mode].append(_pair(q, content, mode))
        items, sims = indexes["keyword"].similarities(vectors["keyword"][n], q.key)
        if items:
            i = rng.randrange(len(items))
            served, _ = answering.serve(q, items[i], float(sims[i]), "random")
            rows["random"].append(served)
            chance.append(_pair(q, items[i].response, RANDOM_LABEL))
        else:
            rows["random"].append(Served(q.group, q.category, None, None, q.cost_usd))
        if progress is not None:
            progress(1)
    store.save()
    groups = [g for g in kept_groups() if any(q.group == g for q in queries)]
    self_agreement = reanswers(runs, texts)
    curves = {
        mode: {
            g: sweep([r for r in rows[mode] if g in (ALL, r.group)], thresholds(mode, steps))
            for g in (*groups, ALL)
        }
        for mode in MODES
    }
    random_rates = {
        g: sweep([r for r in rows["random"] if g in (ALL, r.group)], [None])[0].acceptable
        for g in (*groups, ALL)
    }
    pairwise: dict[str, dict[str, PairwiseTally]] = {}
    judged: list[Judgement] = []
    if judge is not None:
        # The profile's judge budget is shared by the modes (each pair costs two calls).
        per_mode = -(-llm_judge_queries // len(MODES))
        for mode in MODES:
            js = [judge.judge(jq) for jq in to_judge[mode][:per_mode]]
            judged += js
            pairwise[mode] = {
                g: tally(j for j in js if g in (ALL, j.group)) for g in (*groups, ALL)
            }
        # As many chance pairs as one mode's: enough for the judge's verdict, not a third
        # of the budget again on every profile.
        judged += [judge.judge(jq) for jq in chance[:per_mode]]
    return QualityResult(
        query_run=queries[0].run if queries else 0,
        table_run=table_run[0].run if table_run else 0,
        queries={g: sum(1 for q in queries if q.group == g) for g in groups},
        calibration=calibration,
        curves=curves,
        random=random_rates,
        reanswer=self_agreement,
        revise_calls=adapter.revise_calls,
        pairwise=pairwise,
        reliability={judge.name: reliability(judge.name, judged)} if judge is not None else {},
    )


def _pair(q: Prompt, content: str, mode: str) -> JudgeQuery:
    """The served answer (labelled "cached", or "random" for the chance pairs) and the truth."""
    return JudgeQuery(
        query_id=f"pairwise:{mode}:{q.run}:{q.index}",
        category=q.category,
        group=q.group,
        prompt=q.prompt_text,
        truth=q.response,
        candidates=[
            JudgeCandidate(label=RANDOM_LABEL if mode == RANDOM_LABEL else "cached", text=content),
            JudgeCandidate(label="true", text=q.response),
        ],
    )
