"""The 14 declared templates: categories, groups, modifiers, keyword slots, schemas, parsing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_core import CATEGORIES, GROUPS, TEMPLATES, Requirements, template
from agent_core.llm import cache_config, category_policy
from agent_core.revise import REVISION_BUILDERS
from agent_core.templates import category_of_schema_name
from llmcache import Choose, Mode, Read, Revise

EXPECTED = {
    # category: (group, modifier; None = bypass)
    "importance score": ("importance", "read"),
    "initial plan generation": ("plan making and revision", "revise"),
    "plan decomposition": ("plan making and revision", "revise"),
    "future plan revision": ("plan making and revision", "revise"),
    "finding location": ("finding location", "choose"),
    "actor reaction": ("actor reaction", "revise"),
    "high-level questions": ("memory reflection", "read"),
    "high-level insights": ("memory reflection", "read"),
    "memory summary": ("memory summary", "read"),
    "new actor statuses": ("new actor statuses", "read"),
    "agent reaction": ("dialogue", None),
    "relationship summary": ("dialogue", None),
    "dialogue utterance": ("dialogue", None),
    "dialogue summary": ("dialogue", None),
}


def test_all_fourteen_categories_with_the_studys_groups_and_modifiers() -> None:
    assert len(TEMPLATES) == 14
    assert {t.category: (t.group, t.modifier) for t in TEMPLATES} == EXPECTED
    assert GROUPS == (
        "importance",
        "plan making and revision",
        "finding location",
        "actor reaction",
        "memory reflection",
        "memory summary",
        "new actor statuses",
        "dialogue",
    )
    assert {t.group for t in TEMPLATES} == set(GROUPS)
    assert set(CATEGORIES) == set(EXPECTED)


def test_keyword_slots_as_the_study_declares_them() -> None:
    assert template("importance score").keyword_slots == ("memory",)
    assert template("finding location").keyword_slots == ("task", "options")
    for t in TEMPLATES:
        assert t.keyword_slots, f"{t.category} declares no keyword slot"
        assert set(t.keyword_slots) <= {s.name for s in t.slots}


def test_every_revise_template_has_a_revision_builder() -> None:
    revise = {t.category for t in TEMPLATES if t.modifier == "revise"}
    assert revise == set(REVISION_BUILDERS)


def _closed(node: Any) -> list[str]:
    """Paths of objects in a JSON schema that are not closed, strict-mode style."""
    bad: list[str] = []
    if isinstance(node, dict):
        if node.get("type") == "object" and "properties" in node:
            if node.get("additionalProperties") is not False:
                bad.append("open object")
            if set(node.get("required", [])) != set(node["properties"]):
                bad.append("optional property")
        if "title" in node or "default" in node:
            bad.append("title/default")
        for value in node.values():
            bad += _closed(value)
    elif isinstance(node, list):
        for value in node:
            bad += _closed(value)
    return bad


@pytest.mark.parametrize("t", TEMPLATES, ids=lambda t: t.category)
def test_response_format_is_strict_json_schema_named_by_category(t: Any) -> None:
    fmt = t.response_format()
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["strict"] is True
    assert category_of_schema_name(fmt["json_schema"]["name"]) == t.category
    assert _closed(fmt["json_schema"]["schema"]) == []
    # Deterministic: the format is part of the cache's partition key.
    assert json.dumps(fmt, sort_keys=True) == json.dumps(t.response_format(), sort_keys=True)


def test_render_is_summary_block_then_answer_format_then_body() -> None:
    t = template("finding location")
    messages = t.render(
        "Name: Alice Wilson (age 17, female)",
        "Alice Wilson",
        {"task": "practising basketball", "what": "areas", "options": ["Gym", "Library"]},
    )
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "Alice Wilson" in messages[0]["content"]
    user = messages[1]["content"]
    assert user.startswith(
        "Name: Alice Wilson (age 17, female)\n\n"
        'Answer in JSON format: {"location": "<one of the options>"}\n\n'
    )
    assert user.endswith('Options (JSON list): ["Gym", "Library"]')
    assert t.keywords({"task": "practising basketball", "options": ["Gym", "Library"]}) == [
        "practising basketball",
        "Gym",
        "Library",
    ]
    with pytest.raises(KeyError):
        t.render("x", "Alice Wilson", {"task": "t"})


def test_numbered_statements_are_rendered_for_citation() -> None:
    user = template("high-level insights").render(
        "", "Noah Smith", {"question": "q?", "statements": ["a", "b"]}
    )[1]["content"]
    assert "1. a\n2. b" in user


@pytest.mark.parametrize(
    "content",
    [
        '{"score": 7}',
        '```json\n{"score": 7}\n```',
        'Sure, here it is: {"score": 7}. Anything else?',
        '{"score": "7"}',
        '{"Score": 7}',
        "7",
    ],
)
def test_lenient_parsing_accepts_near_misses(content: str) -> None:
    assert template("importance score").parse(content).score == 7


def test_string_booleans_are_accepted() -> None:
    answer = template("dialogue utterance").parse(
        '{"utterance": "Hi!", "end_conversation": "true"}'
    )
    assert answer.end_conversation is True


@pytest.mark.parametrize(
    "content",
    ["", "I would say seven.", '{"score": 11}', '{"score": 0}', '{"rating": 7}', '{"score": 7'],
)
def test_invalid_answers_are_refused(content: str) -> None:
    with pytest.raises(ValueError):
        template("importance score").parse(content)


def test_choice_must_be_one_of_the_querys_options_and_is_canonicalised() -> None:
    t = template("actor reaction")
    req = Requirements(options=["continue reading", "use the Bench", "go somewhere else"])
    ok = t.parse('{"choice": "Use the bench", "activity": "sitting", "minutes": 20}', req)
    assert ok.choice == "use the Bench"
    by_number = t.parse('{"choice": "3", "activity": "walking", "minutes": 20}', req)
    assert by_number.choice == "go somewhere else"
    areas = Requirements(options=["Oliver Family House: Kitchen", "Victoria Park: Lawn"])
    short = template("finding location").parse('{"location": "kitchen"}', areas)
    assert short.location == "Oliver Family House: Kitchen"
    with pytest.raises(ValueError):
        t.parse('{"choice": "dance", "activity": "dancing", "minutes": 20}', req)


def test_insight_evidence_must_cite_listed_statements() -> None:
    t = template("high-level insights")
    insights = [{"insight": f"i{i}", "evidence": [1, 2]} for i in range(5)]
    t.parse(json.dumps({"insights": insights}), Requirements(statements=2))
    with pytest.raises(ValueError):
        t.parse(json.dumps({"insights": insights}), Requirements(statements=1))


def test_policies_follow_the_declarations() -> None:
    config = cache_config(mode=Mode.ONLINE, threshold=0.8)
    assert set(config.categories) == set(CATEGORIES)
    for t in TEMPLATES:
        policy = category_policy(t)
        assert policy.bypass is (t.modifier is None)
        kind = {"read": Read, "choose": Choose, "revise": Revise, None: type(None)}[t.modifier]
        assert isinstance(policy.modifier, kind)
        with pytest.raises(ValueError):
            policy.validator("not json at all")
    assert config.threshold == 0.8


def test_every_category_has_an_answer_length_cap() -> None:
    assert {t.category for t in TEMPLATES} == set(CATEGORIES)
    assert all(8 <= t.max_tokens <= 1024 for t in TEMPLATES)
