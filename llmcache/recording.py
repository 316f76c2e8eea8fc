"""The dataset of cached calls: one JSONL line per call (and per refused answer), for
replaying a workload or studying it."""

from __future__ import annotations

from ._recorder import RecordedCall, Recorder, read_records

__all__ = ["RecordedCall", "Recorder", "read_records"]
