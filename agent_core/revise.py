"""Revision prompts: how a cached answer is rewritten for a new query (the ``revise`` modifier).

They follow the study's rules:

- **initial plan**: reuse the earlier daily plan and change *only* the locations, to places the
  agent knows today;
- **general plan revision** (decomposition and future plan revision): change locations and move
  timestamps so the plan fits the new time window; plans that no longer fit may be skipped (a
  decomposition must still cover its window, as its rule in :mod:`agent_core.rules` says);
- **actor reaction**: pick the query option most similar to the earlier choice and fill it in
  for the current situation.

The prompts are short on purpose: their tokens are what a revised hit costs. They carry the
query's requirements with the same markers as the full prompts ("Time window:", "Places (JSON
list):", "Options (JSON list):"), so any model that can answer the template can answer its
revision.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from .requirements import Requirements
from .responses import parse_lenient
from .templates import SYSTEM_PROMPT, template

__all__ = ["REVISION_BUILDERS", "REVISION_MARKER", "RevisionRequest", "build_revision"]

REVISION_MARKER = "Earlier answer (JSON):"


@dataclass(frozen=True)
class RevisionRequest:
    """What a revision needs: the cached answer, and the query's name, rules and situation."""

    category: str
    name: str
    cached_content: str
    requirements: Requirements
    context: Mapping[str, str] = field(default_factory=dict)


def _cached(req: RevisionRequest) -> BaseModel | None:
    response: type[BaseModel] = template(req.category).response
    try:
        return parse_lenient(response, req.cached_content)
    except ValueError:
        return None


def _answer_format(req: RevisionRequest) -> str:
    return template(req.category).answer_format.replace("{name}", req.name)


def _places(req: RevisionRequest) -> str:
    return json.dumps(req.requirements.places or [], ensure_ascii=False)


def _initial_plan(req: RevisionRequest, cached: BaseModel) -> str:
    return (
        f"Revise an earlier answer. Below is a daily plan {req.name} made on an earlier day. "
        "Reuse it for today, changing ONLY the locations: every location must be one of the "
        "places listed. Keep every activity and every time exactly as it is.\n"
        f"{REVISION_MARKER} {cached.model_dump_json()}\n"
        f"Places (JSON list): {_places(req)}\n"
        f"Answer in JSON format: {_answer_format(req)}"
    )


def _plan(req: RevisionRequest, cached: BaseModel) -> str | None:
    window = req.requirements.window
    if window is None:
        return None
    start, end = window
    schedule = template(req.category).schedule
    if schedule is None:
        return None
    if schedule.cover:
        rule = (
            f"The result must be {schedule.count_text()} consecutive tasks of at least "
            f"{schedule.min_minutes} minutes each that together cover exactly {start} to {end}."
        )
    else:
        rule = f"Each plan must be at least {schedule.min_minutes} minutes long."
    return (
        f"Revise an earlier answer. Below is a plan {req.name} made earlier. Rewrite it so that "
        f"it fits the time window {start} to {end}: change the locations to places listed and "
        f"move the timestamps to fit the window; you may skip plans that no longer fit. {rule}\n"
        f"{REVISION_MARKER} {cached.model_dump_json()}\n"
        f"Time window: {start} to {end}\n"
        f"Places (JSON list): {_places(req)}\n"
        f"Answer in JSON format: {_answer_format(req)}"
    )


def _reaction(req: RevisionRequest, cached: BaseModel) -> str | None:
    options = req.requirements.options
    if not options:
        return None
    current = req.context.get("current", "")
    observation = req.context.get("observation", "")
    return (
        f"Revise an earlier answer. Below is how {req.name} reacted earlier to a similar "
        f"observation. Now {req.name} is {current} and notices: {observation}. Pick the option "
        "most similar to the earlier choice, exactly as written, and fill in what "
        f"{req.name} will do now and for how many minutes.\n"
        f"{REVISION_MARKER} {cached.model_dump_json()}\n"
        f"Observation: {observation}\n"
        f"Options (JSON list): {json.dumps(options, ensure_ascii=False)}\n"
        f"Answer in JSON format: {_answer_format(req)}"
    )


REVISION_BUILDERS: dict[str, Callable[[RevisionRequest, Any], str | None]] = {
    "initial plan generation": _initial_plan,
    "plan decomposition": _plan,
    "future plan revision": _plan,
    "actor reaction": _reaction,
}


def build_revision(req: RevisionRequest) -> list[dict[str, str]] | None:
    """The revision prompt's messages, or ``None`` when the cached answer cannot be revised
    (unreadable, or the query lacks what the revision needs): the cache then treats the
    lookup as a miss."""
    builder = REVISION_BUILDERS.get(req.category)
    cached = _cached(req)
    if builder is None or cached is None:
        return None
    text = builder(req, cached)
    if text is None:
        return None
    return [
        {"role": "system", "content": SYSTEM_PROMPT.format(name=req.name)},
        {"role": "user", "content": text},
    ]
