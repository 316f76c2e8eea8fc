"""The 14 declared templates: categories, groups, modifiers, keyword slots, schemas, parsing."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from agent_core import CATEGORIES, GROUPS, TEMPLATES, Requirements, hhmm, template
from agent_core.llm import cache_config, category_policy
from agent_core.revise import REVISION_BUILDERS
from agent_core.templates import category_of_schema_name
from llmcache import Mode
from llmcache.modifiers import Choose, Read, Revise

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


def test_each_schedule_rule_is_stated_and_checked_from_one_place() -> None:
    from agent_core import RevisionRequest, build_revision
    from agent_core.rules import DECOMPOSITION_RULE, INITIAL_PLAN_RULE, REVISION_RULE

    rules = {
        "initial plan generation": INITIAL_PLAN_RULE,
        "plan decomposition": DECOMPOSITION_RULE,
        "future plan revision": REVISION_RULE,
    }

    def plan(n: int, first_minutes: int) -> list[dict[str, str]]:
        """``n`` consecutive items from 09:00, the first ``first_minutes`` long, the rest 1 h."""
        bounds = [9 * 60, 9 * 60 + first_minutes]
        bounds += [bounds[-1] + 60 * (i + 1) for i in range(n - 1)]
        return [
            {"start": hhmm(a), "end": hhmm(b), "activity": "reading", "location": "Home"}
            for a, b in itertools.pairwise(bounds)
        ]

    for category, rule in rules.items():
        t = template(category)
        assert t.schedule is rule
        # The prompt states the rule's numbers ...
        assert f"at least {rule.min_minutes} minutes" in t.body
        if rule.count[0] > 0:
            assert rule.count_text() in t.body
        # ... and the validator enforces them: one item more than allowed, or one too short.
        n = max(1, rule.count[0])
        t.parse(json.dumps({rule.field: plan(n, rule.min_minutes)}))
        with pytest.raises(ValueError):
            t.parse(json.dumps({rule.field: plan(rule.count[1] + 1, rule.min_minutes)}))
        with pytest.raises(ValueError, match=f"shorter than {rule.min_minutes}"):
            t.parse(json.dumps({rule.field: plan(n, rule.min_minutes - 1)}))
        # A revision prompt states the same rule.
        messages = build_revision(
            RevisionRequest(
                category=category,
                name="Alice Wilson",
                cached_content=json.dumps({rule.field: plan(n, rule.min_minutes)}),
                requirements=Requirements(places=["Home"], window=("09:00", "23:00")),
            )
        )
        assert messages is not None
        text = messages[-1]["content"]
        if category != "initial plan generation":  # which only moves places
            assert f"at least {rule.min_minutes} minutes" in text
        if rule.cover:
            assert rule.count_text() in text
