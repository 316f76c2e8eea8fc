"""The legacy Completions call (``completions.create``) cached like chat, through the official
SDK's ``Completion`` type: misses and hits, streams, bypass reasons, ``store=False``, keyword
mode, sync and async."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from client_support import make, opts
from openai.types import Completion

from llmcache import AsyncCachedLLM, CacheConfig, CacheOptions, EmbedMode, SemanticCache
from llmcache.errors import ConfigurationError
from llmcache.testing import AsyncFakeOpenAI, FakeOpenAI, HashEmbedder

PROMPT = "Memory: the tree in Victoria Park is idle. Rate its importance 1-10.\nRating:"


def test_a_miss_then_a_hit(tmp_path: Path) -> None:
    fake = FakeOpenAI()
    client = make(tmp_path, fake)
    first, miss = client.completions.create_with_info(
        model="gpt-3.5-turbo-instruct", prompt=PROMPT, max_tokens=5, cache=opts()
    )
    second, hit = client.completions.create_with_info(
        model="gpt-3.5-turbo-instruct", prompt=PROMPT, max_tokens=5, cache=opts()
    )
    assert isinstance(first, Completion) and isinstance(second, Completion)
    assert (miss.outcome, hit.outcome) == ("miss", "hit")
    assert second.choices[0].text == first.choices[0].text == f"answer to: {PROMPT}"
    assert second.object == "text_completion" and second.id != first.id
    assert len(fake.calls) == 1
    # The request reached the SDK verbatim, without the cache's keyword.
    assert fake.calls[0] == {"model": "gpt-3.5-turbo-instruct", "prompt": PROMPT, "max_tokens": 5}
    # Another output-affecting parameter is another table.
    plain = client.completions.create(model="gpt-3.5-turbo-instruct", prompt=PROMPT, cache=opts())
    assert isinstance(plain, Completion) and len(fake.calls) == 2


def test_keyword_mode_and_full_mode(tmp_path: Path) -> None:
    fake = FakeOpenAI()
    client = make(tmp_path, fake)
    # Keyword mode: two prompts that fill one template with one value share an answer.
    client.completions.create(model="m", prompt="Rate: tree idle", cache=opts())
    served, info = client.completions.create_with_info(
        model="m", prompt="Please rate: tree idle", cache=opts()
    )
    assert info.outcome == "hit" and served.choices[0].text == "answer to: Rate: tree idle"
    other = client.completions.create(model="m", prompt="Rate: x", cache=opts(keywords=["bench"]))
    assert other.choices[0].text == "answer to: Rate: x"
    # Full mode embeds the prompt text itself.
    full = opts(keywords=None, embed=EmbedMode.FULL, category="full")
    _, first = client.completions.create_with_info(model="m", prompt=PROMPT, cache=full)
    _, again = client.completions.create_with_info(model="m", prompt=PROMPT, cache=full)
    assert (first.outcome, again.outcome) == ("miss", "hit")
    assert first.embed_text is not None and PROMPT in first.embed_text
    with pytest.raises(ConfigurationError):
        client.completions.create(model="m", prompt=PROMPT, cache=opts(keywords=None))


def test_store_false_serves_but_never_stores(tmp_path: Path) -> None:
    fake = FakeOpenAI()
    client = make(tmp_path, fake)
    for _ in range(2):
        _, info = client.completions.create_with_info(
            model="m", prompt=PROMPT, cache=opts(store=False)
        )
        assert info.outcome == "miss" and info.entry_id is None
    client.completions.create(model="m", prompt=PROMPT, cache=opts())
    _, info = client.completions.create_with_info(model="m", prompt=PROMPT, cache=opts(store=False))
    assert info.outcome == "hit" and len(fake.calls) == 3


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"prompt": ["one", "two"]}, "prompt is not one text"),
        ({"prompt": [1, 2, 3]}, "prompt is not one text"),
        ({"n": 2}, "n > 1"),
        ({"best_of": 3}, "best_of"),
        ({"echo": True}, "echo"),
        ({"logprobs": 2}, "logprobs"),
        ({"suffix": " end"}, "suffix"),
    ],
)
def test_requests_the_cache_cannot_answer_bypass_it(
    tmp_path: Path, extra: dict[str, Any], says: str
) -> None:
    fake = FakeOpenAI()
    client = make(tmp_path, fake)
    kwargs: dict[str, Any] = {"model": "m", "prompt": PROMPT, **extra}
    reason = client.completions.cache_bypass_reason(**kwargs)
    assert reason is not None and says in reason
    for _ in range(2):
        client.completions.create(**kwargs, cache=opts())
    assert len(fake.calls) == 2  # sent as they are, twice
    assert "cache" not in fake.calls[0]
    assert client.cache.stats().total.lookups == 0
    with pytest.raises(ConfigurationError, match="create_with_info"):
        client.completions.create_with_info(**kwargs, cache=opts())


def test_a_cacheable_request_has_no_bypass_reason(tmp_path: Path) -> None:
    client = make(tmp_path, FakeOpenAI())
    assert client.completions.cache_bypass_reason(model="m", prompt=PROMPT, n=1) is None
    assert client.completions.cache_bypass_reason(model="m", prompt=PROMPT, echo=False) is None


def test_without_options_the_call_is_the_clients_own(tmp_path: Path) -> None:
    fake = FakeOpenAI()
    client = make(tmp_path, fake)
    for _ in range(2):
        assert isinstance(client.completions.create(model="m", prompt=PROMPT), Completion)
    assert len(fake.calls) == 2 and client.cache.stats().total.lookups == 0
    with pytest.raises(ConfigurationError):
        client.completions.create_with_info(model="m", prompt=PROMPT)


def _text(chunks: list[Completion]) -> str:
    return "".join(c.choices[0].text for c in chunks if c.choices)


def test_a_streamed_miss_is_stored_and_a_hit_replayed(tmp_path: Path) -> None:
    fake = FakeOpenAI()
    client = make(tmp_path, fake)
    usage = {"include_usage": True}
    stream = client.completions.create(
        model="m", prompt=PROMPT, stream=True, stream_options=usage, cache=opts()
    )
    chunks = list(stream)
    assert all(isinstance(c, Completion) for c in chunks)
    assert _text(chunks) == f"answer to: {PROMPT}"
    assert stream.cache_info.outcome == "miss" and stream.cache_info.entry_id is not None
    assert chunks[-1].usage is not None and not chunks[-1].choices  # the usage chunk
    replay = client.completions.create(
        model="m", prompt=PROMPT, stream=True, stream_options=usage, cache=opts()
    )
    replayed = list(replay)
    assert replay.cache_info.outcome == "hit" and len(fake.calls) == 1
    assert _text(replayed) == f"answer to: {PROMPT}"
    assert all(isinstance(c, Completion) for c in replayed)
    assert replayed[-1].usage is not None and not replayed[-1].choices
    finished = [c.choices[0].finish_reason for c in replayed if c.choices]
    assert finished[-1] == "stop" and set(finished[:-1]) == {None}
    # Without include_usage, no usage chunk; and a whole answer is served to a non-streamed call.
    plain = list(client.completions.create(model="m", prompt=PROMPT, stream=True, cache=opts()))
    assert all(c.choices for c in plain)
    whole = client.completions.create(model="m", prompt=PROMPT, cache=opts())
    assert whole.choices[0].text == f"answer to: {PROMPT}" and len(fake.calls) == 1


def test_a_broken_stream_is_not_stored(tmp_path: Path) -> None:
    fake = FakeOpenAI(break_streams_after=2)
    client = make(tmp_path, fake)
    stream = client.completions.create(model="m", prompt=PROMPT, stream=True, cache=opts())
    with pytest.raises(ConnectionError):
        list(stream)
    assert stream.cache_info.entry_id is None
    fake.break_streams_after = None
    _, info = client.completions.create_with_info(model="m", prompt=PROMPT, cache=opts())
    assert info.outcome == "miss" and len(fake.calls) == 2


def test_async_miss_hit_and_streams(tmp_path: Path) -> None:
    async def main() -> tuple[Any, ...]:
        fake = AsyncFakeOpenAI()
        cache = SemanticCache(tmp_path / "c", embedder=HashEmbedder(dim=64), config=CacheConfig())
        client = AsyncCachedLLM(fake, cache=cache)
        options = CacheOptions(category="importance", agent="Liam", keywords=["tree idle"])
        _, miss = await client.completions.create_with_info(model="m", prompt=PROMPT, cache=options)
        hit = await client.completions.create(model="m", prompt=PROMPT, cache=options)
        other = options.model_copy(update={"keywords": ("bench wet",)})
        stream = await client.completions.create(
            model="m", prompt="Rate: bench wet", stream=True, cache=other
        )
        streamed = [c async for c in stream]
        replay = await client.completions.create(
            model="m", prompt="Rate: bench wet", stream=True, cache=other
        )
        replayed = [c async for c in replay]
        reason = client.completions.cache_bypass_reason(model="m", prompt=["a", "b"])
        outcomes = (miss.outcome, stream.cache_info.outcome, replay.cache_info.outcome)
        client.close()
        return hit, outcomes, _text(streamed), _text(replayed), reason, len(fake.calls)

    hit, outcomes, streamed, replayed, reason, calls = asyncio.run(main())
    assert isinstance(hit, Completion) and hit.choices[0].text == f"answer to: {PROMPT}"
    assert outcomes == ("miss", "miss", "hit")
    assert streamed == replayed == "answer to: Rate: bench wet"
    assert reason is not None and "prompt is not one text" in reason
    assert calls == 2
