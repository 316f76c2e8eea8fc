"""docs/guarantees.md names a test for every guarantee: each of those tests must exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_test_the_guarantees_name_exists() -> None:
    doc = (ROOT / "docs" / "guarantees.md").read_text(encoding="utf-8")
    # Test names, not the names of test files.
    named = {
        n for n in re.findall(r"\btest_\w+", doc) if not any((ROOT / "tests").rglob(f"{n}.py"))
    }
    defined = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        defined |= set(re.findall(r"^def (test_\w+)", path.read_text(encoding="utf-8"), re.M))
    assert len(named) > 30
    assert named <= defined, sorted(named - defined)
