"""Simulated time: whole minutes since midnight of the first simulated day.

Integers rather than datetimes because the simulation compares and adds times millions of times
per run; only prompts and records turn them into text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, timedelta

__all__ = ["MINUTES_PER_DAY", "Clock", "hhmm", "parse_hhmm"]

MINUTES_PER_DAY = 24 * 60

_TIME = re.compile(r"^\s*(\d{1,2})(?::(\d{2}))?\s*([ap]\.?m\.?)?\s*$", re.IGNORECASE)


def hhmm(minute_of_day: int) -> str:
    """``"HH:MM"`` for a minute of the day; 1440 is written ``"24:00"`` (the end of the day)."""
    if not 0 <= minute_of_day <= MINUTES_PER_DAY:
        raise ValueError(f"minute of day out of range: {minute_of_day}")
    return f"{minute_of_day // 60:02d}:{minute_of_day % 60:02d}"


def parse_hhmm(text: str) -> int:
    """Minute of the day from ``"07:30"``, ``"7:30"``, ``"7 am"``, ``"7:30 PM"`` or ``"24:00"``.

    Lenient because models write times in many ways; anything else raises ``ValueError``.
    """
    match = _TIME.match(str(text))
    if not match:
        raise ValueError(f"not a time of day: {text!r}")
    hours, minutes = int(match.group(1)), int(match.group(2) or 0)
    suffix = (match.group(3) or "").lower().replace(".", "")
    if suffix:
        if not 1 <= hours <= 12:
            raise ValueError(f"not a time of day: {text!r}")
        hours = hours % 12 + (12 if suffix == "pm" else 0)
    value = hours * 60 + minutes
    if minutes >= 60 or value > MINUTES_PER_DAY:
        raise ValueError(f"not a time of day: {text!r}")
    return value


@dataclass(frozen=True)
class Clock:
    """Turns simulation minutes into calendar text for prompts and records."""

    start_date: date

    @staticmethod
    def day(now: int) -> int:
        return now // MINUTES_PER_DAY

    @staticmethod
    def minute_of_day(now: int) -> int:
        return now % MINUTES_PER_DAY

    def date_of(self, now: int) -> date:
        return self.start_date + timedelta(days=self.day(now))

    def weekday(self, now: int) -> str:
        return self.date_of(now).strftime("%A")

    def describe_date(self, now: int) -> str:
        d = self.date_of(now)
        return f"{d.strftime('%A')}, {d.strftime('%B')} {d.day}, {d.year}"

    def describe(self, now: int) -> str:
        """``"Monday, February 12, 2024, 08:30"``."""
        return f"{self.describe_date(now)}, {hhmm(self.minute_of_day(now))}"

    def iso(self, now: int) -> str:
        """An ISO-8601 timestamp, for records."""
        return f"{self.date_of(now).isoformat()}T{hhmm(self.minute_of_day(now))}"
