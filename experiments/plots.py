"""The study's figures, one function per experiment's result (what the notebooks draw with).

Kept apart from ``import experiments``, which needs no plotting library: importing this module
loads matplotlib.
"""

from __future__ import annotations

from ._plots import (
    plot_all,
    plot_budget,
    plot_collect,
    plot_compare,
    plot_correlation,
    plot_correlation_groups,
    plot_cost,
    plot_observed,
    plot_quality,
    plot_saturation,
    plot_similarity,
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
    "plot_saturation",
    "plot_similarity",
]
