"""The judged experiments: correlation verification (Fig 3.4/3.5) and direct comparison (3.10).

A cached candidate is first turned into an answer for the query by the live cache's own hit
step, :meth:`llmcache.modifiers.HitStep.adapt`: the category's modifier (``read`` / ``choose`` /
``revise``, with the town's choose parser and revision prompts), then validation against the
query's rules. A candidate that step cannot adapt (no answer, or one that fails validation,
or beyond the profile's revise budget) is judged as it was cached and counted in
``modifier_failures``: the live cache would have called the LLM instead, so those candidates
show the cache's raw material, not its output.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

from ._adapter import Adapter
from ._data import MODES, EmbeddingStore, Prompt
from ._judge import REFERENCE_NAME, Judge, JudgeCandidate, Judgement, JudgeQuery, reliability
from ._results import CompareResult, CorrelationResult, JudgeReliability, RatingTable
from ._stats import STUDY_REGIONS, best_per_region, split_regions
from ._tables import TableIndex, sample_per_group
from ._trueskill import rating_table

__all__ = ["compare", "correlation"]

logger = logging.getLogger("experiments")


def _judge_all(
    judges: Sequence[Judge],
    queries: Sequence[JudgeQuery],
    llm_limit: int,
    progress: Callable[[str, int], None] | None,
) -> dict[str, list[Judgement]]:
    out: dict[str, list[Judgement]] = {}
    for judge in judges:
        # The reference judge ranks every query; an LLM judge the first ``llm_limit`` (the
        # sample order is seeded, so the subset is a random one).
        subset = queries if judge.name == REFERENCE_NAME else queries[:llm_limit]
        js = []
        for q in subset:
            js.append(judge.judge(q))
            if progress is not None:
                progress(judge.name, 1)
        out[judge.name] = js
    return out


def _reliability(judged: dict[str, list[Judgement]]) -> dict[str, JudgeReliability]:
    return {
        name: reliability(name, js, other={o: v for o, v in judged.items() if o != name})
        for name, js in judged.items()
    }


def _sample(
    queries: Sequence[Prompt], table_run: Sequence[Prompt], per_group: int, rng: random.Random
) -> list[Prompt]:
    """Up to ``per_group`` queries per group, among those whose table has entries to retrieve."""
    keys = {p.key for p in table_run}
    pool = [q for q in queries if q.key in keys]
    return [q for qs in sample_per_group(pool, per_group, rng).values() for q in qs]


def correlation(
    queries: Sequence[Prompt],
    table_run: Sequence[Prompt],
    store: EmbeddingStore,
    adapter: Adapter,
    judges: Sequence[Judge],
    *,
    per_group: int,
    llm_judge_queries: int,
    seed: int,
    progress: Callable[[str, int], None] | None = None,
) -> CorrelationResult:
    """Best candidate per similarity region, modified, ranked with the truth by each judge."""
    sample = _sample(queries, table_run, per_group, random.Random(f"{seed}:corr"))
    regions = {m: split_regions(*STUDY_REGIONS[m]) for m in MODES}
    filled: dict[str, dict[str, int]] = {m: {r.label: 0 for r in regions[m]} for m in MODES}
    ratings: dict[str, dict[str, RatingTable]] = {}
    judged_all: dict[str, dict[str, list[Judgement]]] = {}
    for mode in MODES:
        index = TableIndex(table_run, store, mode)
        qv = store.embed([q.description(mode) for q in sample])
        jqs: list[JudgeQuery] = []
        for q, v in zip(sample, qv, strict=True):
            items, sims = index.similarities(v, q.key)
            best = best_per_region([float(s) for s in sims], regions[mode])
            cands = []
            for region, i in zip(regions[mode], best, strict=True):
                if i is None:
                    cands.append(JudgeCandidate(label=region.label, text=None))
                    continue
                filled[mode][region.label] += 1
                text = adapter.adapt(q, items[i], float(sims[i]), mode)
                cands.append(JudgeCandidate(label=region.label, text=text))
            cands.append(JudgeCandidate(label="true", text=q.response))
            jqs.append(_jq(q, cands, f"{mode}:{q.run}:{q.index}"))
        judged = _judge_all(judges, _llm_first(jqs, seed), llm_judge_queries, progress)
        judged_all[mode] = judged
        labels = [r.label for r in regions[mode]] + ["true"]
        for name, js in judged.items():
            ratings.setdefault(name, {})[mode] = rating_table(name, js, labels=labels)
    store.save()
    merged: dict[str, list[Judgement]] = {}
    for judged in judged_all.values():
        for name, js in judged.items():
            merged.setdefault(name, []).extend(js)
    return CorrelationResult(
        regions={m: [r.label for r in regions[m]] for m in MODES},
        queries={m: len(sample) for m in MODES},
        filled=filled,
        modifier_failures={m: adapter.failures[m] for m in MODES},
        ratings=ratings,
        reliability=_reliability(merged),
    )


def _llm_first(jqs: list[JudgeQuery], seed: int) -> list[JudgeQuery]:
    """A seeded order that spreads the groups, so an LLM judge's first N cover every group."""
    rng = random.Random(f"{seed}:judge-order")
    by_group: dict[str, list[JudgeQuery]] = {}
    for q in jqs:
        by_group.setdefault(q.group, []).append(q)
    for items in by_group.values():
        rng.shuffle(items)
    out: list[JudgeQuery] = []
    while any(by_group.values()):
        for g in sorted(by_group):
            if by_group[g]:
                out.append(by_group[g].pop())
    return out


