"""Free text in an answer: not blank, and not the answer format's own placeholder.

Every prompt shows its answer format with placeholders in angle brackets
(``{"summary": "<2 to 4 sentences>"}``). A small model often copies them verbatim; a standard
run on SmolLM2-135M did so in 28 of 62 reflection-insight answers. Such an answer is
well-formed JSON that says nothing, so it is invalid like any other: the town resubmits it
rather than remembering "<insight string>" as an insight. The check is a validator only, not
part of the JSON schema: the schema (and with it every cache table's key) stays as it was.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

__all__ = ["FreeText", "is_placeholder"]

# "<...>" at the start: the format's placeholders all open the text they stand for.
_PLACEHOLDER = re.compile(r"\s*<[^<>]*>")


def is_placeholder(text: str) -> bool:
    """Whether ``text`` starts with a ``<...>`` placeholder copied from the answer format."""
    return _PLACEHOLDER.match(text) is not None


def _checked(text: str) -> str:
    text = text.strip()
    if not text:
        raise ValueError("must not be blank")
    if is_placeholder(text):
        raise ValueError("repeats the answer format's placeholder instead of answering")
    return text


#: A free-text answer field: stripped, not blank, not a copied placeholder.
FreeText = Annotated[str, Field(min_length=1), AfterValidator(_checked)]
