"""What one query's answer must satisfy beyond its schema (:class:`Requirements`), and how an
answer names one of the options a prompt offers (:func:`canonical_option`).

A small module of its own because everything about a query reads it: the schemas narrowed to
one query, the rules a plan keeps, the tolerance an answer is judged by, and the templates.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from .clock import parse_hhmm

__all__ = ["Requirements", "canonical_option"]


class Requirements(BaseModel):
    """What one query's answer must satisfy beyond its schema.

    ``places``: the only allowed plan locations (the structures the agent knows).
    ``options``: the choices the prompt offers (finding location, reactions).
    ``window``: ``("HH:MM", "HH:MM")`` a plan must fit in (a decomposition must cover it).
    ``statements``: how many numbered statements an insight may cite.
    """

    places: list[str] | None = None
    options: list[str] | None = None
    window: tuple[str, str] | None = None
    statements: int | None = Field(default=None, ge=1)

    def window_minutes(self) -> tuple[int, int] | None:
        if self.window is None:
            return None
        return parse_hhmm(self.window[0]), parse_hhmm(self.window[1])


def canonical_option(answer: str, options: Sequence[str]) -> str | None:
    """The option ``answer`` names: exactly, ignoring case, quotes and surrounding space, by its
    1-based number, or by the unique last part of a ``"Structure: Area"`` option. ``None`` if
    it names none."""
    if answer in options:
        return answer
    key = answer.strip().strip("\"'.").strip().lower()
    for option in options:
        if option.lower() == key:
            return option
    if key.isdigit() and 1 <= int(key) <= len(options):
        return options[int(key) - 1]
    # An area named without its structure ("Kitchen" for "Wilson Family House: Kitchen") is
    # still unambiguous when exactly one option ends with it.
    tails = [o for o in options if o.lower().endswith(": " + key)]
    return tails[0] if len(tails) == 1 else None
