"""The thesis's chapter-3 caching study (Jeong 2024), reproduced on the town of ``agent_core``.

``python -m experiments reproduce --profile quick`` runs everything; see ``__main__``.
"""

from ._profiles import FULL, PROFILES, QUICK, STANDARD, Profile, get_profile
from ._results import (
    CollectResult,
    CompareResult,
    CorrelationResult,
    CostResult,
    ObservedResult,
    QualityResult,
    SaturationResult,
    SimilarityResult,
    load_result,
)

__all__ = [
    "FULL",
    "PROFILES",
    "QUICK",
    "STANDARD",
    "CollectResult",
    "CompareResult",
    "CorrelationResult",
    "CostResult",
    "ObservedResult",
    "Profile",
    "QualityResult",
    "SaturationResult",
    "SimilarityResult",
    "get_profile",
    "load_result",
]
