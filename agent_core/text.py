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

import re
from typing import Annotated

from pydantic import AfterValidator, Field

__all__ = [
    "FreeText",
    "copies_placeholder",
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


def _checked(text: str) -> str:
    text = text.strip()
    if not text:
        raise ValueError("must not be blank")
    if is_placeholder(text):
        raise ValueError("repeats the answer format's placeholder instead of answering")
    return text


#: A free-text answer field: stripped, not blank, not a copied placeholder.
FreeText = Annotated[str, Field(min_length=1), AfterValidator(_checked)]
