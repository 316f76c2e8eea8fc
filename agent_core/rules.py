"""The study's rules for answers, each written once.

A rule is stated by the prompt, checked by the validator, and (for a schedule) narrows the
query's JSON schema; all three read it from here, and so does the town when it builds a
query (the day's window, whether a plan item is long enough to decompose, which leftovers a
revision may keep). Change a number here and the prompt, the check, the schema and the town
change together.

Nothing here imports llmcache.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from .clock import parse_hhmm
from .plans import check_schedule
from .requirements import Requirements
from .schemas import narrow_schedule

__all__ = [
    "DAY_WINDOW",
    "DECOMPOSITION_RULE",
    "INITIAL_PLAN_RULE",
    "INSIGHT_COUNT",
    "QUESTION_COUNT",
    "REACTION_MINUTES",
    "REVISION_RULE",
    "ReactionOptions",
    "ScheduleRule",
    "keeps_on",
]

#: The waking day a daily plan must fit in.
DAY_WINDOW = ("06:00", "24:00")

#: How long a reaction may keep an agent busy, in minutes.
REACTION_MINUTES = (10, 120)

_KEEP = "continue "
_LEAVE = "go somewhere else"


@dataclass(frozen=True)
class ReactionOptions:
    """The three options of a reaction, by what they mean: keep on with the current activity
    (the town then ignores the answer's activity and minutes), act (use the actor, talk to the
    other agent), or leave. A prompt lists them in a seeded random order: small models pick the
    first option they are shown, and with "continue" always first no agent ever talked."""

    keep: str
    act: str
    leave: str = _LEAVE

    @classmethod
    def of(cls, current: str, act: str) -> ReactionOptions:
        return cls(keep=f"{_KEEP}{current}", act=act)

    def shuffled(self, rng: random.Random) -> list[str]:
        """The options in the order ``rng`` draws."""
        shown = [self.keep, self.act, self.leave]
        rng.shuffle(shown)
        return shown


def keeps_on(option: str) -> bool:
    """Whether a reaction's option is the one that keeps the agent on its current activity."""
    return option.startswith(_KEEP)


#: Questions a reflection asks, and insights it draws per question.
QUESTION_COUNT = 3
INSIGHT_COUNT = 5


@dataclass(frozen=True)
class ScheduleRule:
    """The rules of one schedule-valued answer (the response field ``field``): how many items,
    how long each at least, whether they must cover the window exactly, and the window that
    applies when a query gives none."""

    field: str
    count: tuple[int, int]
    min_minutes: int
    cover: bool = False  # contiguous, spanning the window exactly
    default_window: tuple[str, str] | None = None

    @property
    def shortest_window(self) -> int:
        """The fewest minutes that can hold the fewest items this rule allows (at least one)."""
        return max(1, self.count[0]) * self.min_minutes

    def count_text(self) -> str:
        """The item count as a prompt states it: ``"2 or 3"``, ``"5 to 7"``."""
        lo, hi = self.count
        return f"{lo} or {hi}" if hi == lo + 1 else f"{lo} to {hi}"

    def window(self, req: Requirements) -> tuple[int, int] | None:
        """The query's window in minutes (the rule's default when the query has none)."""
        window = req.window or self.default_window
        return None if window is None else (parse_hhmm(window[0]), parse_hhmm(window[1]))

    def check(self, response: BaseModel, req: Requirements) -> None:
        """``ValueError`` unless the response's schedule keeps this rule for ``req``."""
        check_schedule(
            getattr(response, self.field),
            count=self.count,
            min_minutes=self.min_minutes,
            window=self.window(req),
            cover=self.cover,
            places=req.places,
        )

    def narrow(self, schema: dict[str, Any], req: Requirements) -> None:
        """Narrow a copy of the template's schema to the schedules this rule allows for ``req``."""
        narrow_schedule(
            schema,
            field=self.field,
            count=self.count,
            min_minutes=self.min_minutes,
            cover=self.cover,
            window=self.window(req),
            places=req.places,
        )


INITIAL_PLAN_RULE = ScheduleRule("plans", (5, 7), 60, default_window=DAY_WINDOW)
DECOMPOSITION_RULE = ScheduleRule("tasks", (2, 3), 30, cover=True)
REVISION_RULE = ScheduleRule("plans", (0, 8), 30)
