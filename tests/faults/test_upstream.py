"""Malformed and unusual upstream answers, through the public fake (``llmcache.testing``), which
builds a response body the way the openai SDK does: without validating it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fault_tools import MODEL, ask, messages, open_client, opts
from pydantic import BaseModel

from llmcache import CategoryPolicy
from llmcache.errors import InvalidResponseError
from llmcache.modifiers import Revise
from llmcache.testing import FakeOpenAI, scripted


class Score(BaseModel):
    score: int


VALID = json.dumps({"score": 4})


def body(message: Any, **extra: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "finish_reason": "stop", "message": message}], **extra}


MALFORMED: dict[str, dict[str, Any]] = {
    "no-choices": {"choices": []},
    "choices-null": {"choices": None},
    "message-null": body(None),
    "message-not-an-object": body("just text"),
    "content-null": body({"role": "assistant", "content": None}),
    "content-a-number": body({"role": "assistant", "content": 4}),
    "content-a-list": body({"role": "assistant", "content": [{"type": "text", "text": "4"}]}),
    "refusal": body({"role": "assistant", "content": None, "refusal": "I cannot help."}),
    "truncated": {
        "choices": [
            {
                "index": 0,
                "finish_reason": "length",
                "message": {"role": "assistant", "content": '{"sco'},
            }
        ]
    },
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_answer_is_resubmitted_then_the_valid_one_is_cached(
    tmp_path: Path, name: str
) -> None:
    fake = FakeOpenAI(scripted([MALFORMED[name], VALID]))
    client, _ = open_client(
        tmp_path / "c", fake, categories={"importance": CategoryPolicy(validator=Score)}
    )
    content, info = ask(client, ["tree", "idle"])
    assert (content, info.outcome, info.attempts) == (VALID, "miss", 2)
    assert not info.store_failed
    again, hit = ask(client, ["tree", "idle"])
    assert (again, hit.outcome) == (VALID, "hit")
    client.close()


@pytest.mark.parametrize("name", ["no-choices", "message-null", "content-a-number"])
def test_an_upstream_that_never_answers_properly_is_a_clear_error(
    tmp_path: Path, name: str
) -> None:
    fake = FakeOpenAI(lambda request: MALFORMED[name])
    client, _ = open_client(tmp_path / "c", fake, max_attempts=3)
    with pytest.raises(InvalidResponseError) as err:
        ask(client, ["tree", "idle"])
    assert err.value.attempts == 3 and len(fake.calls) == 3
    assert client.cache.partitions() == []  # nothing invalid is stored
    assert client.cache.stats().total.attempts == 3
    client.close()


def test_garbage_usage_is_estimated_instead(tmp_path: Path) -> None:
    usage = {"prompt_tokens": None, "completion_tokens": "many", "total_tokens": -1}
    fake = FakeOpenAI(lambda request: body({"role": "assistant", "content": VALID}, usage=usage))
    client, _ = open_client(tmp_path / "c", fake)
    content, info = ask(client, ["tree", "idle"])
    assert content == VALID and info.usage.source != "api" and info.usage.prompt_tokens > 0
    assert ask(client, ["tree", "idle"])[1].outcome == "hit"
    client.close()


def test_a_valid_answer_in_a_malformed_envelope_is_returned_but_not_stored(
    tmp_path: Path,
) -> None:
    fake = FakeOpenAI(
        lambda request: body({"role": "assistant", "content": VALID}, object="not.a.completion")
    )
    client, _ = open_client(tmp_path / "c", fake)
    content, info = ask(client, ["tree", "idle"])
    assert content == VALID and info.attempts == 1  # valid text: not resubmitted
    assert info.store_failed  # but a hit could not give this envelope back: not stored
    assert client.cache.stats().total.store_failures == 1
    client.close()


# -- fault 6: answers made of tool calls ---------------------------------------------------------

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "rate",
            "parameters": {"type": "object", "properties": {"score": {"type": "integer"}}},
        },
    }
]
TOOL_CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "rate", "arguments": '{"score": 7}'},
        }
    ],
}


def _ask_with_tools(client: Any, keywords: list[str]) -> tuple[Any, Any]:
    return client.chat.completions.create_with_info(
        model=MODEL, messages=messages(keywords), tools=TOOLS, cache=opts(keywords)
    )


def test_a_tool_call_answer_is_cached_not_resubmitted(tmp_path: Path) -> None:
    answer = {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": TOOL_CALL}]}
    fake = FakeOpenAI(lambda request: answer)
    client, _ = open_client(
        tmp_path / "c", fake, categories={"importance": CategoryPolicy(validator=Score)}
    )
    reply, info = _ask_with_tools(client, ["tree", "idle"])
    # One paid call: the tool call is the answer, whatever the text validator would say.
    assert (info.outcome, info.attempts, len(fake.calls)) == ("miss", 1, 1)
    assert not info.store_failed
    assert reply.choices[0].message.tool_calls[0].function.arguments == '{"score": 7}'
    again, hit = _ask_with_tools(client, ["tree", "idle"])
    assert (hit.outcome, len(fake.calls)) == ("hit", 1)
    message = again.choices[0].message
    assert message.content is None and message.tool_calls is not None
    assert message.tool_calls[0].model_dump() == reply.choices[0].message.tool_calls[0].model_dump()
    assert again.choices[0].finish_reason == "tool_calls"
    client.close()


def test_a_tool_call_answer_is_not_served_through_a_text_modifier(tmp_path: Path) -> None:
    fake = FakeOpenAI(lambda request: body(TOOL_CALL))

    def builder(ctx: Any) -> list[dict[str, Any]]:
        return [{"role": "user", "content": "revise"}]

    client, _ = open_client(
        tmp_path / "c",
        fake,
        categories={"importance": CategoryPolicy(modifier=Revise(builder))},
    )
    _ask_with_tools(client, ["tree", "idle"])
    _, info = _ask_with_tools(client, ["tree", "idle"])
    # Revise rewrites text; a tool call has none: a miss (paid once more), never a bad hit.
    assert info.outcome == "miss" and len(fake.calls) == 2
    client.close()


def test_tool_calls_and_plain_requests_never_share_a_table(tmp_path: Path) -> None:
    fake = FakeOpenAI(lambda request: body(TOOL_CALL) if request.get("tools") else VALID)
    client, _ = open_client(tmp_path / "c", fake)
    _ask_with_tools(client, ["tree", "idle"])
    content, info = ask(client, ["tree", "idle"])
    assert (content, info.outcome) == (VALID, "miss")
    client.close()
