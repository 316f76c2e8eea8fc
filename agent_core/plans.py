"""Plans as the LLM writes them, and the invariants a schedule must keep.

A plan item is ``{"start": "HH:MM", "end": "HH:MM", "activity": ..., "location": ...}`` within one
day. The checks here are what makes an answer *valid*: a daily plan, a decomposition and a
revision each have their own rules (count, minimum length, window, contiguity, known places).
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Sequence

from pydantic import BaseModel, Field, field_validator

from .clock import hhmm, parse_hhmm
from .text import FreeText

__all__ = ["TIME_PATTERN", "PlanItem", "check_schedule", "fit_to_window", "split_window"]

TIME_PATTERN = r"^([01][0-9]|2[0-4]):[0-5][0-9]$"


class PlanItem(BaseModel):
    """One entry of a plan; times are normalised to ``"HH:MM"`` on the way in."""

    # The pattern goes into the JSON schema, where constrained decoding (llama.cpp grammars,
    # OpenAI strict mode) keeps small models from writing the placeholder "HH:MM" itself.
    start: str = Field(pattern=TIME_PATTERN)
    end: str = Field(pattern=TIME_PATTERN)
    activity: FreeText
    location: str = Field(min_length=1)

    @field_validator("start", "end", mode="before")
    @classmethod
    def _time(cls, value: object) -> str:
        return hhmm(parse_hhmm(str(value)))

    @field_validator("location")
    @classmethod
    def _strip(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("must not be blank")
        return value

    @property
    def start_min(self) -> int:
        return parse_hhmm(self.start)

    @property
    def end_min(self) -> int:
        return parse_hhmm(self.end)

    @property
    def minutes(self) -> int:
        return self.end_min - self.start_min


def check_schedule(
    items: Sequence[PlanItem],
    *,
    count: tuple[int, int],
    min_minutes: int,
    window: tuple[int, int] | None = None,
    cover: bool = False,
    places: Collection[str] | None = None,
) -> None:
    """Raise ``ValueError`` unless ``items`` is a well-formed schedule.

    Always: ``count[0] <= len(items) <= count[1]``, each item at least ``min_minutes`` long,
    in time order without overlaps, inside ``window`` when given. With ``cover`` the items are
    also contiguous and span the window exactly (what a decomposition must do). With
    ``places`` every location must be one of them.
    """
    lo, hi = count
    if not lo <= len(items) <= hi:
        raise ValueError(f"expected {lo} to {hi} items, got {len(items)}")
    previous_end: int | None = None
    for i, item in enumerate(items, start=1):
        if item.minutes < min_minutes:
            raise ValueError(
                f"item {i} ({item.start}-{item.end}) is shorter than {min_minutes} minutes"
            )
        if previous_end is not None:
            if item.start_min < previous_end:
                raise ValueError(f"item {i} starts at {item.start}, before the previous one ends")
            if cover and item.start_min != previous_end:
                raise ValueError(f"item {i} does not start when the previous one ends")
        previous_end = item.end_min
        if places is not None and item.location not in places:
            raise ValueError(f"item {i}: unknown location {item.location!r}")
    if window is not None and items:
        start, end = window
        if items[0].start_min < start or items[-1].end_min > end:
            raise ValueError(f"items must lie within {hhmm(start)}-{hhmm(end)}")
        if cover and (items[0].start_min != start or items[-1].end_min != end):
            raise ValueError(f"items must cover {hhmm(start)}-{hhmm(end)} exactly")


def split_window(start: int, end: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous pieces covering ``[start, end]``, on 5-minute marks where possible."""
    if parts < 1 or end <= start:
        raise ValueError("need at least one part of a non-empty window")
    bounds = [start]
    for i in range(1, parts):
        raw = start + (end - start) * i / parts
        bounds.append(max(bounds[-1] + 1, min(end - 1, round(raw / 5.0) * 5)))
    bounds.append(end)
    return list(itertools.pairwise(bounds))


def fit_to_window(
    items: Sequence[PlanItem], start: int, end: int, *, min_minutes: int
) -> list[PlanItem]:
    """The deterministic fallback of a plan revision: clip every item to ``[start, end]`` and
    drop what becomes shorter than ``min_minutes`` or overlaps an earlier item."""
    out: list[PlanItem] = []
    cursor = start
    for item in sorted(items, key=lambda p: p.start_min):
        s, e = max(item.start_min, cursor), min(item.end_min, end)
        if e - s >= min_minutes:
            out.append(item.model_copy(update={"start": hhmm(s), "end": hhmm(e)}))
            cursor = e
    return out
