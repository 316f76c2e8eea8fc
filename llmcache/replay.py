"""Replaying recorded traffic through any cache configuration, offline, and choosing settings
from it: ``python -m llmcache replay`` and ``python -m llmcache tune`` (docs/replay-and-tune.md).

The recording answers as the model (:class:`RecordedUpstream`), the real
:class:`~llmcache.CachedLLM` caches in between, and every served answer is graded against the
call's true answer by its category's equivalence (:class:`ReplayReport`).
"""

from __future__ import annotations

from ._replay import (
    CallResult,
    Figures,
    RecordedUpstream,
    ReplayReport,
    WrongHit,
    embedding_texts,
    equivalences_for,
    figures,
    replay,
)
from ._replay_calls import ReplayCall, ReplayInput, calls_from_records, read_calls, read_recording
from ._tune import CategoryChoice, Setting, TuneResult, check_mask, select, tune

__all__ = [
    "CallResult",
    "CategoryChoice",
    "Figures",
    "RecordedUpstream",
    "ReplayCall",
    "ReplayInput",
    "ReplayReport",
    "Setting",
    "TuneResult",
    "WrongHit",
    "calls_from_records",
    "check_mask",
    "embedding_texts",
    "equivalences_for",
    "figures",
    "read_calls",
    "read_recording",
    "replay",
    "select",
    "tune",
]
