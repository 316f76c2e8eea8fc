"""benchmarks/server_time.py reads a llama-server log into where the time went."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from server_time import breakdowns, render, seconds

LOG = """\
0.00.100.000 I srv  proxy_reques: proxying request to model small on port 4000
[4000] 0.01.000.000 I slot launch_slot_: id  0 | task 1
[4000] 0.01.500.000 I slot launch_slot_: id  1 | task 2
[4000] 0.02.000.000 I slot print_timing: id  0 | task 1 | prompt eval time = 400.00 ms / 200 tokens
[4000] 0.02.000.001 I slot print_timing: id  0 | task 1 | eval time = 600.00 ms / 30 tokens
[4000] 0.02.000.010 I slot      release: id  0 | task 1
[4000] 0.03.000.000 I slot print_timing: id  1 | task 2 | prompt eval time = 100.00 ms / 50 tokens
[4000] 0.03.000.001 I slot print_timing: id  1 | task 2 | eval time = 1400.00 ms / 70 tokens
[4000] 0.03.000.010 I slot      release: id  1 | task 2
[4000] 1.00.000.000 I slot launch_slot_: id  0 | task 3
[4000] 1.01.000.000 I slot      release: id  0 | task 3
[5000] 0.00.500.000 I slot launch_slot_: id  0 | task 0
[5000] 0.04.500.000 I slot      release: id  0 | task 0
"""


def test_log_stamps_are_minutes_seconds_milliseconds_microseconds() -> None:
    assert seconds("33.37.842.140") == pytest.approx(33 * 60 + 37.84214)
    assert seconds("1.02.03.004.005") == pytest.approx(3600 + 123.004005)


def test_busy_idle_and_concurrency_per_model() -> None:
    found = breakdowns(LOG.splitlines())
    assert set(found) == {"small", "port 5000"}  # the router named one port, not the other
    small = found["small"]
    assert small.requests == 3
    assert small.span_s == pytest.approx(60.0)
    # Busy: 1.0-3.00001 (two slots over 1.5-2.00001) and 60-61; the rest is idle.
    assert small.busy_s == pytest.approx(3.0, abs=1e-3)
    assert small.concurrent_s[2] == pytest.approx(0.5, abs=1e-3)
    assert small.idle_s == pytest.approx(57.0, abs=1e-3)
    assert (small.prompt_tokens, small.generated_tokens) == (250, 100)
    assert small.generation_s == pytest.approx(2.0)
    text = "\n".join(render(small))
    assert "20.0 ms per token" in text and "500 tokens/s" in text
    assert found["port 5000"].busy_s == pytest.approx(4.0)
