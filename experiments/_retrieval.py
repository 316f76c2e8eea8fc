"""The retrieval experiments over recorded runs: similarity distributions (Fig 3.3), saturation
and observed actors, on the exact tables of :mod:`._tables`."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ._data import MODES, EmbeddingStore, Prompt
from ._results import ObservedResult, SaturationCurve, SaturationResult, SimilarityResult
from ._stats import mean_std, pearson, saturation_point
from ._tables import TableIndex, sample_per_group

__all__ = ["observed_actors", "saturation", "similarity_distribution"]

HOURS_OF_DATA_PER_DAY = 1 / 2.5  # the study: 1 hour of data = 2.5 simulated days


def similarity_distribution(
    queries: Sequence[Prompt],
    table_run: Sequence[Prompt],
    store: EmbeddingStore,
    *,
    per_group: int,
    seed: int,
) -> SimilarityResult:
    """Fig 3.3: per sampled query, the mean similarity to every entry of its table."""
    keys = {p.key for p in table_run}
    candidates = [q for q in queries if q.key in keys]
    sample = sample_per_group(candidates, per_group, random.Random(f"{seed}:similarity"))
    means: dict[str, dict[str, list[float]]] = {}
    for mode in MODES:
        index = TableIndex(table_run, store, mode)
        means[mode] = {}
        for group, items in sample.items():
            qv = store.embed([q.description(mode) for q in items])
            means[mode][group] = [
                float(index.similarities(v, q.key)[1].mean())
                for q, v in zip(items, qv, strict=True)
            ]
    store.save()
    return SimilarityResult(
        query_run=queries[0].run if queries else 1,
        table_run=table_run[0].run if table_run else 2,
        embedder=store.embedder.model_id,
        means=means,
    )


def _thresholds(days: float, n: int) -> list[float]:
    return [round(days * (i + 1) / n, 6) for i in range(n)]


def _curve(
    queries: Sequence[Prompt],
    qvectors: NDArray[np.float32],
    index: TableIndex,
    limits_minutes: Sequence[float],
    name: str,
) -> SaturationCurve:
    means: list[float] = []
    stds: list[float] = []
    entries: list[int] = []
    coverage: list[float] = []
    for limit in limits_minutes:
        best: list[float] = []
        for q, v in zip(queries, qvectors, strict=True):
            _, sims = index.similarities(v, q.key, upto=int(limit))
            if sims.size:
                best.append(float(sims.max()))
        m, s = mean_std(best) if best else (float("nan"), float("nan"))
        means.append(m)
        stds.append(s)
        entries.append(
            sum(
                sum(1 for p in items if p.elapsed_minutes <= limit)
                for items in index.tables.values()
            )
        )
        coverage.append(len(best) / len(queries) if queries else 0.0)
    return SaturationCurve(tables=name, mean=means, std=stds, entries=entries, coverage=coverage)


def saturation(
    queries: Sequence[Prompt],
    table_runs: Sequence[Sequence[Prompt]],
    store: EmbeddingStore,
    *,
    days: float,
    thresholds: int,
    max_queries: int | None,
    seed: int,
) -> SaturationResult:
    """Fig 3.6/3.7: best similarity of run 1's queries as each table run grows, and combined.

    Per-run curves span one run (``thresholds`` points up to ``days``); the combined table
    appends the runs one after another, so its curve spans ``len(table_runs) * days``.
    A query whose table is still empty at a threshold has no retrieval: it is left out of that
    point's mean and counted in ``coverage``.
    """
    rng = random.Random(f"{seed}:saturation")
    qs = list(queries)
    if max_queries is not None and len(qs) > max_queries:
        qs = sorted(rng.sample(qs, max_queries), key=lambda p: p.index)
    per_run = _thresholds(days, thresholds)
    combined = _thresholds(days * len(table_runs), thresholds * len(table_runs))
    curves: dict[str, list[SaturationCurve]] = {}
    for mode in MODES:
        qv = store.embed([q.description(mode) for q in qs])
        mode_curves = []
        for run in table_runs:
            index = TableIndex(run, store, mode)
            name = f"run {run[0].run}" if run else "run ?"
            mode_curves.append(_curve(qs, qv, index, [t * 1440 for t in per_run], name))
        # The combined table: each later run's prompts come after the earlier runs' in time.
        shifted: list[Prompt] = []
        for k, run in enumerate(table_runs):
            offset = round(k * days * 1440)
            shifted += [
                p.model_copy(update={"elapsed_minutes": p.elapsed_minutes + offset}) for p in run
            ]
        index = TableIndex(shifted, store, mode)
        mode_curves.append(_curve(qs, qv, index, [t * 1440 for t in combined], "combined"))
        curves[mode] = mode_curves
    store.save()
    saturation_days: dict[str, float | None] = {}
    for name, cs in curves.items():
        comb = cs[-1]
        pts = [(t, m) for t, m in zip(combined, comb.mean, strict=True) if not np.isnan(m)]
        saturation_days[name] = (
            saturation_point([t for t, _ in pts], [m for _, m in pts]) if pts else None
        )
    return SaturationResult(
        thresholds_days=combined,
        thresholds_hours_of_data=[t * HOURS_OF_DATA_PER_DAY for t in combined],
        queries=len(qs),
        curves=curves,
        saturation_days=saturation_days,
    )


def _observed_at(summary_path: Path, limit_minutes: float) -> float:
    """Mean observed actors per agent at ``limit_minutes`` into a run (hourly snapshots)."""
    payload = json.loads(summary_path.read_text(encoding="utf-8"))
    history = payload["summary"].get("observed_history", [])
    if not history:
        return float("nan")
    start = min(h["sim_minute"] for h in history) - 60
    latest: dict[str, int] = {}
    for h in sorted(history, key=lambda h: h["sim_minute"]):
        if h["sim_minute"] - start <= limit_minutes + 1e-9:
            latest[h["agent"]] = h["observed_actors"]
    if not latest:
        first = min(h["sim_minute"] for h in history)
        latest = {h["agent"]: h["observed_actors"] for h in history if h["sim_minute"] == first}
    return float(np.mean(list(latest.values())))


def observed_actors(sat: SaturationResult, summaries: Sequence[Path]) -> ObservedResult:
    """Fig 3.8/3.9: observed actors of the table runs' agents vs best similarity.

    Each per-run curve point pairs the table run's mean observed actors at that threshold with
    the best-similarity mean there; Pearson r is over all those points.
    """
    per_run_days = [t for t in sat.thresholds_days if t <= _run_days(sat)]
    observed_mean: list[float] = []
    for t in per_run_days:
        observed_mean.append(float(np.nanmean([_observed_at(s, t * 1440) for s in summaries])))
    similarity_mean: dict[str, list[float]] = {}
    r: dict[str, float | None] = {}
    p: dict[str, float | None] = {}
    for mode, curves in sat.curves.items():
        xs: list[float] = []
        ys: list[float] = []
        runs = curves[:-1]
        for curve, summary in zip(runs, summaries, strict=True):
            for i, t in enumerate(per_run_days):
                if not np.isnan(curve.mean[i]):
                    xs.append(_observed_at(summary, t * 1440))
                    ys.append(curve.mean[i])
        similarity_mean[mode] = [
            float(np.nanmean([c.mean[i] for c in runs])) for i in range(len(per_run_days))
        ]
        r[mode], p[mode] = pearson(xs, ys)
    return ObservedResult(
        thresholds_days=per_run_days,
        observed_mean=observed_mean,
        similarity_mean=similarity_mean,
        pearson_r=r,
        pearson_p=p,
    )


def _run_days(sat: SaturationResult) -> float:
    runs = max(1, len(next(iter(sat.curves.values()))) - 1)
    return sat.thresholds_days[-1] / runs + 1e-9
