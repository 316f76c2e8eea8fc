"""The thesis's chapter-3 caching study (Jeong 2024), reproduced on the town of ``agent_core``.

``python -m experiments reproduce --profile quick`` runs everything; see ``__main__``. What a
reader of the results needs is here: the profiles, every step's result model with
:func:`load_result`, and the figures (``plot_*``, one per result), which the notebooks draw with.

The figures are loaded on first use, not by ``import experiments``: they import matplotlib and
switch it to a headless backend, which a caller who only reads results (or runs the study's
other steps) should neither pay for nor have imposed on an interactive session.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._profiles import FULL, PROFILES, QUICK, STANDARD, Profile, get_profile
from ._results import (
    BudgetResult,
    CollectResult,
    CompareResult,
    CorrelationResult,
    CostResult,
    ObservedResult,
    QualityResult,
    ReplayCost,
    ReplayStudyResult,
    SaturationResult,
    SimilarityResult,
    load_result,
)

if TYPE_CHECKING:
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
        plot_replay_study,
        plot_saturation,
        plot_similarity,
    )

__all__ = [
    "FULL",
    "PROFILES",
    "QUICK",
    "STANDARD",
    "BudgetResult",
    "CollectResult",
    "CompareResult",
    "CorrelationResult",
    "CostResult",
    "ObservedResult",
    "Profile",
    "QualityResult",
    "ReplayCost",
    "ReplayStudyResult",
    "SaturationResult",
    "SimilarityResult",
    "get_profile",
    "load_result",
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


def __getattr__(name: str) -> Any:
    # PEP 562: called only for names not bound above, so the figures load when first asked for.
    if name.startswith("plot_"):
        from . import _plots

        if name in _plots.__all__:
            return getattr(_plots, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
