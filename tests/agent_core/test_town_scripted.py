"""ScriptedLLM: valid, deterministic answers drawn from the request's schema, never from the
prompt's prose; revisions of an earlier answer; injected faults."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from openai.types.chat import ChatCompletion

from agent_core import (
    TEMPLATES,
    Requirements,
    Template,
    TownCall,
    open_town_llm,
    revise,
    template,
    templates,
)
from agent_core.testing import ScriptedLLM
from llmcache import Mode
from llmcache.testing import HashEmbedder

BLOCK = (
    "Name: Mary Oliver (age 16, female)\nInnate traits: Creative, Empathetic, Social\n"
    "Daily routine: attend classes at Riverview High School; paint in her art corner\n"
    "Currently: Mary is painting.\nCurrent time: Monday, February 12, 2024, 09:00"
)
PLACES = ["Oliver Family House", "Riverview High School", "Singapore Coffee House"]
OPTIONS = ["continue painting", "use the Easel", "go somewhere else"]
PLAN = [
    {"start": "10:00", "end": "12:00", "activity": "painting", "location": "Oliver Family House"}
]

SAMPLES: dict[str, tuple[dict[str, Any], Requirements]] = {
    "importance score": ({"memory": "Easel in Oliver Family House is Idle"}, Requirements()),
    "initial plan generation": (
        {"date": "Monday", "yesterday": "-", "weekday": "Monday", "places": PLACES},
        Requirements(places=PLACES, window=("06:00", "24:00")),
    ),
    "plan decomposition": (
        {
            "activity": "painting",
            "location": PLACES[0],
            "start": "09:00",
            "end": "11:30",
            "places": PLACES,
        },
        Requirements(places=PLACES, window=("09:00", "11:30")),
    ),
    "future plan revision": (
        {
            "event": "Mary met Alice.",
            "remaining_activities": ["painting"],
            "remaining": json.dumps(PLAN),
            "start": "10:30",
            "end": "22:00",
            "places": PLACES,
        },
        Requirements(places=PLACES, window=("10:30", "22:00")),
    ),
    "finding location": (
        {
            "task": "painting in the art corner",
            "what": "areas",
            "options": ["Oliver Family House: Art Corner", "Oliver Family House: Kitchen"],
        },
        Requirements(options=["Oliver Family House: Art Corner", "Oliver Family House: Kitchen"]),
    ),
    "actor reaction": (
        {"current": "painting", "observation": "Easel is Idle", "options": OPTIONS},
        Requirements(options=OPTIONS),
    ),
    "high-level questions": ({"statements": ["Mary paints", "Mary met Alice"]}, Requirements()),
    "high-level insights": (
        {"question": "What does Mary love?", "statements": ["Mary paints", "Mary writes"]},
        Requirements(statements=2),
    ),
    "memory summary": ({"statements": ["Mary paints"]}, Requirements()),
    "new actor statuses": (
        {
            "actor": "Easel",
            "activity": "painting a tree",
            "area": "Oliver Family House: Art Corner",
        },
        Requirements(),
    ),
    "agent reaction": (
        {
            "current": "painting",
            "other": "Liam Oliver",
            "other_status": "making coffee",
            "memories": ["Liam is my brother"],
            "options": ["continue painting", "talk to Liam Oliver", "go somewhere else"],
        },
        Requirements(options=["continue painting", "talk to Liam Oliver", "go somewhere else"]),
    ),
    "relationship summary": (
        {"other": "Liam Oliver", "statements": ["Liam is my brother"]},
        Requirements(),
    ),
    "dialogue utterance": (
        {
            "other": "Liam Oliver",
            "place": "Oliver Family House",
            "relationship": "siblings",
            "current": "painting",
            "transcript": ["Liam Oliver: Hi!"],
            "count": "1",
        },
        Requirements(),
    ),
    "dialogue summary": (
        {"other": "Liam Oliver", "transcript": ["Liam Oliver: Hi!"]},
        Requirements(),
    ),
}


def request(t: Template[Any], model: str = "scripted") -> dict[str, Any]:
    """What the town sends for the category's sample: the prompt and the query's own schema."""
    slots, req = SAMPLES[t.category]
    return {
        "model": model,
        "messages": t.render(BLOCK, "Mary Oliver", slots),
        "response_format": t.response_format(req),
    }


def content(completion: ChatCompletion) -> str:
    text = completion.choices[0].message.content
    assert text is not None
    return text


def test_samples_cover_every_category() -> None:
    assert set(SAMPLES) == {t.category for t in TEMPLATES}


@pytest.mark.parametrize("t", TEMPLATES, ids=lambda t: t.category)
def test_every_category_gets_a_valid_answer_with_usage(t: Template[Any]) -> None:
    fake = ScriptedLLM()
    completion = fake.chat.completions.create(**request(t))
    assert isinstance(completion, ChatCompletion)
    assert completion.usage is not None and completion.usage.prompt_tokens > 0
    t.parse(content(completion), SAMPLES[t.category][1])  # raises if invalid
    assert fake.requests[t.category] == 1
    assert not fake.revisions  # a full prompt (even one holding JSON) is no revision


def test_answers_come_from_the_querys_schema() -> None:
    fake = ScriptedLLM()
    loc = json.loads(content(fake.chat.completions.create(**request(TEMPLATES[4]))))
    assert loc["location"] in SAMPLES["finding location"][1].options  # type: ignore[operator]
    plan = json.loads(content(fake.chat.completions.create(**request(TEMPLATES[1]))))
    assert {p["location"] for p in plan["plans"]} <= set(PLACES)
    assert 5 <= len(plan["plans"]) <= 7


def test_answers_are_deterministic_per_request_and_seed() -> None:
    for t in TEMPLATES:
        a = content(ScriptedLLM(seed=1).chat.completions.create(**request(t)))
        b = content(ScriptedLLM(seed=1).chat.completions.create(**request(t)))
        assert a == b


def test_malformed_answers_are_invalid_and_counted() -> None:
    fake = ScriptedLLM(malformed_rate=1.0)
    for t in TEMPLATES:
        for _ in range(8):  # every kind of fault, for every category
            answer = content(fake.chat.completions.create(**request(t)))
            with pytest.raises(ValueError):
                t.parse(answer, SAMPLES[t.category][1])
    assert sum(fake.malformed.values()) == 8 * len(TEMPLATES)


def test_the_superior_model_is_never_malformed() -> None:
    fake = ScriptedLLM(malformed_rate=1.0)
    for t in TEMPLATES:
        t.parse(
            content(fake.chat.completions.create(**request(t, "gpt-4o"))), SAMPLES[t.category][1]
        )
    assert sum(fake.malformed.values()) == 0


def test_messy_answers_need_lenient_parsing() -> None:
    fake = ScriptedLLM(messy_rate=1.0)
    strict_failures = 0
    for t in TEMPLATES:
        for _ in range(3):
            answer = content(fake.chat.completions.create(**request(t)))
            t.parse(answer, SAMPLES[t.category][1])
            try:
                t.response.model_validate_json(answer, strict=True)
            except ValueError:
                strict_failures += 1
    assert strict_failures > len(TEMPLATES)


def test_a_request_without_a_category_gets_no_json() -> None:
    completion = ScriptedLLM().chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}]
    )
    with pytest.raises(ValueError):
        json.loads(content(completion))


def test_rates_are_checked() -> None:
    with pytest.raises(ValueError):
        ScriptedLLM(malformed_rate=1.5)


def _calls() -> list[TownCall]:
    return [
        TownCall(
            category=t.category,
            agent="Mary Oliver",
            summary_block=BLOCK,
            slots={
                k: v if isinstance(v, str) else list(v) for k, v in SAMPLES[t.category][0].items()
            },
            requirements=SAMPLES[t.category][1],
        )
        for t in TEMPLATES
        for slots in [SAMPLES[t.category][0]]
    ]


def _reword(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace the wording of every template, the system prompt and the revision prompts."""
    for t in TEMPLATES:
        body = "Something else entirely. " + " / ".join("{" + s.name + "}" for s in t.slots)
        monkeypatch.setitem(
            templates._BY_CATEGORY,
            t.category,
            dataclasses.replace(t, body=body, answer_format="whatever JSON you like"),
        )
    monkeypatch.setattr(templates, "SYSTEM_PROMPT", "Play {name}.")
    monkeypatch.setattr(revise, "SYSTEM_PROMPT", "Play {name}.")
    monkeypatch.setattr(revise, "REVISION_MARKER", "Before, you said:")


