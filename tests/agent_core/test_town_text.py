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
from agent_core.text import degenerate, format_literals, is_placeholder

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


# Answers the committed standard runs (SmolLM2-135M, 2026-11-25) accepted, shortened: a format's
# literal stand-in copied into a value, and decoding that ran away.
ECHOED_OR_DEGENERATE = [
    (
        "plan decomposition",
        '{"tasks": [{"start": "06:00", "end": "08:00", "activity": "HH:MM", '
        '"location": "Riverview High School"}, {"start": "08:00", "end": "09:00", '
        '"activity": "walking to school", "location": "Riverview High School"}]}',
        "placeholder",
    ),
    (
        "memory summary",
        '{"summary": "Males, females, ages 22, 26, 21, 21, 1, 1, 2, 2, 2, 2, 1, 1, 1"}',
        "list of numbers",
    ),
    (
        "new actor statuses",
        '{"status": "System: 42:1:1:1:1:1:1:1:1:4:2:2:2:1:0:3:1:4:1:2:1"}',
        "list of numbers",
    ),
    ("memory summary", '{"summary": "She is She is She is She is very very very very"}', "runaway"),
    (
        "relationship summary",
        '{"summary": "' + " ".join(["the cafe is open and the cafe is"] * 4) + '"}',
        "runaway",
    ),
]


@pytest.mark.parametrize(("category", "answer", "why"), ECHOED_OR_DEGENERATE)
def test_an_echoed_literal_or_a_degenerate_answer_is_invalid(
    category: str, answer: str, why: str
) -> None:
    with pytest.raises(ValueError, match=why):
        template(category).parse(answer)


@pytest.mark.parametrize(
    "text",
    [
        "Birthing",  # says little, but is no decoding failure: the report shows such samples
        "Open the cafe at 8:00 am and close it at 8:00 pm",
        "Buy 2 coffees, 3 muffins and 1 croissant for the party",
        "Isabella is very, very happy about the party",
    ],
)
def test_ordinary_text_with_numbers_or_repeats_is_not_degenerate(text: str) -> None:
    assert degenerate(text) is None


def test_format_literals_are_the_quoted_stand_ins_not_the_placeholders() -> None:
    assert format_literals('{"start": "HH:MM", "activity": "<what {name} does>"}') == ("HH:MM",)
    assert format_literals('{"score": <an integer from 1 to 10>}') == ()


@pytest.mark.parametrize(("category", "answer", "why"), ECHOED_OR_DEGENERATE)
def test_flaws_counts_what_parse_refuses(category: str, answer: str, why: str) -> None:
    # How a study counts what a run recorded before the town refused such answers: the same
    # checks on the answer's text, without parsing it (an old answer may not parse any more).
    echo, broken = template(category).flaws(answer)
    assert (echo, broken) == (why == "placeholder", why != "placeholder")


def test_flaws_of_a_real_answer_or_plain_text() -> None:
    assert template("memory summary").flaws('{"summary": "Alice likes drawing."}') == (
        False,
        False,
    )
    assert template("memory summary").flaws("not JSON at all, just text") == (False, False)
    assert template("memory summary").flaws("42:1:1:1:1:1:1:1:1:4:2:2:2:1:0:3:1:4:1:2") == (
        False,
        True,
    )
