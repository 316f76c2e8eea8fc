"""``stream=True`` through the cache (``chat.completions.create``, ``responses.create``): a miss
streams through and is stored once it completed and validated; a hit is replayed as the SDK's
chunk (or event) objects."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import pytest
from client_support import make
from client_support import opts as base_opts
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from pydantic import BaseModel

from llmcache import AsyncCachedLLM, CacheOptions, CategoryPolicy, Mode, SemanticCache
from llmcache.errors import ConfigurationError
from llmcache.modifiers import ModifyContext, Revise
from llmcache.recording import read_records
from llmcache.testing import AsyncFakeOpenAI, FakeOpenAI, FakeStream, HashEmbedder

MSGS = [
    {"role": "system", "content": "You are Isabella, talking to a visitor."},
    {"role": "user", "content": "Good morning! What is on the menu today?"},
]
ANSWER = "Good morning! Today we have fresh bread, tomato soup and apple pie."


class Score(BaseModel):
    score: int


_STREAMED: dict[str, Any] = {"model": "m", "messages": MSGS, "stream": True}


def opts(**kw: Any) -> CacheOptions:
    return base_opts(**{"category": "greeting", "agent": "Isabella", "keywords": ["menu"], **kw})


def _text(chunks: list[ChatCompletionChunk]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_a_miss_streams_through_untouched_and_is_stored_when_it_ends(tmp_path: Path) -> None:
    fake = FakeOpenAI(lambda r: ANSWER)
    client = make(tmp_path, fake)
    stream = client.chat.completions.create(model="m", messages=MSGS, stream=True, cache=opts())
    assert fake.calls[0] == {"model": "m", "messages": MSGS, "stream": True}
    first = next(iter(stream))
    # Nothing is stored while the caller is still reading; the outcome is known already.
    assert client.cache.partitions() == []
    assert stream.cache_info is not None and stream.cache_info.outcome == "miss"
    chunks = [first, *stream]
    assert all(isinstance(c, ChatCompletionChunk) for c in chunks)
    assert _text(chunks) == ANSWER and len(chunks) > 8  # the fake streams word by word
    (partition,) = client.cache.partitions()
    (entry,) = client.cache.entries(partition.key)
    assert entry.content == ANSWER
    assert stream.cache_info is not None and stream.cache_info.outcome == "miss"
    assert stream.cache_info.entry_id == entry.id
    total = client.cache.stats().total
    assert (total.lookups, total.misses) == (1, 1) and total.tokens_spent > 0


def test_the_chunks_of_a_miss_are_the_sdks_own_objects(tmp_path: Path) -> None:
    fake = FakeOpenAI(lambda r: ANSWER)
    client = make(tmp_path, fake)
    sent: list[FakeStream] = []
    create = fake.chat.completions.create

    def keep(**kwargs: Any) -> Any:
        stream = create(**kwargs)
        sent.append(stream)
        return stream

    fake.chat.completions.create = keep  # type: ignore[method-assign]
    received = list(client.chat.completions.create(model="m", messages=MSGS, stream=True,
                                                   cache=opts()))  # fmt: skip
    assert len(received) == len(sent[0].chunks)
    assert all(a is b for a, b in zip(received, sent[0].chunks, strict=True))


def test_a_hit_is_replayed_as_a_few_real_chunks(tmp_path: Path) -> None:
    fake = FakeOpenAI(lambda r: ANSWER)
    client = make(tmp_path, fake)
    list(client.chat.completions.create(model="m", messages=MSGS, stream=True, cache=opts()))
    with client.chat.completions.create(
        model="m", messages=MSGS, stream=True, cache=opts()
    ) as stream:
        chunks = list(stream)
    assert len(fake.calls) == 1 and stream.cache_info is not None
    assert stream.cache_info.outcome == "hit" and stream.cache_info.modifier == "read"
    assert all(isinstance(c, ChatCompletionChunk) for c in chunks)
    assert 3 <= len(chunks) <= 8 and _text(chunks) == ANSWER
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.usage is None for c in chunks)  # no usage chunk unless asked for
    assert chunks[0].id.startswith("chatcmpl-llmcache-")
    assert len({c.id for c in chunks}) == 1
    assert client.cache.stats().total.hits == 1


def test_streamed_and_whole_calls_share_one_table(tmp_path: Path) -> None:
    fake = FakeOpenAI(lambda r: ANSWER)
    client = make(tmp_path, fake)
    whole, info = client.chat.completions.create_with_info(model="m", messages=MSGS, cache=opts())
    assert info.outcome == "miss"
    replay = list(client.chat.completions.create(model="m", messages=MSGS, stream=True,
                                                 cache=opts()))  # fmt: skip
    assert _text(replay) == whole.choices[0].message.content and len(fake.calls) == 1
    list(client.chat.completions.create(model="m", messages=MSGS, stream=True,
                                        cache=opts(keywords=["bread"])))  # fmt: skip
    again, info = client.chat.completions.create_with_info(
        model="m", messages=MSGS, cache=opts(keywords=["bread"])
    )
    assert info.outcome == "hit" and isinstance(again, ChatCompletion)
    assert again.choices[0].message.content == ANSWER and len(fake.calls) == 2


def test_include_usage_is_honoured_on_miss_and_hit(tmp_path: Path) -> None:
    fake = FakeOpenAI(lambda r: ANSWER)
    client = make(tmp_path, fake)
    kwargs: dict[str, Any] = {"model": "gpt-4o-mini", "messages": MSGS, "stream": True,
                              "stream_options": {"include_usage": True}}  # fmt: skip
    miss = list(client.chat.completions.create(**kwargs, cache=opts()))
    assert fake.calls[0]["stream_options"] == {"include_usage": True}
    usage = miss[-1].usage
    assert miss[-1].choices == [] and usage is not None
    # The server's own usage is what the ledger counts.
    assert client.cache.stats().total.tokens_spent == usage.total_tokens
    hit = list(client.chat.completions.create(**kwargs, cache=opts()))
    assert hit[-1].choices == [] and hit[-1].usage is not None
    assert hit[-1].usage.total_tokens == 0  # a read hit spends nothing
    assert all(c.usage is None for c in hit[:-1]) and _text(hit) == ANSWER


def test_a_stream_closed_early_is_not_stored(tmp_path: Path) -> None:
    fake = FakeOpenAI(lambda r: ANSWER)
    client = make(tmp_path, fake)
    with client.chat.completions.create(model="m", messages=MSGS, stream=True, cache=opts()) as s:
        next(iter(s))
        next(iter(s))
    assert client.cache.partitions() == []
    total = client.cache.stats().total
    assert total.misses == 1 and total.tokens_spent > 0  # the prompt was paid for all the same
    list(client.chat.completions.create(model="m", messages=MSGS, stream=True, cache=opts()))
    assert len(fake.calls) == 2 and len(client.cache.partitions()) == 1


def test_a_streamed_miss_with_store_false_is_passed_on_and_not_stored(tmp_path: Path) -> None:
    fake = FakeOpenAI(lambda r: ANSWER)
    client = make(tmp_path, fake)
    stream = client.chat.completions.create(
        model="m", messages=MSGS, stream=True, cache=opts(store=False)
    )
    assert _text(list(stream)) == ANSWER
    assert stream.cache_info.outcome == "miss"
    assert client.cache.partitions() == []


def test_a_stream_that_breaks_off_is_not_stored(tmp_path: Path) -> None:
    fake = FakeOpenAI(lambda r: ANSWER, break_streams_after=3)
    client = make(tmp_path, fake)
    got: list[ChatCompletionChunk] = []
    with pytest.raises(ConnectionError):
        for chunk in client.chat.completions.create(
            model="m", messages=MSGS, stream=True, cache=opts()
        ):
            got.append(chunk)
    assert len(got) == 3 and client.cache.partitions() == []
    client.close()
    (record,) = read_records(tmp_path / "rec.jsonl")
    assert record.outcome == "miss" and record.entry_id is None


def test_an_invalid_streamed_answer_reaches_the_caller_but_is_not_stored(tmp_path: Path) -> None:
    fake = FakeOpenAI(lambda r: "not json at all")
    client = make(tmp_path, fake, categories={"greeting": CategoryPolicy(validator=Score)})
    chunks = list(client.chat.completions.create(model="m", messages=MSGS, stream=True,
                                                 cache=opts()))  # fmt: skip
    assert _text(chunks) == "not json at all"
    assert client.cache.partitions() == []
    client.close()
    records = read_records(tmp_path / "rec.jsonl", include_invalid=True)
    assert [r.kind for r in records] == ["invalid_attempt", "call"]


def test_revise_on_a_streamed_hit_asks_for_a_whole_answer(tmp_path: Path) -> None:
    def builder(ctx: ModifyContext) -> list[dict[str, Any]]:
        return [{"role": "user", "content": f"REVISE {ctx.candidate.entry.content}"}]

    def responder(request: dict[str, Any]) -> str:
        return "revised" if request["messages"][-1]["content"].startswith("REVISE") else ANSWER

    fake = FakeOpenAI(responder)
    client = make(
        tmp_path, fake, mode=Mode.SERVE,
        categories={"greeting": CategoryPolicy(modifier=Revise(builder))},
    )  # fmt: skip
    kwargs: dict[str, Any] = {"model": "m", "messages": MSGS, "stream": True,
                              "stream_options": {"include_usage": True}}  # fmt: skip
    list(client.chat.completions.create(**kwargs, cache=opts()))
    hit = list(client.chat.completions.create(**kwargs, cache=opts(keywords=["soup"])))
    assert _text(hit) == "revised"
    assert "stream" not in fake.calls[1] and "stream_options" not in fake.calls[1]
    assert hit[-1].usage is not None and hit[-1].usage.total_tokens > 0  # the revision's cost


def test_n_above_one_and_create_with_info_refuse_or_bypass(tmp_path: Path) -> None:
    fake = FakeOpenAI(lambda r: ANSWER)
    client = make(tmp_path, fake)
    list(client.chat.completions.create(model="m", messages=MSGS, stream=True, n=2, cache=opts()))
    assert client.cache.partitions() == []
    with pytest.raises(ConfigurationError, match="non-streaming"):
        client.chat.completions.create_with_info(
            model="m", messages=MSGS, stream=True, cache=opts()
        )


def test_async_stream_miss_passes_through_and_hit_is_replayed(tmp_path: Path) -> None:
    async def main() -> None:
        fake = AsyncFakeOpenAI(lambda r: ANSWER)
        cache = SemanticCache(tmp_path / "c", embedder=HashEmbedder(dim=64))
        client = AsyncCachedLLM(fake, cache=cache)
        kwargs: dict[str, Any] = {"model": "m", "messages": MSGS, "stream": True,
                                  "stream_options": {"include_usage": True}}  # fmt: skip
        miss = [c async for c in await client.chat.completions.create(**kwargs, cache=opts())]
        assert len(miss) > 8 and _text(miss) == ANSWER and miss[-1].usage is not None
        assert len(client.cache.partitions()) == 1
        async with await client.chat.completions.create(**kwargs, cache=opts()) as stream:
            hit = [c async for c in stream]
        assert len(fake.calls) == 1 and 3 <= len(hit) <= 8
        assert all(isinstance(c, ChatCompletionChunk) for c in hit)
        assert _text(hit) == ANSWER and hit[-1].usage is not None
        # Closed early: not stored.
        early = await client.chat.completions.create(**kwargs, cache=opts(keywords=["pie"]))
        await early.__anext__()
        await early.close()
        assert len(client.cache.partitions()) == 1
        plain = await client.chat.completions.create(model="m", messages=MSGS, stream=True)
        assert _text([c async for c in plain]) == ANSWER
        total = client.cache.stats().total
        assert (total.lookups, total.hits, total.misses) == (3, 1, 2)
        client.close()

    asyncio.run(main())


def test_an_async_stream_cancelled_while_it_is_read_is_still_accounted(tmp_path: Path) -> None:
    # The reader is cancelled by an anyio cancel scope (as Starlette's is when a server's
    # client goes away) while the stream waits for a chunk: the call was paid for, so it is
    # counted; it is not stored.
    chunks = list(FakeOpenAI(lambda r: ANSWER).chat.completions.create(**_STREAMED))

    class SlowStream:
        def __init__(self) -> None:
            self._items = iter(chunks)

        def __aiter__(self) -> SlowStream:
            return self

        async def __anext__(self) -> Any:
            await asyncio.sleep(0.05)  # the next chunk is on its way
            try:
                return next(self._items)
            except StopIteration:
                raise StopAsyncIteration from None

        async def close(self) -> None:
            pass

    class SlowCompletions:
        async def create(self, **kwargs: Any) -> SlowStream:
            return SlowStream()

    class SlowClient:
        def __init__(self) -> None:
            self.chat = type("Chat", (), {"completions": SlowCompletions()})()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        # One worker thread, kept busy while the reader is cancelled: the stream's accounting
        # waits in the queue, where a cancelled await would drop it before it ever ran.
        loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
        cache = SemanticCache(tmp_path / "c", embedder=HashEmbedder(dim=64))
        client = AsyncCachedLLM(SlowClient(), cache=cache)
        stream = await client.chat.completions.create(**_STREAMED, cache=opts())
        first = asyncio.Event()

        async def read() -> None:
            async for _ in stream:
                first.set()

        busy = threading.Event()
        async with anyio.create_task_group() as readers:
            readers.start_soon(read)
            await first.wait()
            blocker = loop.run_in_executor(None, busy.wait)
            # Lands in the stream's wait for its next chunk, and is delivered again at every
            # await of the cancelled reader: the stream's close included.
            readers.cancel_scope.cancel()
        busy.set()
        await blocker
        deadline = time.monotonic() + 10
        while client.cache.stats().total.misses < 1:  # finished in a worker thread
            assert time.monotonic() < deadline, "the cancelled stream was never accounted"
            await asyncio.sleep(0.02)
        assert client.cache.partitions() == []
        client.close()

    asyncio.run(main())


# -- the Responses API -------------------------------------------------------------------------


def _deltas(events: list[Any]) -> str:
    return "".join(e.delta for e in events if e.type == "response.output_text.delta")


def test_responses_stream_miss_passes_through_and_hit_is_replayed(tmp_path: Path) -> None:
    fake = FakeOpenAI(lambda r: ANSWER)
    client = make(tmp_path, fake)
    kwargs: dict[str, Any] = {"model": "m", "input": MSGS[1]["content"], "stream": True}
    miss = list(client.responses.create(**kwargs, instructions=MSGS[0]["content"], cache=opts()))
    assert fake.calls[0] == {**kwargs, "instructions": MSGS[0]["content"]}
    assert _deltas(miss) == ANSWER and miss[-1].type == "response.completed"
    (partition,) = client.cache.partitions()
    assert [e.content for e in client.cache.entries(partition.key)] == [ANSWER]
    with client.responses.create(**kwargs, cache=opts()) as stream:
        hit = list(stream)
    assert len(fake.calls) == 1
    types = [e.type for e in hit]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert 1 <= types.count("response.output_text.delta") <= 4
    assert [e.sequence_number for e in hit] == list(range(len(hit)))
    assert _deltas(hit) == ANSWER and hit[-1].response.output_text == ANSWER
    assert hit[-1].response.id.startswith("resp_llmcache_")
    # A whole (non-streamed) call is served from the same table.
    whole, info = client.responses.create_with_info(model="m", input="x", cache=opts())
    assert info.outcome == "hit" and whole.output_text == ANSWER


def test_responses_stream_cut_short_is_not_stored(tmp_path: Path) -> None:
    fake = FakeOpenAI(lambda r: ANSWER, break_streams_after=4)
    client = make(tmp_path, fake)
    with pytest.raises(ConnectionError):
        list(client.responses.create(model="m", input="hi", stream=True, cache=opts()))
    assert client.cache.partitions() == []
    assert client.cache.stats().total.misses == 1


def test_async_responses_stream_miss_and_hit(tmp_path: Path) -> None:
    async def main() -> None:
        fake = AsyncFakeOpenAI(lambda r: ANSWER)
        cache = SemanticCache(tmp_path / "c", embedder=HashEmbedder(dim=64))
        client = AsyncCachedLLM(fake, cache=cache)
        kwargs: dict[str, Any] = {"model": "m", "input": "hi", "stream": True}
        miss = [e async for e in await client.responses.create(**kwargs, cache=opts())]
        assert _deltas(miss) == ANSWER and len(client.cache.partitions()) == 1
        async with await client.responses.create(**kwargs, cache=opts()) as stream:
            hit = [e async for e in stream]
        assert len(fake.calls) == 1 and _deltas(hit) == ANSWER
        assert hit[-1].type == "response.completed"
        client.close()

    asyncio.run(main())
