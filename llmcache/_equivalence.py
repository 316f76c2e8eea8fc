"""Equivalences by name: the one place a configuration file's ``"exact"`` or ``"within:1"``
becomes an :class:`~llmcache.verification.Equivalence`, and an equivalence becomes its name
again when a configuration is written."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._errors import ConfigurationError

__all__ = ["Within", "equivalence_name", "equivalence_named", "one_number", "same_answer"]


def same_answer(cached: str, fresh: str) -> bool:
    """The default equivalence of two answers: equal JSON values when both parse as JSON (key
    order and spacing do not matter), else equal texts after collapsing whitespace and case.

    Strict on purpose: a paraphrased free-text answer counts as different, so the labels err
    towards "wrong" and the learned threshold towards strict. Give a category a looser
    ``equivalence`` (option identity, one field of a parsed answer, embedding similarity)
    where a different wording is still a right answer.
    """
    try:
        return bool(json.loads(cached) == json.loads(fresh))
    except (ValueError, TypeError):
        pass
    return " ".join(cached.split()).casefold() == " ".join(fresh.split()).casefold()


# A number as answers write it: "7", "-2", "7.5", "1e3"; not the "3" inside "gpt-3.5".
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")


def _numbers(value: Any) -> list[float]:
    """Every number in a parsed JSON value (booleans are not numbers)."""
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [float(value)] if math.isfinite(value) else []
    if isinstance(value, str):
        return [float(m) for m in _NUMBER.findall(value)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    return []


def one_number(answer: str) -> float | None:
    """The number an answer holds, when it holds exactly one (``"7"``, ``{"rating": 7}``,
    ``"Rating: 7"``); ``None`` when it holds none or several, which no numeric tolerance can
    compare."""
    try:
        found = _numbers(json.loads(answer))
    except (ValueError, TypeError):
        found = _numbers(answer)
    return found[0] if len(found) == 1 else None


@dataclass(frozen=True)
class Within:
    """Two answers agree when each holds one number and they differ by at most ``tolerance``;
    an answer that holds no number, or several, agrees only with an answer that
    :func:`~llmcache.verification.same_answer` calls the same (a rating of ``"7"`` and one of
    ``{"rating": 8}`` agree within 1; ``"7"`` and ``"seven"`` do not)."""

    tolerance: float = 1.0

    @property
    def name(self) -> str:
        value = int(self.tolerance) if float(self.tolerance).is_integer() else self.tolerance
        return f"within:{value}"

    def __call__(self, cached: str, fresh: str) -> bool:
        a, b = one_number(cached), one_number(fresh)
        if a is None or b is None:
            return same_answer(cached, fresh)
        # A rounding error must not turn "within 1" into "within 0.9999999".
        return abs(a - b) <= self.tolerance + 1e-9


def equivalence_named(name: str) -> Callable[[str, str], bool]:
    """The equivalence a configuration names: ``"exact"`` (:func:`same_answer`: equal JSON
    values, else equal texts up to whitespace and case) or ``"within:N"`` (:class:`Within`:
    one number each, at most ``N`` apart)."""
    text = name.strip().casefold()
    if text in ("exact", "same_answer"):
        return same_answer
    if text.startswith("within:"):
        try:
            tolerance = float(text.split(":", 1)[1])
        except ValueError:
            tolerance = -1.0
        if math.isfinite(tolerance) and tolerance >= 0:
            return Within(tolerance)
    raise ConfigurationError(
        f"no equivalence named {name!r}: name 'exact' or 'within:N' (N a number >= 0)"
    )


def equivalence_name(equivalence: Any) -> str | None:
    """The name :func:`equivalence_named` reads back to ``equivalence``; ``None`` for one
    that has no name (a function of the caller's own, which no file can hold)."""
    if equivalence is same_answer:
        return "exact"
    if isinstance(equivalence, Within):
        return equivalence.name
    return None
