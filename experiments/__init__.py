"""The thesis's chapter-3 caching study (Jeong 2024), reproduced on the town of ``agent_core``.

``python -m experiments reproduce --profile quick`` runs everything; see ``__main__``. The
profiles and every step's result model are here; the figures are in :mod:`experiments.plots`.
"""

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
    SaturationResult,
    SimilarityResult,
    load_result,
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
    "SaturationResult",
    "SimilarityResult",
    "get_profile",
    "load_result",
]
