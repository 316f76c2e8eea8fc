"""Plan invariants: daily plans, decompositions (contiguous, within the window, 2-3 chunks of at
least 30 minutes) and revisions, both as validation rules and as what the agents produce."""

from __future__ import annotations

import itertools
import random

import pytest

from agent_core import PlanItem, check_schedule, hhmm, parse_hhmm
from agent_core.plans import fit_to_window, split_window


def item(start: str, end: str, activity: str = "reading", location: str = "Home") -> PlanItem:
    return PlanItem(start=start, end=end, activity=activity, location=location)


@pytest.mark.parametrize(
    ("text", "minute"),
    [
        ("07:30", 450),
        ("7:30", 450),
        ("7 am", 420),
        ("7:30 PM", 1170),
        ("12 am", 0),
        ("24:00", 1440),
    ],
)
def test_times_parse_leniently(text: str, minute: int) -> None:
    assert parse_hhmm(text) == minute
    assert item(text if minute < 1440 else "23:00", "24:00").end == "24:00"


@pytest.mark.parametrize("text", ["25:00", "7:75", "noon", "13 pm", ""])
def test_bad_times_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_hhmm(text)


def test_hhmm_round_trips() -> None:
    assert all(parse_hhmm(hhmm(m)) == m for m in range(0, 1441, 7))


def test_decomposition_rules() -> None:
    window = (parse_hhmm("09:00"), parse_hhmm("12:00"))
    good = [item("09:00", "10:00"), item("10:00", "11:30"), item("11:30", "12:00")]
    check_schedule(good, count=(2, 3), min_minutes=30, window=window, cover=True)
    gap = [item("09:00", "10:00"), item("10:30", "12:00")]
    overlap = [item("09:00", "10:30"), item("10:00", "12:00")]
    short = [item("09:00", "09:20"), item("09:20", "12:00")]
    outside = [item("08:30", "10:00"), item("10:00", "12:00")]
    uncovered = [item("09:00", "10:00"), item("10:00", "11:00")]
    too_many = [item(hhmm(540 + 30 * i), hhmm(570 + 30 * i)) for i in range(6)]
    for bad in (gap, overlap, short, outside, uncovered, too_many):
        with pytest.raises(ValueError):
            check_schedule(bad, count=(2, 3), min_minutes=30, window=window, cover=True)


def test_unknown_places_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown location"):
        check_schedule(
            [item("09:00", "10:00", location="Mars")], count=(1, 1), min_minutes=30, places=["Home"]
        )


def test_split_window_is_contiguous_and_exact() -> None:
    rng = random.Random(5)
    for _ in range(200):
        start = rng.randrange(0, 1200)
        end = start + rng.randrange(60, 240)
        parts = rng.randint(1, 3)
        spans = split_window(start, end, parts)
        assert spans[0][0] == start and spans[-1][1] == end
        assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
        assert all(e > s for s, e in spans)


def test_fit_to_window_clips_and_drops() -> None:
    plans = [item("08:00", "10:00", "a"), item("10:00", "10:40", "b"), item("11:00", "15:00", "c")]
    fitted = fit_to_window(plans, parse_hhmm("10:20"), parse_hhmm("14:00"), min_minutes=30)
    assert [(p.start, p.end, p.activity) for p in fitted] == [("11:00", "14:00", "c")]