def test_rewording_the_prompts_does_not_change_what_the_double_can_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = [call.messages() for call in _calls()]
    _reword(monkeypatch)
    fake = ScriptedLLM(seed=3)
    for call, before in zip(_calls(), original, strict=True):
        assert call.messages() != before  # the prose really changed
        for messages in (call.messages(), [{"role": "user", "content": "?"}]):
            completion = fake.chat.completions.create(
                model="scripted", messages=messages, response_format=call.response_format()
            )
            call.parse(content(completion))  # valid for the query, whatever the wording


def test_a_reworded_revision_is_still_recognised_and_revised(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _reword(monkeypatch)
    fake = ScriptedLLM()
    llm = open_town_llm(
        fake, model="scripted", cache_dir=tmp_path, mode=Mode.SERVE, embedder=HashEmbedder()
    )

    def plan(places: list[str]) -> Any:
        return llm.ask(
            template("initial plan generation"),
            agent="Mary Oliver",
            summary_block=BLOCK,
            slots={"date": "Monday", "yesterday": "-", "weekday": "Monday", "places": places},
            requirements=Requirements(places=places, window=("06:00", "24:00")),
        )

    try:
        first = plan(PLACES)
        second = plan(["Hobbs Cafe", "Johnson Park"])
    finally:
        llm.close()
    assert fake.revisions["initial plan generation"] == 1
    assert [(p.start, p.end, p.activity) for p in second.plans] == [
        (p.start, p.end, p.activity) for p in first.plans
    ]
    assert {p.location for p in second.plans} <= {"Hobbs Cafe", "Johnson Park"}