def _jq(q: Prompt, cands: list[JudgeCandidate], qid: str) -> JudgeQuery:
    return JudgeQuery(
        query_id=qid,
        category=q.category,
        group=q.group,
        prompt=q.prompt_text,
        truth=q.response,
        candidates=cands,
    )


def compare(
    queries: Sequence[Prompt],
    table_run: Sequence[Prompt],
    store: EmbeddingStore,
    adapter: Adapter,
    judges: Sequence[Judge],
    *,
    per_group: int,
    llm_judge_queries: int,
    seed: int,
    progress: Callable[[str, int], None] | None = None,
) -> CompareResult:
    """Best full vs best keyword vs a random same-table answer of the held-out run vs truth."""
    rng = random.Random(f"{seed}:compare")
    sample = _sample(queries, table_run, per_group, rng)
    by_table: dict[tuple[str, str], list[Prompt]] = {}
    for p in queries:
        by_table.setdefault(p.key, []).append(p)
    indexes = {m: TableIndex(table_run, store, m) for m in MODES}
    vectors = {m: store.embed([q.description(m) for q in sample]) for m in MODES}
    jqs: list[JudgeQuery] = []
    counts: Counter[str] = Counter()
    for n, q in enumerate(sample):
        cands = []
        for mode in MODES:
            items, sims = indexes[mode].similarities(vectors[mode][n], q.key)
            i = int(np.argmax(sims))
            cands.append(
                JudgeCandidate(label=mode, text=adapter.adapt(q, items[i], float(sims[i]), mode))
            )
        others = [p for p in by_table.get(q.key, []) if p.index != q.index]
        cands.append(
            JudgeCandidate(label="random", text=rng.choice(others).response if others else None)
        )
        cands.append(JudgeCandidate(label="true", text=q.response))
        jqs.append(_jq(q, cands, f"compare:{q.run}:{q.index}"))
        counts[q.group] += 1
    store.save()
    judged = _judge_all(judges, _llm_first(jqs, seed), llm_judge_queries, progress)
    labels = ["full", "keyword", "random", "true"]
    return CompareResult(
        query_run=sample[0].run if sample else 0,
        table_run=table_run[0].run if table_run else 0,
        queries=dict(counts),
        modifier_failures={m: adapter.failures[m] for m in MODES},
        ratings={name: rating_table(name, js, labels=labels) for name, js in judged.items()},
        reliability=_reliability(judged),
    )
