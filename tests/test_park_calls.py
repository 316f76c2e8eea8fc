"""The shared agent's memories as replayable calls (benchmarks/park_calls.py)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from park_calls import PARK, park_calls  # noqa: E402  (a benchmark helper, on the path above)

pytestmark = pytest.mark.skipif(
    not (PARK / "nodes.json").exists(),
    reason="../shared/benchmarks/park_demo_isabella is absent (shared development data)",
)


def test_the_rated_memories_become_park_prompts_with_their_ratings() -> None:
    calls = park_calls()
    kinds = Counter(c.category for c in calls)
    # About 395 rated memories once idle events and daily-plan thoughts are left out.
    assert 380 <= len(calls) <= 400 and kinds["poignancy_chat"] >= 1
    assert not any("is idle" in (c.keywords or [""])[0] for c in calls)
    assert not any((c.keywords or [""])[0].startswith("This is Isabella") for c in calls)
    first = calls[0].messages[0]["content"]
    assert first.startswith("Here is a brief description of Isabella Rodriguez.\nName: ")
    assert "Current Date: Monday February 13" in first and "!<INPUT" not in first
    assert first.endswith("Rate (return a number between 1 to 10):")
    assert all(1 <= int(c.answer) <= 10 for c in calls)
    assert [c.time for c in calls] == sorted(c.time or 0 for c in calls)
    # Identical memories rated more than once: the model's own spread.
    repeated = Counter((c.keywords or [""])[0] for c in calls)
    assert sum(1 for n in repeated.values() if n > 1) > 50
