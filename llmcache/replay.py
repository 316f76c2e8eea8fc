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
    equivalences_for,
    replay,
)
from ._replay_calls import ReplayCall, ReplayInput, calls_from_records, read_calls, read_recording

__all__ = [
    "CallResult",
    "Figures",
    "RecordedUpstream",
    "ReplayCall",
    "ReplayInput",
    "ReplayReport",
    "WrongHit",
    "calls_from_records",
    "equivalences_for",
    "read_calls",
    "read_recording",
    "replay",
]
