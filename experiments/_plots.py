"""The figures of chapter 3, drawn from the experiments' JSON results only.

Each ``plot_*`` function takes one result model of ``experiments`` and an output path,
writes a PNG, closes its figure and returns the path; ``plot_all`` does every result present in
a results directory. Nothing here re-simulates or re-embeds, so figures can be restyled freely.

Titles describe what is drawn, never the thesis's numbers: ``report.md`` sets those beside ours.
Missing data (a group without queries, a judge without ratings, an undefined Pearson r) is drawn
as an empty, labelled panel rather than raising, so one sparse run still gives every figure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

import matplotlib

# A headless backend, chosen before pyplot is imported: experiments run on servers and in CI,
# and the notebooks show the written PNGs rather than live figures.
matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from experiments._results import (
    RESULT_MODELS,
    BudgetResult,
    CollectResult,
    CompareResult,
    CorrelationResult,
    CostResult,
    ModeCost,
    ObservedResult,
    QualityResult,
    ReplayStudyResult,
    SaturationResult,
    SimilarityResult,
    SkillRating,
    load_result,
)

__all__ = [
    "plot_all",
    "plot_budget",
    "plot_collect",
    "plot_compare",
    "plot_correlation",
    "plot_correlation_groups",
    "plot_cost",
    "plot_observed",
    "plot_quality",
    "plot_replay_study",
    "plot_saturation",
    "plot_similarity",
]

MODE_COLORS = {
    "full": "tab:blue",
    "keyword": "tab:orange",
    "random": "tab:gray",
    "true": "tab:green",
}
_JUDGE_COLORS = ("tab:purple", "tab:red", "tab:cyan", "tab:olive", "tab:brown", "tab:pink")
_COMPARE_LABELS = ("full", "keyword", "random", "true")
# Saturation curves: distinct from the saturation marker (red) and the combined curve (black).
_CURVE_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown")
_DPI = 120


def _color(mode: str, i: int) -> str:
    return MODE_COLORS.get(mode, _JUDGE_COLORS[i % len(_JUDGE_COLORS)])


def _save(fig: Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fig.savefig(path, dpi=_DPI, bbox_inches="tight")
    finally:
        # Figures are never shown; an unclosed one would pile up in pyplot's registry.
        plt.close(fig)
    return path


def _empty(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def _grid(
    n: int, ncols: int, *, width: float = 3.6, height: float = 2.8
) -> tuple[Figure, list[Axes]]:
    """``n`` small panels in rows of ``ncols``; the unused cells are hidden."""
    n = max(n, 1)
    ncols = min(ncols, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _short(text: str, width: int = 28) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


# --- collect ---------------------------------------------------------------------------------


def plot_collect(result: CollectResult, path: str | Path) -> Path:
    """Kept prompts per category, one bar per recorded run."""
    fig, ax = plt.subplots(figsize=(10, 4.5))
    categories = sorted({c for run in result.runs for c in run.per_category})
    if not result.runs or not categories:
        _empty(ax, "no recorded runs")
    else:
        x = np.arange(len(categories))
        width = 0.8 / len(result.runs)
        for i, run in enumerate(result.runs):
            counts = [run.per_category.get(c, 0) for c in categories]
            label = f"run {run.run} ({run.days:g} days, resubmitted {run.resubmission_rate:.1%})"
            ax.bar(x + (i - (len(result.runs) - 1) / 2) * width, counts, width, label=label)
        ax.set_xticks(x, categories, rotation=45, ha="right", fontsize=8)
        ax.set_ylabel("kept prompts")
        ax.legend(fontsize=8)
    ax.set_title(f"Recorded prompts per category ({result.profile} profile)")
    return _save(fig, path)


# --- similarity ------------------------------------------------------------------------------


def plot_similarity(result: SimilarityResult, path: str | Path) -> Path:
    """Histograms of each query's mean similarity to its table, full vs keyword (Fig 3.3)."""
    modes = list(result.means)
    groups = _unique(g for per_group in result.means.values() for g in per_group)
    every = [v for per_group in result.means.values() for vs in per_group.values() for v in vs]
    lo, hi = (min(every), max(every)) if every else (0.0, 1.0)
    pad = max(0.02, 0.05 * (hi - lo))
    bins = np.linspace(max(0.0, lo - pad), min(1.0, hi + pad), 41).tolist()

    ncols = 4
    nrows = 1 + math.ceil(len(groups) / ncols)
    fig = plt.figure(figsize=(14, 3.2 + 2.6 * (nrows - 1)))
    grid = fig.add_gridspec(nrows, ncols, height_ratios=[1.4] + [1] * (nrows - 1))
    overall = fig.add_subplot(grid[0, :])
    for i, mode in enumerate(modes):
        values = [v for vs in result.means[mode].values() for v in vs]
        if values:
            overall.hist(values, bins=bins, alpha=0.55, color=_color(mode, i),
                         label=f"{mode} (n={len(values)}, mean {np.mean(values):.3f})")  # fmt: skip
    if every:
        overall.legend(fontsize=8)
        overall.set_xlabel("mean normalised similarity to the table, (cos + 1) / 2")
        overall.set_ylabel("queries")
    else:
        _empty(overall, "no queries")
    overall.set_title(
        f"Mean similarity of run {result.query_run}'s queries to run {result.table_run}'s tables "
        f"({result.embedder})"
    )
    for k, group in enumerate(groups):
        ax = fig.add_subplot(grid[1 + k // ncols, k % ncols])
        drawn = False
        for i, mode in enumerate(modes):
            values = result.means[mode].get(group, [])
            if values:
                ax.hist(values, bins=bins, alpha=0.55, color=_color(mode, i), label=mode)
                drawn = True
        if drawn:
            ax.set_xlim(bins[0], bins[-1])
            ax.tick_params(labelsize=7)
        else:
            _empty(ax, "no queries")
        ax.set_title(_short(group), fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


# --- TrueSkill bars --------------------------------------------------------------------------


def _rating_bars(
    ax: Axes,
    labels: Sequence[str],
    tables: dict[str, dict[str, SkillRating]],
    colors: dict[str, str],
    *,
    ticks: Sequence[str] | None = None,
) -> bool:
    """One group of bars per label, one bar per judge: mu with a +-sigma error bar.

    ``tables`` maps judge -> label -> rating; ``colors`` judge -> colour, fixed per figure so
    a judge keeps its colour in panels another judge is missing from. Returns False (and
    draws nothing) when no judge rated any of the labels.
    """
    judges = [j for j, table in tables.items() if any(lab in table for lab in labels)]
    if not labels or not judges:
        return False
    x = np.arange(len(labels))
    width = 0.8 / len(judges)
    for i, judge in enumerate(judges):
        table = tables[judge]
        mu = [table[lab].mu if lab in table else np.nan for lab in labels]
        sigma = [table[lab].sigma if lab in table else np.nan for lab in labels]
        offset = (i - (len(judges) - 1) / 2) * width
        ax.bar(x + offset, mu, width, yerr=sigma, capsize=3, label=judge,
               color=colors.get(judge, "0.5"), alpha=0.85)  # fmt: skip
    ax.set_xticks(x, list(ticks if ticks is not None else labels), fontsize=8)
    ax.set_ylabel("TrueSkill mu ± sigma")
    ax.axhline(25.0, color="0.6", lw=0.8, ls=":")  # the prior mean: "no evidence either way"
    ax.legend(fontsize=7)
    return True


def _judge_colors(judges: Iterable[str]) -> dict[str, str]:
    return {j: _JUDGE_COLORS[i % len(_JUDGE_COLORS)] for i, j in enumerate(_unique(judges))}


def _labels(first: Sequence[str], tables: Iterable[dict[str, SkillRating]]) -> list[str]:
    """``first`` in order, then any other rated label, ``true`` last (the reference)."""
    rest = sorted({lab for t in tables for lab in t} - set(first), key=lambda s: (s == "true", s))
    labels = [*first, *rest]
    if "true" in labels:
        labels.remove("true")
        labels.append("true")
    return labels


def _correlation_modes(result: CorrelationResult) -> list[str]:
    return _unique([*result.regions, *(m for per in result.ratings.values() for m in per)])


def plot_correlation(result: CorrelationResult, path: str | Path) -> Path:
    """TrueSkill of the best candidate per similarity region, and of the truth (Fig 3.4/3.5)."""
    modes = _correlation_modes(result)
    colors = _judge_colors(result.ratings)
    fig, axes = _grid(len(modes), 2, width=6.5, height=4.0)
    for ax, mode in zip(axes, modes, strict=False):
        tables = {j: per[mode].overall for j, per in result.ratings.items() if mode in per}
        labels = _labels(result.regions.get(mode, []), tables.values())
        filled = result.filled.get(mode, {})
        ticks = [f"{lab}\nn={filled[lab]}" if lab in filled else lab for lab in labels]
        if not _rating_bars(ax, labels, tables, colors, ticks=ticks):
            _empty(ax, "no ratings")
        ax.set_title(f"{mode}: best candidate per region ({result.queries.get(mode, 0)} queries)")
        ax.set_xlabel("normalised similarity region of the candidate")
    if not modes:
        _empty(axes[0], "no modes")
    fig.tight_layout()
    return _save(fig, path)


def plot_correlation_groups(result: CorrelationResult, path: str | Path) -> Path:
    """The same bars per group (E.1-E.6): one row per group, one column per mode."""
    modes = _correlation_modes(result)
    colors = _judge_colors(result.ratings)
    groups = _unique(
        g for per in result.ratings.values() for table in per.values() for g in table.per_group
    )
    nrows, ncols = max(len(groups), 1), max(len(modes), 1)
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.0 * ncols, 3.2 * nrows), squeeze=False)
    if not groups or not modes:
        _empty(axes[0][0], "no per-group ratings")
    for r, group in enumerate(groups):
        for c, mode in enumerate(modes):
            ax = axes[r][c]
            tables = {
                j: per[mode].per_group.get(group, {})
                for j, per in result.ratings.items()
                if mode in per
            }
            labels = _labels(result.regions.get(mode, []), tables.values())
            if not _rating_bars(ax, labels, tables, colors):
                _empty(ax, "no ratings")
            ax.set_title(f"{_short(group, 40)} ({mode})", fontsize=10)
            ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    return _save(fig, path)


def plot_compare(result: CompareResult, path: str | Path) -> Path:
    """TrueSkill of best full vs best keyword vs random vs true, overall and per group."""
    groups = _unique([*result.queries, *(g for t in result.ratings.values() for g in t.per_group)])
    colors = _judge_colors(result.ratings)
    fig, axes = _grid(1 + len(groups), 4, width=4.2, height=3.4)
    overall = {j: t.overall for j, t in result.ratings.items()}
    labels = _labels(_COMPARE_LABELS, overall.values())
    if not _rating_bars(axes[0], labels, overall, colors):
        _empty(axes[0], "no ratings")
    total = sum(result.queries.values())
    axes[0].set_title(f"all groups ({total} queries)", fontsize=10)
    for ax, group in zip(axes[1:], groups, strict=False):
        tables = {j: t.per_group.get(group, {}) for j, t in result.ratings.items()}
        if not _rating_bars(ax, _labels(_COMPARE_LABELS, tables.values()), tables, colors):
            _empty(ax, "no queries" if not result.queries.get(group) else "no ratings")
        ax.set_title(f"{_short(group)} ({result.queries.get(group, 0)} queries)", fontsize=9)
    fig.suptitle(
        f"Best full vs best keyword vs random vs true: run {result.query_run}'s queries, "
        f"run {result.table_run}'s tables"
    )
    fig.tight_layout()
    return _save(fig, path)


# --- saturation ------------------------------------------------------------------------------


def _days_per_hour(result: SaturationResult) -> float | None:
    """The constant days / hours-of-data ratio of the thresholds, if there is one."""
    ratios = [
        d / h
        for d, h in zip(result.thresholds_days, result.thresholds_hours_of_data, strict=False)
        if h > 0
    ]
    if not ratios or max(ratios) - min(ratios) > 1e-6 * max(abs(r) for r in ratios):
        return None
    return float(np.mean(ratios))


def plot_saturation(result: SaturationResult, path: str | Path) -> Path:
    """Mean +- std of the best similarity as the tables grow (Fig 3.6/3.7), one panel per mode.

    x is the study's unit, hours of data; simulated days are on the top axis when the two are
    proportional, else in the x label.
    """
    modes = _unique([*result.curves, *result.saturation_days])
    fig, axes = _grid(len(modes), 2, width=6.5, height=4.2)
    hours = list(result.thresholds_hours_of_data)
    ratio = _days_per_hour(result)
    for ax, mode in zip(axes, modes, strict=False):
        drawn = False
        for i, curve in enumerate(result.curves.get(mode, [])):
            n = min(len(hours), len(curve.mean), len(curve.std))
            if n == 0:
                continue
            x = np.asarray(hours[:n])
            mean = np.asarray(curve.mean[:n])
            std = np.asarray(curve.std[:n])
            combined = curve.tables == "combined"
            color = "black" if combined else _CURVE_COLORS[i % len(_CURVE_COLORS)]
            ax.plot(x, mean, ls="--" if combined else "-", marker=".", color=color,
                    label=curve.tables, lw=1.8 if combined else 1.2)  # fmt: skip
            ax.fill_between(x, mean - std, mean + std, color=color, alpha=0.12)
            drawn = True
        point = result.saturation_days.get(mode)
        if point is not None:
            at = _hours_at(point, result)
            if at is not None:
                ax.axvline(at, color="tab:red", ls=":", label=f"saturates at {point:g} days")
        if drawn:
            ax.set_ylabel("best normalised similarity (mean ± std)")
            ax.legend(fontsize=8, title="tables", title_fontsize=8)
        else:
            _empty(ax, "no curves")
        ax.set_title(f"{mode}: best similarity of {result.queries} queries vs table size")
        if ratio is not None and drawn:
            top = ax.secondary_xaxis("top", functions=_scale(ratio))
            top.set_xlabel("simulated days", fontsize=8)
            ax.set_xlabel("hours of data")
        else:
            days = ", ".join(f"{d:g}" for d in result.thresholds_days)
            ax.set_xlabel(f"hours of data (simulated days: {days})")
    fig.tight_layout()
    return _save(fig, path)


def _scale(factor: float) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """Forward and inverse of multiplying by ``factor``, for a secondary axis (arrays in, out)."""

    def forward(x: Any) -> Any:
        return x * factor

    def inverse(x: Any) -> Any:
        return x / factor

    return forward, inverse


def _hours_at(days: float, result: SaturationResult) -> float | None:
    """A threshold in days on the hours axis (interpolated between the thresholds)."""
    d = result.thresholds_days
    h = result.thresholds_hours_of_data
    n = min(len(d), len(h))
    if n == 0:
        return None
    if n == 1:
        return h[0]
    order = np.argsort(d[:n])
    return float(np.interp(days, np.asarray(d[:n])[order], np.asarray(h[:n])[order]))


# --- observed actors -------------------------------------------------------------------------


def _fmt_p(p: float | None) -> str:
    if p is None:
        return "n/a"
    return f"{p:.2g}" if p >= 1e-3 else f"{p:.1e}"


def plot_observed(result: ObservedResult, path: str | Path) -> Path:
    """Observed actors vs threshold, and vs the best similarity per mode (Fig 3.8/3.9)."""
    modes = _unique([*result.similarity_mean, *result.pearson_r])
    fig, axes = _grid(1 + len(modes), 3, width=4.6, height=3.8)
    n = min(len(result.thresholds_days), len(result.observed_mean))
    if n:
        axes[0].plot(result.thresholds_days[:n], result.observed_mean[:n], marker="o", color="0.2")
        axes[0].set_xlabel("table threshold (simulated days)")
        axes[0].set_ylabel("observed actors per agent (mean)")
    else:
        _empty(axes[0], "no thresholds")
    axes[0].set_title("Observed actors as the tables grow", fontsize=10)
    for i, (ax, mode) in enumerate(zip(axes[1:], modes, strict=False)):
        sims = result.similarity_mean.get(mode, [])
        k = min(len(sims), len(result.observed_mean))
        r = result.pearson_r.get(mode)
        p = result.pearson_p.get(mode)
        stat = f"r = {r:.3f}, p = {_fmt_p(p)}" if r is not None else "r undefined"
        if k:
            ax.scatter(result.observed_mean[:k], sims[:k], color=_color(mode, i), label=stat)
            ax.set_xlabel("observed actors per agent (mean)")
            ax.set_ylabel("best normalised similarity (mean)")
            ax.legend(fontsize=8)
        else:
            _empty(ax, f"no points ({stat})")
        ax.set_title(f"{mode}: observed actors vs similarity", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


# --- cost ------------------------------------------------------------------------------------


def _cost_bars(ax: Axes, rows: Sequence[tuple[str, ModeCost]]) -> None:
    x = np.arange(len(rows))
    building = [c.building_usd for _, c in rows]
    usage = [c.usage_usd for _, c in rows]
    ax.bar(x, building, 0.6, color="tab:brown", label="building (table embeddings)")
    ax.bar(x, usage, 0.6, bottom=building, color="tab:blue", alpha=0.8, label="usage")
    for xi, (_, c) in zip(x, rows, strict=True):
        note = f"${c.total_usd:.3g}"
        if c.reduction is not None and c.mode != "none":
            note += f"\n{-c.reduction:+.1%}"
        ax.annotate(note, (xi, c.total_usd), ha="center", va="bottom", fontsize=7,
                    xytext=(0, 2), textcoords="offset points")  # fmt: skip
    ax.set_xticks(x, [label for label, _ in rows], fontsize=8)
    ax.set_ylabel("dollars")
    ax.margins(y=0.2)
    ax.legend(fontsize=8)


def plot_cost(result: CostResult, path: str | Path) -> Path:
    """Description length per group, and building + usage dollars per mode (Fig 3.12/3.13)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5), width_ratios=[1, 1.2])
    if result.groups:
        y = np.arange(len(result.groups))
        full = [g.full_chars for g in result.groups]
        keyword = [g.keyword_chars for g in result.groups]
        left.barh(y - 0.2, full, 0.4, color=MODE_COLORS["full"], label="full")
        left.barh(y + 0.2, keyword, 0.4, color=MODE_COLORS["keyword"], label="keyword")
        left.set_yticks(y, [f"{_short(g.group)} ({-g.reduction:+.0%})" for g in result.groups],
                        fontsize=8)  # fmt: skip
        left.invert_yaxis()
        left.set_xlabel("mean embedding-description length (characters)")
        left.legend(fontsize=8)
    else:
        _empty(left, "no prompts")
    left.set_title(f"Description length (keyword {-result.description_reduction:+.1%} overall)")

    rows = [(f"{c.mode}\nstudy prices", c) for c in result.study_prices]
    rows += [(f"{c.mode}\nlocal embedder", c) for c in result.local_embedder]
    if rows:
        _cost_bars(right, rows)
    else:
        _empty(right, "no costs")
    right.set_title(
        f"Cost of a {result.sim_days:g}-day held-out run ({result.chars_per_token:g} chars/token)"
    )
    fig.tight_layout()
    return _save(fig, path)


# --- quality ---------------------------------------------------------------------------------


_LegendAt = Literal["lower left", "upper left"]


def _cost_cut_panel(ax: Axes, drawn: bool, *, empty: str, ylabel: str, legend: _LegendAt) -> None:
    """A panel of cost cut (%) against ``ylabel`` (%), both 0-100, or ``empty`` when nothing
    was drawn on it."""
    if not drawn:
        _empty(ax, empty)
        return
    ax.set_xlabel("cost cut (%)", fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.set_xlim(-2, 102)
    ax.set_ylim(-2, 102)
    ax.legend(fontsize=6, loc=legend)


def plot_quality(result: QualityResult, path: str | Path) -> Path:
    """Cost-quality curves: per group, the cost cut against the share of acceptable answers
    at every similarity threshold (95% Wilson band), each mode's serve-mode point marked, and
    a random same-table answer (served in serve mode) as the baseline."""
    groups = _unique(g for per in result.curves.values() for g in per)
    fig, axes = _grid(len(groups), 4, width=4.0, height=3.4)
    if not groups:
        _empty(axes[0], "no curves")
    for ax, group in zip(axes, groups, strict=False):
        drawn = False
        for mode, per in result.curves.items():
            points = [p for p in per.get(group, []) if p.acceptable.rate is not None]
            points = [p for p in points if p.cost_reduction is not None]
            if not points:
                continue
            drawn = True
            x = [100 * (p.cost_reduction or 0.0) for p in points]
            y = [100 * (p.acceptable.rate or 0.0) for p in points]
            color = _color(mode, 0)
            ax.plot(x, y, "o-", ms=3, lw=1.2, color=color, label=mode)
            low = [100 * p.acceptable.low for p in points]
            high = [100 * p.acceptable.high for p in points]
            ax.fill_between(x, low, high, color=color, alpha=0.15)
            serve = result.serve(mode, group)
            if serve is not None and serve.cost_reduction is not None and serve.acceptable.rate:
                ax.plot(100 * serve.cost_reduction, 100 * serve.acceptable.rate, "*", ms=11,
                        color=color, mec="black", label=f"{mode}: serve mode")  # fmt: skip
        rnd = result.random.get(group)
        if rnd is not None and rnd.rate is not None:
            ax.axhline(100 * rnd.rate, color=MODE_COLORS["random"], ls="--", lw=1,
                       label="random answer")  # fmt: skip
            ax.axhspan(100 * rnd.low, 100 * rnd.high, color=MODE_COLORS["random"], alpha=0.12)
        _cost_cut_panel(ax, drawn, empty="no answers", ylabel="acceptable answers (%)",
                        legend="lower left")  # fmt: skip
        n = result.queries.get(group, sum(result.queries.values()))
        ax.set_title(f"{_short(group)} ({n} queries)", fontsize=9)
    fig.suptitle(
        f"Cost cut vs acceptable answers: run {result.query_run}'s queries, "
        f"run {result.table_run}'s tables"
    )
    fig.tight_layout()
    return _save(fig, path)


def plot_budget(result: BudgetResult, path: str | Path) -> Path:
    """Per group, each cache configuration's excess over the model's own variability (points,
    with its paired 95% interval) against its cost cut: every budget δ beside the static
    default threshold, serve mode and a random answer, per mode, with δ drawn as the line a
    budget promises to stay under."""
    groups = _unique(g for r in result.runs for g in r.groups)
    fig, axes = _grid(len(groups), 4, width=4.0, height=3.4)
    if not groups:
        _empty(axes[0], "no runs")
    markers = {"budget": "o", "audit": "D", "static": "s", "serve": "^", "random": "x"}
    for ax, group in zip(axes, groups, strict=False):
        drawn = False
        for i, run in enumerate(result.runs):
            row = run.groups.get(group)
            if row is None or row.cost_reduction is None or row.paired.excess is None:
                continue
            p = row.paired
            drawn = True
            x, y = 100 * row.cost_reduction, 100 * (p.excess or 0.0)
            low, high = 100 * (p.low or 0.0), 100 * (p.high or 0.0)
            err = [[max(0.0, y - low)], [max(0.0, high - y)]]
            name = run.config if run.budget is None else f"δ = {run.budget:g}"
            if run.config == "audit":
                name = f"audit guard {name}"
            if run.config == "budget" and not run.pooled:
                name += " (per table)"
            hollow = run.config != "budget" or not run.pooled
            ax.errorbar(x, y, yerr=err, fmt=markers[run.config], ms=6, capsize=3,
                        color=_color(run.mode, i), mfc="white" if hollow else None,
                        label=f"{run.mode}: {name}")  # fmt: skip
        for budget in sorted({r.budget for r in result.runs if r.budget is not None}):
            ax.axhline(100 * budget, color="black", ls=":", lw=1)
        ax.axhline(0.0, color="gray", lw=0.6)
        _cost_cut_panel(ax, drawn, empty="no hits", ylabel="excess (points)",
                        legend="upper left")  # fmt: skip
        ax.set_title(_short(group), fontsize=9)
    fig.suptitle(
        f"Wrong-hit budget: run {result.query_run} answered online from run "
        f"{result.table_run}'s tables; excess over the model's own second answers (dotted: δ)"
    )
    fig.tight_layout()
    return _save(fig, path)


def plot_replay_study(result: ReplayStudyResult, path: str | Path) -> Path:
    """Per bed (the town's recording, the shared agent's ratings), each configuration's excess
    over the model's own second answers on the held-out part (points, 95% interval) against
    its cost cut, δ dotted."""
    beds = result.beds
    fig, axes = _grid(len(beds), 2, width=5.0, height=3.8)
    if not beds:
        _empty(axes[0], "no recording")
    markers = {
        "tuned": "o",
        "static": "s",
        "lead": "*",
        "exact": "P",
        "audit": "D",
        "prove": "v",
        "serve": "^",
        "random": "x",
    }
    for ax, bed in zip(axes, beds, strict=False):
        drawn = False
        span = [100 * result.delta, 0.0]  # the excess axis: every interval, δ and 0 in view
        for i, row in enumerate(bed.rows):
            f = row.overall
            if f.excess is None:
                continue
            drawn = True
            y = f.excess
            low, high = f.excess_low or y, f.excess_upper or y
            span += [low, high]
            err = [[max(0.0, y - low)], [max(0.0, high - y)]]
            ax.errorbar(100 * f.cost_cut, y, yerr=err, fmt=markers[row.config], ms=6, capsize=3,
                        color=_color(row.mode, i), mfc=None if row.config == "tuned" else "white",
                        label=f"{row.mode}: {row.config}")  # fmt: skip
        ax.axhline(100 * result.delta, color="black", ls=":", lw=1)
        ax.axhline(0.0, color="gray", lw=0.6)
        _cost_cut_panel(ax, drawn, empty="nothing served", ylabel="excess (points)",
                        legend="upper left")  # fmt: skip
        ax.set_ylim(min(span) - 5, max(span) + 5)  # an excess may be negative
        ax.set_title(_short(f"{bed.name}: {bed.model}"), fontsize=9)
    fig.suptitle("Replay study: held-out part, excess over the model's own second answers")
    fig.tight_layout()
    return _save(fig, path)


# --- all -------------------------------------------------------------------------------------

# A plotter takes the result model its entry names; the dict cannot say which, hence Any.
_Plotter = Callable[[Any, Path], Path]

# name -> (result model, plotters); a plotter's figure is <name>.png, or <name>_<suffix>.png.
_FIGURES: dict[str, tuple[tuple[str, _Plotter], ...]] = {
    "collect": (("", plot_collect),),
    "similarity": (("", plot_similarity),),
    "correlation": (("", plot_correlation), ("groups", plot_correlation_groups)),
    "saturation": (("", plot_saturation),),
    "observed": (("", plot_observed),),
    "compare": (("", plot_compare),),
    "cost": (("", plot_cost),),
    "quality": (("", plot_quality),),
    "budget": (("", plot_budget),),
    "replay_study": (("", plot_replay_study),),
}


def plot_all(results_dir: str | Path) -> list[Path]:
    """Every figure whose ``<name>.json`` is in ``results_dir``, into ``results_dir/figures``.

    Missing results are skipped; e.g. ``correlation.json`` gives ``figures/correlation.png``
    and ``figures/correlation_groups.png``.
    """
    results_dir = Path(results_dir)
    out = results_dir / "figures"
    written: list[Path] = []
    for name, plotters in _FIGURES.items():
        source = results_dir / f"{name}.json"
        if not source.is_file():
            continue
        result = load_result(RESULT_MODELS[name], source)
        for suffix, plot in plotters:
            stem = f"{name}_{suffix}" if suffix else name
            written.append(plot(result, out / f"{stem}.png"))
    return written
