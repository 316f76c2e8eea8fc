"""``responses.create`` / ``responses.parse`` through the cache, and what bypasses it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from client_support import make, opts
from openai.lib._parsing._responses import type_to_text_format_param
from openai.types.responses import ParsedResponse, Response
from pydantic import BaseModel

from llmcache import AsyncCachedLLM, CategoryPolicy, EmbedMode, Mode, SemanticCache
from llmcache.errors import ConfigurationError
from llmcache.modifiers import ModifyContext, Revise
from llmcache.recording import read_records
from llmcache.testing import AsyncFakeOpenAI, FakeOpenAI, HashEmbedder, scripted

INSTRUCTIONS = "You rate how important a memory is."
INPUT = "Memory: Tree in Victoria Park is Idle. Rate 1-10."


class Score(BaseModel):
    score: int


def _schema(name: str, maximum: int) -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": {"score": {"type": "integer", "maximum": maximum}},
        "required": ["score"],
        "additionalProperties": False,
    }
    return {"format": {"type": "json_schema", "name": name, "schema": schema, "strict": True}}


def test_create_miss_goes_out_verbatim_and_a_hit_is_a_real_response(tmp_path: Path) -> None:
    fake = FakeOpenAI(lambda r: "7")
    client = make(tmp_path, fake)
    kwargs: dict[str, Any] = {
        "model": "gpt-5-mini", "input": INPUT, "instructions": INSTRUCTIONS,
        "temperature": 0.2, "store": False,
    }  # fmt: skip
    r1, i1 = client.responses.create_with_info(**kwargs, cache=opts())
    r2, i2 = client.responses.create_with_info(**kwargs, cache=opts())
    r3 = client.responses.create(**kwargs, cache=opts())
    assert (i1.outcome, i2.outcome, len(fake.calls)) == ("miss", "hit", 1)
    assert fake.calls[0] == kwargs  # cache= popped, everything else as given
    for reply in (r1, r2, r3):
        assert isinstance(reply, Response) and reply.output_text == "7"
    assert r2.id.startswith("resp_llmcache_") and r2.id != r1.id and r2.status == "completed"
    assert r2.usage is not None and r2.usage.total_tokens == 0  # nothing was spent
    assert i2.avoided_usd > 0 and i2.cost_usd == 0


def test_input_as_a_message_list_and_instructions_are_the_prompt(tmp_path: Path) -> None:
    fake = FakeOpenAI(lambda r: "answer")
    client = make(tmp_path, fake, embed=EmbedMode.FULL)
    thread = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": INPUT},
    ]
    create = client.responses.create_with_info
    _, first = create(model="m", input=thread, instructions=INSTRUCTIONS, cache=opts())
    assert first.embed_text is not None
    assert INSTRUCTIONS in first.embed_text and INPUT in first.embed_text
    assert "Hello" in first.embed_text
    _, same = create(model="m", input=thread, instructions=INSTRUCTIONS, cache=opts())
    assert same.outcome == "hit"
    # The prompt is embedded, not keyed: other instructions, same table, another text.
    _, other = create(model="m", input=thread, instructions="Something else.", cache=opts())
    assert other.outcome == "miss" and other.partition_key == first.partition_key
    assert fake.calls[0]["input"] is thread
    client.close()
    record = read_records(tmp_path / "rec.jsonl")[0]
    assert record.messages[0] == {"role": "system", "content": INSTRUCTIONS}
    assert record.messages[1:] == thread and record.response == "answer"
    assert "input" not in record.params and "instructions" not in record.params


def test_text_format_splits_tables_and_parse_returns_the_model(tmp_path: Path) -> None:
    fake = FakeOpenAI(lambda r: '{"score": 3}')
    client = make(tmp_path, fake)
    create = client.responses.create_with_info
    _, a = create(model="m", input=INPUT, text=_schema("score", 10), cache=opts())
    _, b = create(model="m", input=INPUT, text=_schema("score", 5), cache=opts())
    assert (a.outcome, b.outcome) == ("miss", "miss") and a.partition_key != b.partition_key
    # responses.parse: the model's schema is the key, the model the type of output_parsed.
    p1, i1 = client.responses.parse_with_info(
        model="m", input=INPUT, text_format=Score, cache=opts()
    )
    p2 = client.responses.parse(model="m", input=INPUT, text_format=Score, cache=opts())
    assert i1.outcome == "miss" and len(fake.calls) == 3
    # Sent as create with the text format the SDK's parse would send, and parsed here.
    assert "text_format" not in fake.calls[2]
    assert fake.calls[2]["text"] == {"format": type_to_text_format_param(Score)}
    for reply in (p1, p2):
        assert isinstance(reply, ParsedResponse) and reply.output_parsed == Score(score=3)
    assert p2.id.startswith("resp_llmcache_")


def test_a_parse_answer_that_does_not_fit_is_resubmitted_never_raised_raw(tmp_path: Path) -> None:
    fake = FakeOpenAI(scripted(['{"score": "high"}', '{"score": 6}']))
    client = make(tmp_path, fake)
    reply, info = client.responses.parse_with_info(
        model="m", input=INPUT, text_format=Score, cache=opts()
    )
    assert isinstance(reply, ParsedResponse) and reply.output_parsed == Score(score=6)
    assert (info.outcome, info.attempts, len(fake.calls)) == ("miss", 2, 2)


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ({"previous_response_id": "resp_123"}, "previous_response_id"),
        ({"conversation": "conv_123"}, "conversation"),
        ({"background": True}, "background"),
        ({"prompt": {"id": "pmpt_1", "variables": {}}}, "prompt"),
        ({"tools": [{"type": "web_search"}]}, "web_search"),
        ({"tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]}, "file_search"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "item"),
    ],
)
def test_server_state_and_server_tools_bypass_the_cache(
    tmp_path: Path, extra: dict[str, Any], why: str
) -> None:
    fake = FakeOpenAI(lambda r: "fresh")
    client = make(tmp_path, fake)
    kwargs = {"model": "m", "input": INPUT, **extra}
    for _ in range(2):
        assert client.responses.create(**kwargs, cache=opts()).output_text == "fresh"
    assert len(fake.calls) == 2 and fake.calls[0] == kwargs
    assert client.cache.partitions() == [] and client.cache.stats().total.lookups == 0
    with pytest.raises(ConfigurationError, match=why):
        client.responses.create_with_info(**kwargs, cache=opts())


def test_function_tools_and_background_false_are_cached(tmp_path: Path) -> None:
    fake = FakeOpenAI(lambda r: "ok")
    client = make(tmp_path, fake)
    tool = {"type": "function", "name": "look", "parameters": {"type": "object"}, "strict": False}
    create = client.responses.create_with_info
    create(model="m", input=INPUT, tools=[tool], background=False, cache=opts())
    _, info = create(model="m", input=INPUT, tools=[tool], background=False, cache=opts())
    assert info.outcome == "hit" and len(fake.calls) == 1


def test_parse_with_stream_passes_through(tmp_path: Path) -> None:
    # responses.parse(stream=True) is not cached (the SDK streams parsed output with
    # responses.stream(), which is not intercepted either).
    fake = FakeOpenAI(lambda r: '{"score": 1}')
    client = make(tmp_path, fake)
    client.responses.parse(model="m", input=INPUT, text_format=Score, stream=True, cache=opts())
    assert fake.calls == [{"model": "m", "input": INPUT, "text_format": Score, "stream": True}]
    assert client.cache.partitions() == []


def test_modes_modifiers_ledger_and_recorder_are_shared(tmp_path: Path) -> None:
    def builder(ctx: ModifyContext) -> list[dict[str, Any]]:
        return [{"role": "user", "content": f"REVISE {ctx.candidate.entry.content}"}]

    def responder(request: dict[str, Any]) -> str:
        text = json.dumps(request["input"])
        return "revised" if "REVISE" in text else "original"

    fake = FakeOpenAI(responder)
    client = make(
        tmp_path, fake, mode=Mode.SERVE,
        categories={"plan": CategoryPolicy(modifier=Revise(builder))},
    )  # fmt: skip
    create = client.responses.create_with_info
    create(model="m", input=INPUT, instructions=INSTRUCTIONS, cache=opts(category="plan"))
    reply, info = create(
        model="m", input="another day", instructions=INSTRUCTIONS,
        cache=opts(category="plan", keywords=["tuesday"]),
    )  # fmt: skip
    assert (info.outcome, info.modifier, reply.output_text) == ("hit", "revise", "revised")
    # The revision prompt is the whole input; the query's instructions are not added.
    assert fake.calls[1]["input"] == [{"role": "user", "content": "REVISE original"}]
    assert "instructions" not in fake.calls[1]
    table = client.cache.stats().tables[0]
    assert (table.lookups, table.hits, table.modifiers) == (2, 1, {"revise": 1})
    assert table.revise_tokens == info.usage.total_tokens > 0
    collect = client.with_cache(mode=Mode.COLLECT)
    _, collected = collect.responses.create_with_info(
        model="m", input=INPUT, cache=opts(category="plan")
    )
    assert collected.outcome == "collect"
    client.close()
    outcomes = [r.outcome for r in read_records(tmp_path / "rec.jsonl")]
    assert outcomes == ["miss", "hit", "collect"]


def test_async_responses_miss_hit_parse_and_bypass(tmp_path: Path) -> None:
    async def main() -> None:
        fake = AsyncFakeOpenAI(lambda r: '{"score": 5}')
        cache = SemanticCache(tmp_path / "c", embedder=HashEmbedder(dim=64))
        client = AsyncCachedLLM(fake, cache=cache)
        r1, i1 = await client.responses.create_with_info(model="m", input=INPUT, cache=opts())
        r2 = await client.responses.create(model="m", input=INPUT, cache=opts())
        assert i1.outcome == "miss" and len(fake.calls) == 1
        assert isinstance(r2, Response) and r2.output_text == r1.output_text
        assert r2.id.startswith("resp_llmcache_")
        p1, pi = await client.responses.parse_with_info(
            model="m", input=INPUT, text_format=Score, cache=opts()
        )
        p2 = await client.responses.parse(model="m", input=INPUT, text_format=Score, cache=opts())
        assert pi.outcome == "miss" and len(fake.calls) == 2
        assert isinstance(p2, ParsedResponse) and p2.output_parsed == Score(score=5)
        assert p1.output_parsed == p2.output_parsed
        await client.responses.create(
            model="m", input=INPUT, previous_response_id="resp_1", cache=opts()
        )
        assert len(fake.calls) == 3 and fake.calls[2]["previous_response_id"] == "resp_1"
        with pytest.raises(ConfigurationError, match="previous_response_id"):
            await client.responses.create_with_info(
                model="m", input=INPUT, previous_response_id="resp_1", cache=opts()
            )
        client.close()

    asyncio.run(main())
