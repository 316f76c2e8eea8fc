"""``chat.completions.parse`` through the cache: structured outputs with a pydantic model."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from client_support import make, opts
from openai.lib._parsing import type_to_response_format_param
from openai.types.chat import ParsedChatCompletion
from pydantic import BaseModel

from llmcache import AsyncCachedLLM, Mode, SemanticCache
from llmcache.errors import ConfigurationError
from llmcache.recording import read_records
from llmcache.testing import AsyncFakeOpenAI, FakeOpenAI, HashEmbedder, scripted

MSGS = [
    {"role": "system", "content": "You rate how important a memory is."},
    {"role": "user", "content": "Memory: Tree in Victoria Park is Idle. Rate 1-10."},
]


class Score(BaseModel):
    score: int


def test_parse_miss_sends_what_the_sdks_parse_sends_and_a_hit_is_a_parsed_completion(
    tmp_path: Path,
) -> None:
    fake = FakeOpenAI(lambda r: '{"score": 7}')
    client = make(tmp_path, fake)
    headers = {"X-Trace": "abc"}
    r1, i1 = client.chat.completions.parse_with_info(
        model="m", messages=MSGS, response_format=Score, temperature=0, extra_headers=headers,
        cache=opts(),
    )  # fmt: skip
    r2, i2 = client.chat.completions.parse_with_info(
        model="m", messages=MSGS, response_format=Score, temperature=0, cache=opts()
    )
    assert (i1.outcome, i2.outcome, len(fake.calls)) == ("miss", "hit", 1)
    # Sent as create with the JSON schema the SDK's parse would send, every other keyword as
    # given, and parsed here (so that an answer that does not fit is an invalid attempt).
    assert fake.calls[0] == {
        "model": "m", "messages": MSGS, "response_format": type_to_response_format_param(Score),
        "temperature": 0, "extra_headers": headers,
    }  # fmt: skip
    for reply in (r1, r2):
        assert isinstance(reply, ParsedChatCompletion)
        parsed = reply.choices[0].message.parsed
        assert isinstance(parsed, Score) and parsed.score == 7
    assert r2.id.startswith("chatcmpl-llmcache-") and r2.id != r1.id
    # The plain method answers the same way.
    r3 = client.chat.completions.parse(
        model="m", messages=MSGS, response_format=Score, temperature=0, cache=opts()
    )
    assert isinstance(r3.choices[0].message.parsed, Score) and len(fake.calls) == 1


def test_an_answer_that_does_not_fit_is_resubmitted_never_raised_raw(tmp_path: Path) -> None:
    # The SDK's own parse raises pydantic's ValidationError on such an answer after the call
    # was paid; through the cache it is an invalid attempt, and the next one is parsed.
    fake = FakeOpenAI(scripted(['{"score": "high"}', "not json", '{"score": 3}']))
    client = make(tmp_path, fake)
    reply, info = client.chat.completions.parse_with_info(
        model="m", messages=MSGS, response_format=Score, cache=opts()
    )
    assert isinstance(reply, ParsedChatCompletion) and reply.choices[0].message.parsed == Score(
        score=3
    )
    assert (info.outcome, info.attempts, len(fake.calls)) == ("miss", 3, 3)


def test_the_key_is_the_models_schema_not_its_python_identity(tmp_path: Path) -> None:
    fake = FakeOpenAI(lambda r: '{"score": 4}')
    client = make(tmp_path, fake)
    parse = client.chat.completions.parse_with_info
    _, first = parse(model="m", messages=MSGS, response_format=Score, cache=opts())

    # Another class of the same name and fields (a module reloaded, another process): the
    # schema sent is the same, so is the table.
    class Score2(BaseModel):
        score: int

    Score2.__name__ = "Score"
    _, same = parse(model="m", messages=MSGS, response_format=Score2, cache=opts())
    assert same.outcome == "hit" and same.partition_key == first.partition_key

    # A field more: another schema, another table.
    class Score3(BaseModel):
        score: int
        why: str = ""

    Score3.__name__ = "Score"
    _, other = parse(model="m", messages=MSGS, response_format=Score3, cache=opts())
    assert other.outcome == "miss" and other.partition_key != first.partition_key

    # create() with the schema the SDK sends for Score shares parse's table.
    rf = type_to_response_format_param(Score)
    _, created = client.chat.completions.create_with_info(
        model="m", messages=MSGS, response_format=rf, cache=opts()
    )
    assert created.outcome == "hit" and created.partition_key == first.partition_key
    # The recorder writes the schema too, never a class's repr.
    client.close()
    params = [r.params for r in read_records(tmp_path / "rec.jsonl")]
    assert params[0]["response_format"] == json.loads(json.dumps(rf))


def test_the_model_validates_every_served_answer(tmp_path: Path) -> None:
    # An answer stored by create() under the same schema, that does not fit the model (a
    # server that ignored the schema): parse does not serve it, but asks and stores anew.
    fake = FakeOpenAI(scripted(['{"score": "high"}', '{"score": 6}']))
    client = make(tmp_path, fake, mode=Mode.SERVE)
    rf = type_to_response_format_param(Score)
    client.chat.completions.create(model="m", messages=MSGS, response_format=rf, cache=opts())
    reply, info = client.chat.completions.parse_with_info(
        model="m", messages=MSGS, response_format=Score, cache=opts()
    )
    assert info.outcome == "miss" and len(fake.calls) == 2
    assert reply.choices[0].message.parsed == Score(score=6)
    (partition,) = client.cache.partitions()
    stored = [e.content for e in client.cache.entries(partition.key)]
    assert stored == ['{"score": "high"}', '{"score": 6}']  # one table, both answers kept


def test_a_given_validator_is_checked_besides_the_model(tmp_path: Path) -> None:
    def at_most_five(content: str) -> None:
        if json.loads(content)["score"] > 5:
            raise ValueError("score above 5")

    fake = FakeOpenAI(scripted(['{"score": 9}', '{"score": 3}']))
    client = make(tmp_path, fake)
    reply, info = client.chat.completions.parse_with_info(
        model="m", messages=MSGS, response_format=Score, cache=opts(validator=at_most_five)
    )
    assert info.attempts == 2 and reply.choices[0].message.parsed == Score(score=3)
    (partition,) = client.cache.partitions()
    assert [e.content for e in client.cache.entries(partition.key)] == ['{"score": 3}']


def test_parse_without_cache_options_or_with_n_passes_through(tmp_path: Path) -> None:
    fake = FakeOpenAI(lambda r: '{"score": 2}')
    client = make(tmp_path, fake)
    plain = client.chat.completions.parse(model="m", messages=MSGS, response_format=Score)
    assert isinstance(plain.choices[0].message.parsed, Score)
    client.chat.completions.parse(
        model="m", messages=MSGS, response_format=Score, n=2, cache=opts()
    )
    assert len(fake.calls) == 2 and client.cache.partitions() == []
    assert "cache" not in fake.calls[1]
    with pytest.raises(ConfigurationError, match="parse_with_info"):
        client.chat.completions.parse_with_info(model="m", messages=MSGS, response_format=Score)


def test_secrets_in_request_headers_never_reach_disk(tmp_path: Path) -> None:
    fake = FakeOpenAI(lambda r: '{"score": 1}')
    client = make(tmp_path, fake)
    secret = "sk-live-do-not-store-0123456789"
    client.chat.completions.parse(
        model="m", messages=MSGS, response_format=Score, cache=opts(),
        extra_headers={"Authorization": f"Bearer {secret}"},
    )  # fmt: skip
    client.close()
    assert fake.calls[0]["extra_headers"] == {"Authorization": f"Bearer {secret}"}
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written and not any(secret.encode() in p.read_bytes() for p in written)


def test_async_parse_miss_and_hit(tmp_path: Path) -> None:
    async def main() -> None:
        fake = AsyncFakeOpenAI(lambda r: '{"score": 8}')
        cache = SemanticCache(tmp_path / "c", embedder=HashEmbedder(dim=64))
        client = AsyncCachedLLM(fake, cache=cache)
        r1, i1 = await client.chat.completions.parse_with_info(
            model="m", messages=MSGS, response_format=Score, cache=opts()
        )
        r2 = await client.chat.completions.parse(
            model="m", messages=MSGS, response_format=Score, cache=opts()
        )
        plain = await client.chat.completions.parse(model="m", messages=MSGS, response_format=Score)
        assert i1.outcome == "miss" and len(fake.calls) == 2  # the hit did not call
        for reply in (r1, r2, plain):
            assert isinstance(reply, ParsedChatCompletion)
            assert reply.choices[0].message.parsed == Score(score=8)
        assert r2.id.startswith("chatcmpl-llmcache-")
        sent = fake.calls[0]
        assert sent["response_format"] == type_to_response_format_param(Score)
        assert "cache" not in sent
        client.close()

    asyncio.run(main())
