"""The published reference: Jeong (2024), "LLM caching", MSc thesis, Edinburgh, chapter 3.

These are the study's numbers as quoted in our issue tracker. They are only ever printed in the
"study" column of ``report.md``, beside ours; no experiment reads them as a result.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["STUDY"]

STUDY: Final[dict[str, Any]] = {
    "runs_prompts": [17_201, 23_600, 20_994, 18_908, 21_715],
    "run_days": 15.0,
    "agents": 8,
    "resubmission_rate": 0.0379,
    "superior_rate": 0.0147,
    "hours_of_data_per_day": 1 / 2.5,
    "similarity_full": "clusters in [0.9, 1]",
    "similarity_keyword": "spreads over [0.6, 1] with two peaks",
    "saturation_hours": {"full": 2.0, "keyword": 5.0},
    "pearson_r": {"full": 0.861, "keyword": 0.952},
    "compare": (
        "both between random and true, within each other's sigma; about 11% below true for "
        "the four simple groups; no better than random for plan making, actor reaction and "
        "memory reflection"
    ),
    "description_reduction": 0.627,
    "cost_no_cache_usd_per_6h": 3.3,
    "cost_total_usd": {"full": 1.11, "keyword": 0.65},
    "cost_reduction": {"full": 0.664, "keyword": 0.803},
    "usage_reduction": {"full": 0.766, "keyword": 0.842},
    "simple_groups": ["importance", "finding location", "memory summary", "new actor statuses"],
}
