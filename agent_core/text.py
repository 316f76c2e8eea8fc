"""Free text in an answer: not blank, and not the answer format's own placeholder.

Every prompt shows its answer format with placeholders in angle brackets
(``{"summary": "<2 to 4 sentences>"}``). A small model often copies them verbatim; a standard
run on SmolLM2-135M did so in 28 of 62 reflection-insight answers, and copies without the
brackets ("2 to 4 sentences") follow once brackets are refused. Such an answer is well-formed
JSON that says nothing, so it is invalid like any other: the town resubmits it rather than
remembering "<insight string>" as an insight. :class:`FreeText` refuses text that opens with a
bracket; ``Template.parse`` refuses any string of the answer that is one of its format's
placeholders (:func:`copies_placeholder`). Both are validation only, not part of the JSON
schema, so the schemas (and with them the cache tables' keys) stay as they were.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

__all__ = ["FreeText", "copies_placeholder", "is_placeholder", "placeholder_patterns"]

# A bracket at the start: the format's placeholders open the text they stand for, and copies
# come with the bracket ("<insight_1", "{2 to 4 sentences}, ...") more often than not.
_PLACEHOLDER = re.compile(r"\s*[<{]")
_INNER = re.compile(r"<([^<>]*)>")
_NOT_LETTER = re.compile(r"[^a-z]+")


def is_placeholder(text: str) -> bool:
    """Whether ``text`` opens like a placeholder copied from an answer format (``<`` or ``{``)."""
    return _PLACEHOLDER.match(text) is not None


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
