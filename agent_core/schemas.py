"""The JSON schema of one query: the template's schema narrowed by the query's requirements.

Constrained decoding (llama.cpp grammars, OpenAI structured outputs) makes a model write only what
the schema allows. The template's own schema says the shape; the query's schema also says what
differs per query, so that a small model cannot get it wrong:

- places, options: ``enum`` of this query's allowed values;
- statement numbers an insight cites: an integer range;
- free text: a length bound, so a rambling model closes its string inside ``max_tokens``, and a
  letter first (:func:`agent_core.text.text_pattern`), so it cannot copy the format's
  ``<placeholder>`` instead of answering;
- schedules: item counts, and times that are *valid by construction*. The schema language has no
  "later than the previous item", so the order is carried by the structure instead:
  - a schedule that must cover its window exactly (a decomposition) is one alternative per way
    of cutting the window into items on a time grid -- every alternative valid;
  - any other schedule is one alternative per item count, each item's start and end drawn from
    its own stretch of the window (item ``i`` starts near the ``i``-th cut and ends near the
    next one), so items are in order, do not overlap and are long enough.

What a schema still cannot say stays in the template's validator, which checks every answer
(served ones too). Nothing here imports llmcache.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Sequence
from typing import Any

from .clock import hhmm
from .plans import split_window
from .requirements import Requirements
from .text import text_pattern

__all__ = [
    "MAX_ALTERNATIVES",
    "MAX_ANSWER_TOKENS",
    "TEXT_LIMITS",
    "free_text",
    "narrow_choice",
    "narrow_insights",
    "narrow_location",
    "narrow_schedule",
    "schedule_alternatives",
    "time_marks",
    "worst_case_tokens",
]

#: At most this many alternatives in a schedule's ``anyOf``: each one is a branch of the
#: grammar the server checks every sampled token against.
MAX_ALTERNATIVES = 64

# Lengths of free text fields: room for a good answer, and an end a small model must reach.
TEXT_LIMITS = {
    "activity": 60,
    "location": 80,
    "choice": 120,
    "summary": 300,
    "status": 80,
    "insight": 120,
    "question": 120,
    "utterance": 240,
}

#: The most ``max_tokens`` a query's worst case may ask for.
MAX_ANSWER_TOKENS = 2048

# Worst-case token counts for the parts of an answer: a constrained decoder may spell a string
# one character per token, and writes punctuation, a key and the whitespace around it per field
# (counted as characters too: two-space indentation three levels deep and a newline fit), and
# per array item.
_FIELD_TOKENS = 14
_ITEM_TOKENS = 8
_NUMBER_TOKENS = 4


def time_marks(start: int, end: int, step: int) -> list[int]:
    """Minutes on multiples of ``step`` inside ``[start, end]``, plus both ends."""
    first = -(-start // step) * step
    marks = {start, end, *range(first, end + 1, step)}
    return sorted(m for m in marks if start <= m <= end)


def free_text(name: str, cap: int | None = None) -> dict[str, Any]:
    """The schema of the free-text field ``name`` (a key of :data:`TEXT_LIMITS`, or shorter:
    ``cap``) in a query's schema. ``maxLength`` is kept beside the pattern for decoders that
    read it and for :func:`worst_case_tokens`."""
    limit = min(TEXT_LIMITS[name], cap) if cap is not None else TEXT_LIMITS[name]
    return {"type": "string", "minLength": 1, "maxLength": limit, "pattern": text_pattern(limit)}


def _limit_text(node: Any) -> None:
    """Make every free string of a known field name a :func:`free_text`."""
    if isinstance(node, dict):
        for name, sub in (node.get("properties") or {}).items():
            if (
                isinstance(sub, dict)
                and sub.get("type") == "string"
                and "enum" not in sub
                and "const" not in sub
                and "pattern" not in sub
                and name in TEXT_LIMITS
            ):
                node["properties"][name] = free_text(name, sub.get("maxLength"))
        for value in node.values():
            _limit_text(value)
    elif isinstance(node, list):
        for value in node:
            _limit_text(value)


def limit_text(schema: dict[str, Any]) -> None:
    _limit_text(schema)
    items = schema.get("properties", {}).get("questions", {}).get("items")
    if isinstance(items, dict):  # a list of plain strings has no field name to go by
        items.update(free_text("question"))


def worst_case_tokens(schema: dict[str, Any], node: Any = None) -> int:
    """The most tokens any answer the schema allows can take (see ``_FIELD_TOKENS``).

    Sent as the query's ``max_tokens``, it guarantees that an answer is never cut off before its
    closing brace, however the model fills its strings. ``ValueError`` for a string without a
    ``maxLength`` or an array without ``maxItems`` (unbounded).
    """
    node = schema if node is None else node
    if "$ref" in node:
        return worst_case_tokens(schema, schema["$defs"][node["$ref"].rsplit("/", 1)[-1]])
    if "anyOf" in node:
        return max(worst_case_tokens(schema, alt) for alt in node["anyOf"])
    if "const" in node:
        return len(str(node["const"])) + 2
    if "enum" in node:
        return max(len(str(v)) for v in node["enum"]) + 2
    kind = node.get("type")
    if kind == "object":
        return 2 + sum(
            _FIELD_TOKENS + len(key) + worst_case_tokens(schema, sub)
            for key, sub in node["properties"].items()
        )
    if kind == "array":
        if "prefixItems" in node:
            items = [worst_case_tokens(schema, i) + _ITEM_TOKENS for i in node["prefixItems"]]
            return 2 + sum(items)
        if "maxItems" not in node:
            raise ValueError("an array without maxItems has no worst case")
        items_max = int(node["maxItems"])
        return 2 + items_max * (worst_case_tokens(schema, node["items"]) + _ITEM_TOKENS)
    if kind == "string":
        if "maxLength" not in node:
            raise ValueError("a string without maxLength has no worst case")
        return int(node["maxLength"]) + 2
    if kind in ("integer", "number"):
        return _NUMBER_TOKENS
    if kind == "boolean":
        return 5
    raise ValueError(f"no worst case for schema node {node}")


def narrow_location(schema: dict[str, Any], req: Requirements) -> None:
    if req.options:
        schema["properties"]["location"] = {"type": "string", "enum": list(req.options)}


def narrow_choice(schema: dict[str, Any], req: Requirements) -> None:
    if req.options:
        schema["properties"]["choice"] = {"type": "string", "enum": list(req.options)}


def narrow_insights(schema: dict[str, Any], req: Requirements) -> None:
    if req.statements is None:
        return
    evidence = schema["$defs"]["Insight"]["properties"]["evidence"]
    evidence["items"] = {"type": "integer", "minimum": 1, "maximum": req.statements}
    evidence["maxItems"] = min(5, req.statements)


def _grid(start: int, end: int) -> int:
    """A time grid fine enough to choose on, coarse enough to keep the grammar small."""
    span = end - start
    return 5 if span <= 120 else 15 if span <= 6 * 60 else 30


def _item(start: Sequence[int], end: Sequence[int], location: dict[str, Any]) -> dict[str, Any]:
    def times(values: Sequence[int]) -> dict[str, Any]:
        texts = [hhmm(v) for v in values]
        return (
            {"type": "string", "const": texts[0]}
            if len(texts) == 1
            else {
                "type": "string",
                "enum": texts,
            }
        )

    return {
        "type": "object",
        "properties": {
            "start": times(start),
            "end": times(end),
            "activity": free_text("activity"),
            "location": location,
        },
        "required": ["start", "end", "activity", "location"],
        "additionalProperties": False,
    }


def _tuple(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "array", "prefixItems": items, "minItems": len(items), "maxItems": len(items)}


def _covering(
    start: int, end: int, counts: range, min_minutes: int, location: dict[str, Any]
) -> list[dict[str, Any]]:
    """Every way to cut ``[start, end]`` into ``n`` contiguous items on a time grid (the grid
    coarsens until there are at most MAX_ALTERNATIVES)."""
    for step in (_grid(start, end), 15, 30, 60, 120):
        inner = [m for m in time_marks(start, end, step) if start < m < end]
        alternatives: list[dict[str, Any]] = []
        for n in counts:
            for cuts in itertools.combinations(inner, n - 1):
                bounds = [start, *cuts, end]
                if all(b - a >= min_minutes for a, b in itertools.pairwise(bounds)):
                    items = [_item([a], [b], location) for a, b in itertools.pairwise(bounds)]
                    alternatives.append(_tuple(items))
        if len(alternatives) <= MAX_ALTERNATIVES:
            return alternatives
    return []


def _stretched(
    start: int, end: int, counts: range, min_minutes: int, location: dict[str, Any]
) -> list[dict[str, Any]]:
    """One alternative per count: item ``i`` starts in the first part of the ``i``-th stretch
    of the window and ends in its last part, with at least ``min_minutes`` between."""
    alternatives: list[dict[str, Any]] = []
    step = _grid(start, end)
    for n in counts:
        if n == 0 or n * min_minutes > end - start:
            continue
        items = []
        for a, b in split_window(start, end, n):
            slack = max(0, (b - a - min_minutes) // 2)
            starts = [m for m in time_marks(a, b, step) if m <= a + slack]
            ends = [m for m in time_marks(a, b, step) if m >= b - slack]
            items.append(_item(starts, ends, location))
        alternatives.append(_tuple(items))
    return alternatives


def schedule_alternatives(
    *,
    window: tuple[int, int],
    count: tuple[int, int],
    min_minutes: int,
    cover: bool,
    places: Sequence[str] | None,
) -> list[dict[str, Any]]:
    """The array schemas a schedule may take (see the module docstring)."""
    start, end = window
    location: dict[str, Any] = (
        {"type": "string", "enum": list(places)} if places else free_text("location")
    )
    counts = range(max(count[0], 1), count[1] + 1)
    if cover:
        return _covering(start, end, counts, min_minutes, location)
    return _stretched(start, end, counts, min_minutes, location)


def narrow_schedule(
    schema: dict[str, Any],
    *,
    field: str,
    count: tuple[int, int],
    min_minutes: int,
    cover: bool = False,
    window: tuple[int, int] | None,
    places: Sequence[str] | None,
) -> None:
    """Replace the schedule field's schema by this query's alternatives (when the query has a
    ``window``, in minutes); ``places`` alone narrow every item's location."""
    if window is None:
        if places:
            item = schema["$defs"]["PlanItem"]["properties"]
            item["location"] = {"type": "string", "enum": list(places)}
        return
    alternatives = schedule_alternatives(
        window=window, count=count, min_minutes=min_minutes, cover=cover, places=places
    )
    if not alternatives:  # an empty window, or more ways than we enumerate: leave the shape
        return
    schema["properties"][field] = (
        alternatives[0] if len(alternatives) == 1 else {"anyOf": alternatives}
    )
    if not any("$ref" in str(v) for v in schema["properties"].values()):
        schema.pop("$defs", None)


def narrowed(schema: dict[str, Any], narrow: Any, req: Requirements | None) -> dict[str, Any]:
    """A copy of ``schema`` with text limits, narrowed by ``narrow`` for ``req``."""
    result = copy.deepcopy(schema)
    limit_text(result)
    if narrow is not None and req is not None:
        narrow(result, req)
    return result
