"""How far an answer may stray from the true answer of the same query: each template's tolerance.

A cached answer served for a query is *acceptable* when, after its modifier, it meets every
requirement of the query (:meth:`Template.parse` with the query's :class:`Requirements`) and
agrees with the query's true answer within its template's tolerance
(:meth:`Template.acceptable`). The tolerances, one kind per kind of answer:

- :class:`Within` -- a number within ``n`` of the truth (importance: ±1);
- :class:`SameOption` -- the same option of the query's list (finding location);
- :class:`SameReaction` -- the same option, and when the option acts (not "continue ...") a
  similar activity (actor reaction);
- :class:`SamePlaces` -- a schedule at the truth's places for most of the truth's minutes
  (the plan templates);
- :class:`SimilarText` -- free text whose embedding cosine to the truth's reaches a bound
  (questions, insights, summaries);
- :class:`SameStatus` -- a status that says the same: equal once normalised, or similar text.

The text bound is not a constant: :func:`calibrated_bound` sets it per category from pairs of
true answers of one and the same query (a prompt answered twice, in repeated runs), so a cached
answer passes when it is as close to the truth as nine in ten true re-answers are.

Nothing here imports llmcache or an embedder: the caller passes a :data:`Similarity`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from .requirements import Requirements, canonical_option
from .rules import keeps_on

__all__ = [
    "DEFAULT_TEXT_BOUND",
    "MIN_CALIBRATION_PAIRS",
    "TEXT_QUANTILE",
    "SameOption",
    "SamePlaces",
    "SameReaction",
    "SameStatus",
    "SimilarText",
    "Similarity",
    "TextAgreement",
    "Tolerance",
    "Verdict",
    "Within",
    "calibrated_bound",
]

#: The cosine of two texts' embeddings, in ``[-1, 1]``.
Similarity = Callable[[str, str], float]

#: A text tolerance's bound is the quantile of true-pair cosines that lets this share of true
#: re-answers fail: 0.1 accepts what is at least as close as nine in ten true re-answers are.
TEXT_QUANTILE = 0.1
#: Fewer true pairs than this do not calibrate a bound on their own (the caller pools them).
MIN_CALIBRATION_PAIRS = 5
#: The cosine bound used when no data calibrates one; the report says when it was used.
DEFAULT_TEXT_BOUND = 0.8


class Verdict(BaseModel):
    """Whether an answer is acceptable for a query, and if not, why."""

    acceptable: bool
    reason: str = ""


@dataclass(frozen=True)
class TextAgreement:
    """What a text tolerance compares with: a similarity and the category's calibrated bound."""

    similarity: Similarity
    bound: float

    def agrees(self, answer: str, truth: str) -> bool:
        if _normal(answer) == _normal(truth):
            return True  # no embedding needed to see that equal texts agree
        return self.similarity(answer, truth) >= self.bound


@dataclass(frozen=True)
class Tolerance:
    """One field's tolerance. ``check`` returns ``None`` when ``answer`` agrees with ``truth``
    (both validated responses of the same query), else the reason it does not."""

    field: str

    @property
    def uses_text(self) -> bool:
        """Whether the check needs a :class:`TextAgreement`."""
        return False

    def text(self, response: BaseModel) -> str | None:
        """The text this tolerance compares by embedding (for calibration), if any."""
        return None

    def describe(self) -> str:  # pragma: no cover - every subclass says what it checks
        raise NotImplementedError

    def check(
        self,
        answer: BaseModel,
        truth: BaseModel,
        requirements: Requirements,
        text: TextAgreement | None,
    ) -> str | None:  # pragma: no cover
        raise NotImplementedError


@dataclass(frozen=True)
class Within(Tolerance):
    """A number within ``n`` of the truth's."""

    n: int = 1

    def describe(self) -> str:
        return f"`{self.field}` within ±{self.n} of the truth's"

    def check(
        self,
        answer: BaseModel,
        truth: BaseModel,
        requirements: Requirements,
        text: TextAgreement | None,
    ) -> str | None:
        a, t = getattr(answer, self.field), getattr(truth, self.field)
        return None if abs(a - t) <= self.n else f"{self.field} {a} is not within ±{self.n} of {t}"


def _option(value: str, options: Sequence[str] | None) -> str:
    # Validation has already mapped an answer onto the query's options; without options the
    # comparison ignores case and surrounding space, as the option check itself does.
    if options:
        return canonical_option(value, options) or value
    return value.strip().lower()


@dataclass(frozen=True)
class SameOption(Tolerance):
    """The same option of the query's list."""

    def describe(self) -> str:
        return f"the same `{self.field}` option"

    def check(
        self,
        answer: BaseModel,
        truth: BaseModel,
        requirements: Requirements,
        text: TextAgreement | None,
    ) -> str | None:
        a = _option(getattr(answer, self.field), requirements.options)
        t = _option(getattr(truth, self.field), requirements.options)
        return None if a == t else f"{self.field} {a!r} is not the true {t!r}"


