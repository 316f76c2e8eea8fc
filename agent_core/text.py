"""Free text in an answer: not blank, and not the answer format's own placeholder.

Every prompt shows its answer format with placeholders in angle brackets
(``{"summary": "<2 to 4 sentences>"}``). A small model often copies them verbatim; a standard
run on SmolLM2-135M did so in 28 of 62 reflection-insight answers, and copies without the
brackets ("2 to 4 sentences") follow once brackets are refused. Such an answer is well-formed
JSON that says nothing, so it is invalid like any other: the town resubmits it rather than
remembering "<insight string>" as an insight. :class:`FreeText` refuses text that opens with a
bracket; ``Template.parse`` refuses any string of the answer that is one of its format's
placeholders (:func:`copies_placeholder`).

Validation alone makes a small model try again, and again: in a standard run with it, 100 of
175 insight answers were refused, 19 of them escalated. So each query's JSON schema also steers
the decoder (:func:`text_pattern`): free text opens with a letter and holds no quote, backslash
or control character, which a constrained decoder cannot then get wrong. The pattern is part of
the per-query schema only, not of the template's schema the cache tables are keyed by, and it is
stricter than validation: an answer from elsewhere (a hosted model, the cache) that opens with a
digit or a quotation mark is still valid.
"""

from __future__ import annotations

import itertools
import re
from typing import Annotated

from pydantic import AfterValidator, Field

__all__ = [
    "FreeText",
    "copies_placeholder",
    "degenerate",
    "format_literals",
    "is_placeholder",
    "placeholder_patterns",
    "text_pattern",
]

# A bracket at the start: the format's placeholders open the text they stand for, and copies
# come with the bracket ("<insight_1", "{2 to 4 sentences}, ...") more often than not.
_PLACEHOLDER = re.compile(r"\s*[<{]")
_INNER = re.compile(r"<([^<>]*)>")
_NOT_LETTER = re.compile(r"[^a-z]+")


def is_placeholder(text: str) -> bool:
    """Whether ``text`` opens like a placeholder copied from an answer format (``<`` or ``{``)."""
    return _PLACEHOLDER.match(text) is not None


def text_pattern(max_length: int) -> str:
    """The ``pattern`` of a free-text field of at most ``max_length`` characters in a query's
    schema: a letter first (never a placeholder's bracket, a list number or a time), then no
    character that JSON would have to escape. The length is in the pattern because llama.cpp's
    grammar ignores ``maxLength`` beside a ``pattern``."""
    if max_length < 1:
        raise ValueError("max_length must be at least 1")
    return rf'^[A-Za-z][^"\\\x00-\x1f]{{0,{max_length - 1}}}$'


def _letters(text: str) -> str:
    return _NOT_LETTER.sub("", text.lower())


def placeholder_patterns(answer_format: str) -> tuple[re.Pattern[str], ...]:
    """One pattern per ``<...>`` placeholder of ``answer_format``, matched against an answer's
    letters only (so "2 to 4 sentences" and "<2 to 4 sentences>" both match); ``{name}``
    stands for any name."""
    patterns = []
    for inner in _INNER.findall(answer_format):
        parts = [re.escape(_letters(part)) for part in inner.split("{name}")]
        if any(parts):
            patterns.append(re.compile("[a-z]*".join(parts)))
    return tuple(patterns)


def copies_placeholder(text: str, patterns: tuple[re.Pattern[str], ...]) -> bool:
    """Whether ``text`` is one of the format's placeholders without its brackets."""
    letters = _letters(text)
    return bool(letters) and any(p.fullmatch(letters) for p in patterns)


# A quoted value of an answer format with no placeholder in it: a literal that stands for a
# value, such as the "HH:MM" of a plan's times. Only those with a letter: a real value of
# the same field ("06:00") never holds one, so an answer holding the literal copied it.
_QUOTED = re.compile(r'"([^"<>{}]*[A-Za-z][^"<>{}]*)"\s*[,}\]]')


def format_literals(answer_format: str) -> tuple[str, ...]:
    """The literal stand-ins of an answer format (``HH:MM``): quoted values that are not
    keys and hold no ``<placeholder>``. An answer string that contains one echoes the
    format instead of answering (standard run 3 of 2026-11-25 carried ``HH:MM`` as an
    activity or status into the keywords of 331 of its 3,213 calls)."""
    return tuple(dict.fromkeys(_QUOTED.findall(answer_format)))


_WORD = re.compile(r"[A-Za-z]+(?:'[a-z]+)?|\d+(?:[.:]\d+)?")
_NUMBER = re.compile(r"\d+(?:[.:]\d+)?")


def degenerate(text: str) -> str | None:
    """Why ``text`` is not an answer a person would give, or ``None``: a list of numbers
    ("Males, females, ages 22, 26, 21, 21, 1, 1, 2, 2, ...": five or more numbers making up
    at least 40% of its words), or runaway repetition (the same word four times running, or
    twelve or more words of which fewer than a third differ). Short answers pass: a one-word
    plan ("Birthing") says little, but it is not a decoding failure, and what it says is the
    model's to answer for (the study's samples show such answers to a reader)."""
    words = _WORD.findall(text)
    if not words:
        return None
    numbers = sum(1 for w in words if _NUMBER.fullmatch(w))
    if numbers >= 5 and numbers >= 0.4 * len(words):
        return f"a list of numbers ({numbers} of its {len(words)} words)"
    lowered = [w.lower() for w in words]
    run = 1
    for previous, word in itertools.pairwise(lowered):
        run = run + 1 if word == previous else 1
        if run >= 4:
            return f"runaway repetition ({word!r} {run} times running)"
    if len(lowered) >= 12 and len(set(lowered)) < len(lowered) / 3:
        return f"runaway repetition ({len(set(lowered))} different words of {len(lowered)})"
    return None


def _checked(text: str) -> str:
    text = text.strip()
    if not text:
        raise ValueError("must not be blank")
    if is_placeholder(text):
        raise ValueError("repeats the answer format's placeholder instead of answering")
    return text


#: A free-text answer field: stripped, not blank, not a copied placeholder.
FreeText = Annotated[str, Field(min_length=1), AfterValidator(_checked)]
