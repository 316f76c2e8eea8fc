"""Per-query JSON schemas: whatever a constrained decoder lets a model write for a query must
pass that query's validator (for the rules a schema can carry), and the schemas stay small."""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest

from agent_core import CATEGORIES, Requirements, TownCall, template
from agent_core.schemas import (
    MAX_ALTERNATIVES,
    MAX_ANSWER_TOKENS,
    TEXT_LIMITS,
    time_marks,
    worst_case_tokens,
)
from agent_core.text import text_pattern

PLACES = ["Hobbs Cafe", "Johnson Park", "Oak Hill College: Library", "Lin Family House: Kitchen"]


def sample(schema: dict[str, Any], rng: random.Random, root: dict[str, Any]) -> Any:
    """A random instance of ``schema``, as a decoder constrained to it could write one."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return sample(root["$defs"][name], rng, root)
    if "anyOf" in schema:
        return sample(rng.choice(schema["anyOf"]), rng, root)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return rng.choice(schema["enum"])
    kind = schema.get("type")
    if kind == "object":
        return {k: sample(v, rng, root) for k, v in schema["properties"].items()}
    if kind == "array":
        if "prefixItems" in schema:
            return [sample(item, rng, root) for item in schema["prefixItems"]]
        n = rng.randint(schema.get("minItems", 0), schema.get("maxItems", 8))
        return [sample(schema["items"], rng, root) for _ in range(n)]
    if kind == "integer":
        return rng.randint(schema.get("minimum", -5), schema.get("maximum", 100))
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "string":
        n = rng.randint(max(1, schema.get("minLength", 1)), schema.get("maxLength", 40))
        return "x" * n
    raise AssertionError(f"unexpected schema node {schema}")


QUERIES = [
    ("initial plan generation", Requirements(places=PLACES, window=("06:00", "24:00"))),
    ("initial plan generation", Requirements(places=PLACES)),  # the default day window
    ("plan decomposition", Requirements(places=PLACES, window=("09:00", "12:00"))),
    ("plan decomposition", Requirements(places=PLACES, window=("13:10", "14:20"))),
    ("plan decomposition", Requirements(places=PLACES, window=("06:00", "14:00"))),
    ("future plan revision", Requirements(places=PLACES, window=("13:20", "18:00"))),
    ("future plan revision", Requirements(places=PLACES, window=("21:35", "24:00"))),
    ("finding location", Requirements(options=["Kitchen", "Bedroom", "Garden"])),
    ("actor reaction", Requirements(options=["keep doing", "react"])),
    ("high-level insights", Requirements(statements=7)),
]


@pytest.mark.parametrize(("category", "req"), QUERIES)
def test_every_answer_the_query_schema_allows_is_valid(category: str, req: Requirements) -> None:
    t = template(category)
    schema = t.json_schema(req)
    rng = random.Random(f"{category}{req}")
    for _ in range(300):
        answer = json.dumps(sample(schema, rng, schema))
        t.parse(answer, req)  # raises ValueError if the schema let an invalid answer through


def test_schedules_are_narrowed_to_the_query() -> None:
    req = Requirements(places=PLACES, window=("09:00", "12:00"))
    schema = template("plan decomposition").json_schema(req)
    alternatives = schema["properties"]["tasks"]["anyOf"]
    assert 1 < len(alternatives) <= MAX_ALTERNATIVES
    for alt in alternatives:
        items = alt["prefixItems"]
        assert 2 <= len(items) <= 3 and len(items) == alt["maxItems"]
        assert items[0]["properties"]["start"]["const"] == "09:00"
        assert items[-1]["properties"]["end"]["const"] == "12:00"
        assert all(i["properties"]["location"]["enum"] == PLACES for i in items)
    # The template's own schema (no requirements) is unchanged: what a provider without
    # per-query schemas gets.
    plain = template("plan decomposition").json_schema()
    assert "anyOf" not in json.dumps(plain) and "$defs" in plain


def test_a_long_window_keeps_the_grammar_small() -> None:
    for window in [("06:00", "24:00"), ("06:00", "14:00"), ("00:00", "24:00")]:
        schema = template("plan decomposition").json_schema(Requirements(window=window))
        alternatives = schema["properties"]["tasks"].get("anyOf", [schema["properties"]["tasks"]])
        assert len(alternatives) <= MAX_ALTERNATIVES
        assert len(json.dumps(schema)) < 100_000


def test_options_and_statements_become_enums_and_ranges() -> None:
    options = ["Kitchen", "Bedroom"]
    loc = template("finding location").json_schema(Requirements(options=options))
    assert loc["properties"]["location"]["enum"] == options
    choice = template("actor reaction").json_schema(Requirements(options=options))
    assert choice["properties"]["choice"]["enum"] == options
    assert choice["properties"]["minutes"] == {"maximum": 120, "minimum": 10, "type": "integer"}
    insights = template("high-level insights").json_schema(Requirements(statements=4))
    evidence = insights["$defs"]["Insight"]["properties"]["evidence"]
    assert evidence["items"] == {"type": "integer", "minimum": 1, "maximum": 4}


@pytest.mark.parametrize(("category", "req"), QUERIES)
def test_no_answer_the_schema_allows_outruns_the_querys_max_tokens(
    category: str, req: Requirements
) -> None:
    # The query's max_tokens is its schema's worst case (one token per character of every
    # string, plus the JSON around them), so a decoder always reaches the closing brace. Checked
    # here in characters, which bound tokens from above: whatever the sampler writes, however
    # indented, fits.
    t = template(category)
    schema = t.json_schema(req)
    bound = worst_case_tokens(schema)
    rng = random.Random(category)
    for _ in range(200):
        answer = sample(schema, rng, schema)
        assert len(json.dumps(answer, indent=2)) <= bound
    call = TownCall(
        category=category, agent="Alice", summary_block="Name: Alice", slots={}, requirements=req
    )
    assert call.answer_tokens() == min(bound, MAX_ANSWER_TOKENS)


def test_unbounded_schemas_have_no_worst_case() -> None:
    with pytest.raises(ValueError, match="maxLength"):
        worst_case_tokens({"type": "string"})
    with pytest.raises(ValueError, match="maxItems"):
        worst_case_tokens({"type": "array", "items": {"type": "integer"}})


def test_time_marks_include_both_ends() -> None:
    assert time_marks(550, 620, 15) == [550, 555, 570, 585, 600, 615, 620]
    assert time_marks(540, 600, 30) == [540, 570, 600]


def _free_strings(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every string node of a schema that is neither an enum, a const nor a time pattern."""
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        if (
            node.get("type") == "string"
            and "enum" not in node
            and "const" not in node
            and not str(node.get("pattern", "")).startswith("^(")  # HH:MM times
        ):
            found.append((path, node))
        for key, value in node.items():
            found += _free_strings(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _free_strings(value, f"{path}/{i}")
    return found


@pytest.mark.parametrize("category", CATEGORIES)
def test_free_text_in_a_query_schema_opens_with_a_letter(category: str) -> None:
    schema = template(category).json_schema(Requirements())
    strings = _free_strings(schema)
    for path, node in strings:
        assert node["maxLength"] <= max(TEXT_LIMITS.values()), path
        assert node["pattern"] == text_pattern(node["maxLength"]), path
    # the template's own schema, which keys the cache tables, stays without the pattern
    lead = text_pattern(1)[: len("^[A-Za-z]")]
    assert lead not in json.dumps(template(category).json_schema())
    assert (lead in json.dumps(schema)) == bool(strings)


def test_the_text_pattern_refuses_what_small_models_copied() -> None:
    pattern = re.compile(text_pattern(120))
    for copied in ["<insight string>", "{insert insight 1}", "2. 2. 3.", "07:00", " Alice"]:
        assert pattern.match(copied) is None, copied
    for text in ["Alice plays basketball after school", "x" * 120]:
        assert pattern.match(text) is not None, text
    for bad in ["x" * 121, 'She said "hi"', "one\\two", "line\tbreak"]:
        assert pattern.match(bad) is None, bad
    with pytest.raises(ValueError):
        text_pattern(0)
