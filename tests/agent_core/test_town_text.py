"""Free-text answer fields: a copied format placeholder is invalid, real text is kept."""

from __future__ import annotations

import pytest

from agent_core import template
from agent_core.responses import (
    InsightsResponse,
    QuestionsResponse,
    StatusResponse,
    SummaryResponse,
    parse_lenient,
)
from agent_core.text import is_placeholder

# Answers a standard run on SmolLM2-135M gave (shortened): well-formed JSON, no answer.
COPIED = [
    (SummaryResponse, '{"summary": "<2 to 4 sentences>"}'),
    (StatusResponse, '{"status": "<a short phrase, e.g. being used to make coffee>"}'),
    (
        InsightsResponse,
        '{"insights": [{"insight": "<insight string>", "evidence": [1]}, '
        + ", ".join('{"insight": "Alice likes tea", "evidence": [2]}' for _ in range(4))
        + "]}",
    ),
    (QuestionsResponse, '{"questions": ["<question 1>]: [1] How do they", "Why?", "Who?"]}'),
]


@pytest.mark.parametrize(("model", "answer"), COPIED)
def test_a_copied_placeholder_is_invalid(model: type, answer: str) -> None:
    with pytest.raises(ValueError, match="placeholder"):
        parse_lenient(model, answer)


@pytest.mark.parametrize(
    "text",
    [
        "Alice is <3 in love with coding",  # angle brackets later in the text are fine
        "Mary's drawings {and paints}",  # brackets after the start are fine
        "a < b > c is maths",
        "  Ethan works at the store  ",
    ],
)
def test_real_text_is_kept_stripped(text: str) -> None:
    assert not is_placeholder(text)
    assert parse_lenient(SummaryResponse, f'{{"summary": "{text}"}}').summary == text.strip()


def test_blank_text_is_invalid() -> None:
    with pytest.raises(ValueError, match="blank"):
        parse_lenient(SummaryResponse, '{"summary": "   "}')


@pytest.mark.parametrize(
    ("category", "answer"),
    [
        ("memory summary", '{"summary": "2 to 4 sentences"}'),
        ("memory summary", '{"summary": "{2 to 4 sentences}, 19 pages"}'),
        ("new actor statuses", '{"status": "a short phrase, e.g. being used to make coffee"}'),
        ("dialogue utterance", '{"utterance": "What Alice Wilson says", "end_conversation": true}'),
    ],
)
def test_a_placeholder_copied_without_brackets_is_invalid(category: str, answer: str) -> None:
    with pytest.raises(ValueError, match="placeholder"):
        template(category).parse(answer)


def test_a_real_answer_of_each_kind_passes() -> None:
    assert template("memory summary").parse('{"summary": "Alice codes and plays."}').summary
    assert template("new actor statuses").parse('{"status": "being used"}').status == "being used"
    said = template("dialogue utterance").parse(
        '{"utterance": "Hi Mary, what are you drawing?", "end_conversation": false}'
    )
    assert said.utterance.startswith("Hi Mary")
