"""Every benchmark script starts: its imports resolve and its options parse (``--help``).

Benchmarks run for minutes to hours and no test runs them whole; this catches what breaks them
before anyone waits that long (a helper moved between scripts, a renamed public name).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(
    p
    for p in (ROOT / "benchmarks").glob("bench_*.py")
    if "argparse" in p.read_text(encoding="utf-8")
)


def test_the_benchmarks_are_found() -> None:
    assert len(SCRIPTS) >= 10


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_benchmark_answers_help(script: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, str(script), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "usage:" in result.stdout