@dataclass(frozen=True)
class SameReaction(SameOption):
    """The same option; when that option acts, also an activity similar to the truth's.

    When the option keeps the agent on its current activity ("continue ...",
    :func:`~agent_core.rules.keeps_on`) the town ignores the activity and minutes, so only the
    other options compare them."""

    activity: str = "activity"

    @property
    def uses_text(self) -> bool:
        return True

    def text(self, response: BaseModel) -> str | None:
        return str(getattr(response, self.activity))

    def describe(self) -> str:
        return (
            f"the same `{self.field}` option; unless it is the continue option, a similar "
            f"`{self.activity}`"
        )

    def check(
        self,
        answer: BaseModel,
        truth: BaseModel,
        requirements: Requirements,
        text: TextAgreement | None,
    ) -> str | None:
        reason = super().check(answer, truth, requirements, text)
        if reason is not None:
            return reason
        options = requirements.options
        chosen = _option(getattr(truth, self.field), options) if options else None
        if chosen is not None and keeps_on(chosen):
            return None
        return _text_reason(self.activity, self.text(answer), self.text(truth), text)


def _text_reason(
    field: str, answer: str | None, truth: str | None, text: TextAgreement | None
) -> str | None:
    if text is None:
        raise ValueError(f"comparing {field!r} needs a TextAgreement (similarity and bound)")
    if text.agrees(answer or "", truth or ""):
        return None
    return f"{field} is less similar to the truth's than the bound {text.bound:.3f}"


@dataclass(frozen=True)
class SamePlaces(Tolerance):
    """A schedule at the truth's places: of the minutes the true schedule covers, at least
    ``share`` are covered by the answer at the same place (a minute the answer leaves empty
    counts against it). Validation has already checked the query's window and places."""

    share: float = 0.5

    def describe(self) -> str:
        return (
            f"`{self.field}` at the true place for at least {self.share:.0%} of the minutes "
            "the true schedule covers"
        )

    def check(
        self,
        answer: BaseModel,
        truth: BaseModel,
        requirements: Requirements,
        text: TextAgreement | None,
    ) -> str | None:
        got = _place_at(getattr(answer, self.field))
        want = _place_at(getattr(truth, self.field))
        if not want:
            return None if not got else "the truth plans nothing, the answer plans something"
        same = sum(1 for minute, place in want.items() if got.get(minute) == place)
        share = same / len(want)
        if share >= self.share:
            return None
        return f"at the true place for {share:.0%} of the true minutes (< {self.share:.0%})"


def _place_at(items: Sequence[Any]) -> dict[int, str]:
    """Minute of the day -> the (case-folded) place a schedule puts the agent at."""
    out: dict[int, str] = {}
    for item in items:
        for minute in range(item.start_min, item.end_min):
            out.setdefault(minute, str(item.location).strip().lower())
    return out


def _joined(value: Any) -> str:
    """A field's text: a list is one line per element (an insight by its sentence)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_joined(v) for v in value)
    if isinstance(value, BaseModel):
        first = next(iter(type(value).model_fields))
        return _joined(getattr(value, first))
    return str(value)


@dataclass(frozen=True)
class SimilarText(Tolerance):
    """Free text at least as similar to the truth's as the category's calibrated bound."""

    @property
    def uses_text(self) -> bool:
        return True

    def text(self, response: BaseModel) -> str | None:
        return _joined(getattr(response, self.field))

    def describe(self) -> str:
        return f"`{self.field}` text: embedding cosine to the truth's ≥ the calibrated bound"

    def check(
        self,
        answer: BaseModel,
        truth: BaseModel,
        requirements: Requirements,
        text: TextAgreement | None,
    ) -> str | None:
        return _text_reason(self.field, self.text(answer), self.text(truth), text)


_WORDS = re.compile(r"[a-z0-9]+")
# Words that change how a status reads, not what it says ("is being used" = "used").
_FILLER = frozenset({"a", "an", "the", "is", "are", "being", "currently", "now", "it"})


def _normal(text: str) -> str:
    return " ".join(w for w in _WORDS.findall(text.lower()) if w not in _FILLER)


@dataclass(frozen=True)
class SameStatus(SimilarText):
    """A status that says the same: equal once case, punctuation and filler words ("is",
    "being", articles) are dropped, or similar text by the calibrated bound."""

    def describe(self) -> str:
        return f"`{self.field}` equal once normalised, or similar text (calibrated bound)"


def calibrated_bound(cosines: Sequence[float], quantile: float = TEXT_QUANTILE) -> float | None:
    """The text bound from cosines of pairs of true answers of the same query: their
    ``quantile`` (linear interpolation), or ``None`` when fewer than
    :data:`MIN_CALIBRATION_PAIRS` pairs calibrate nothing.

    >>> calibrated_bound([0.9, 0.95, 1.0, 0.7, 0.85])
    0.76
    """
    if not 0.0 <= quantile <= 1.0:
        raise ValueError(f"quantile must be in [0, 1], got {quantile}")
    values = sorted(c for c in cosines if not math.isnan(c))
    if len(values) < MIN_CALIBRATION_PAIRS:
        return None
    position = quantile * (len(values) - 1)
    lo = math.floor(position)
    hi = min(lo + 1, len(values) - 1)
    return round(values[lo] + (values[hi] - values[lo]) * (position - lo), 12)
