"""Response schemas of the 14 prompt categories, and lenient parsing of model answers.

Models answer JSON in many near-miss shapes (inside code fences, with prose around it, a bare
number for a one-field object, ``"true"`` for ``true``). :func:`lenient_json` recovers the object;
pydantic's lax mode then coerces numeric and boolean strings. Anything still wrong is invalid:
the caller resubmits rather than guessing.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, Field

from .plans import PlanItem
from .rules import (
    DECOMPOSITION_RULE,
    INITIAL_PLAN_RULE,
    INSIGHT_COUNT,
    QUESTION_COUNT,
    REACTION_MINUTES,
    REVISION_RULE,
)
from .text import FreeText

__all__ = [
    "ActorReactionResponse",
    "AgentReactionResponse",
    "DecompositionResponse",
    "ImportanceBatchResponse",
    "ImportanceResponse",
    "InitialPlanResponse",
    "Insight",
    "InsightsResponse",
    "LocationResponse",
    "PlanRevisionResponse",
    "QuestionsResponse",
    "StatusResponse",
    "SummaryResponse",
    "UtteranceResponse",
    "lenient_json",
    "parse_lenient",
    "strict_schema",
]

M = TypeVar("M", bound=BaseModel)

_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?(.*?)```", re.DOTALL)


class ImportanceResponse(BaseModel):
    score: int = Field(ge=1, le=10)


class ImportanceBatchResponse(BaseModel):
    """The ratings of several memories asked in one prompt, in the order listed."""

    scores: list[Annotated[int, Field(ge=1, le=10)]] = Field(min_length=1)


class InitialPlanResponse(BaseModel):
    plans: list[PlanItem] = Field(
        min_length=INITIAL_PLAN_RULE.count[0], max_length=INITIAL_PLAN_RULE.count[1]
    )


class DecompositionResponse(BaseModel):
    tasks: list[PlanItem] = Field(
        min_length=DECOMPOSITION_RULE.count[0], max_length=DECOMPOSITION_RULE.count[1]
    )


class PlanRevisionResponse(BaseModel):
    plans: list[PlanItem] = Field(max_length=REVISION_RULE.count[1])


class LocationResponse(BaseModel):
    location: str = Field(min_length=1)


class ActorReactionResponse(BaseModel):
    choice: str = Field(min_length=1)
    activity: FreeText
    minutes: int = Field(ge=REACTION_MINUTES[0], le=REACTION_MINUTES[1])


class AgentReactionResponse(BaseModel):
    choice: str = Field(min_length=1)
    activity: FreeText
    minutes: int = Field(ge=REACTION_MINUTES[0], le=REACTION_MINUTES[1])


class QuestionsResponse(BaseModel):
    questions: list[FreeText] = Field(min_length=QUESTION_COUNT, max_length=QUESTION_COUNT)


class Insight(BaseModel):
    insight: FreeText
    evidence: list[int] = Field(min_length=1)


class InsightsResponse(BaseModel):
    insights: list[Insight] = Field(min_length=INSIGHT_COUNT, max_length=INSIGHT_COUNT)


class SummaryResponse(BaseModel):
    summary: FreeText


class StatusResponse(BaseModel):
    status: Annotated[FreeText, Field(max_length=100)]


class UtteranceResponse(BaseModel):
    utterance: FreeText
    end_conversation: bool


def lenient_json(content: str) -> Any:
    """The JSON value in ``content``: plain, inside a code fence, or the outermost ``{...}``
    embedded in prose. Raises ``ValueError`` when there is none."""
    text = content.strip()
    fenced = _FENCE.search(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        return json.loads(text)
    except ValueError:
        pass
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        try:
            return json.loads(text[start : end + 1])
        except ValueError:
            pass
    raise ValueError("the answer holds no JSON object")


def parse_lenient(model: type[M], content: str) -> M:
    """Validate ``content`` against ``model`` after lenient recovery of the JSON.

    A bare value for a one-field model is wrapped (``7`` → ``{"score": 7}``), and keys are
    matched case-insensitively, because both are common near-misses of small models.
    """
    data = lenient_json(content)
    fields = list(model.model_fields)
    if not isinstance(data, dict):
        if len(fields) != 1:
            raise ValueError(f"expected a JSON object with keys {fields}")
        data = {fields[0]: data}
    else:
        lowered = {str(k).strip().lower(): v for k, v in data.items()}
        data = {f: lowered[f.lower()] for f in fields if f.lower() in lowered}
    return model.model_validate(data)


def strict_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model.model_json_schema()`` made acceptable to strict structured outputs: every object
    closed (``additionalProperties: false``) with all its properties required, no titles or
    defaults. Deterministic, since the schema is part of the cache's partition key.

    A fresh copy each call (callers may change it); built once per model, because pydantic's
    schema generation would otherwise dominate the town's own overhead."""
    loaded: dict[str, Any] = json.loads(_strict_schema_text(model))
    return loaded


@functools.cache
def _strict_schema_text(model: type[BaseModel]) -> str:
    schema = copy.deepcopy(model.model_json_schema())

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            node.pop("title", None)
            node.pop("default", None)
            if node.get("type") == "object" and "properties" in node:
                node["additionalProperties"] = False
                node["required"] = list(node["properties"])
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(schema)
    return json.dumps(schema)
