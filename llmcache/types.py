"""The data types that cross llmcache's boundaries: stored entries, candidates and what a hit
made of them, tables, similarities, token usage, prices, per-table statistics, and the raw
response a cached ``with_raw_response`` call returns."""

from __future__ import annotations

from ._client import CachedRawResponse
from ._ledger import Price, PriceTable, TableStats
from ._template import FilledPrompt
from ._types import (
    Adapted,
    CacheEntry,
    Candidate,
    Partition,
    Similarity,
    Usage,
    Verdict,
)

__all__ = [
    "Adapted",
    "CacheEntry",
    "CachedRawResponse",
    "Candidate",
    "FilledPrompt",
    "Partition",
    "Price",
    "PriceTable",
    "Similarity",
    "TableStats",
    "Usage",
    "Verdict",
]
