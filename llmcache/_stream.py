"""Streams (``stream=True``): a miss passes through, a hit is replayed.

- A miss hands the caller the SDK's own stream, wrapped only to watch it go by: every chunk
  reaches the caller as it arrives and untouched, while the SDK's ``ChatCompletionStreamState``
  assembles them. When the stream ends the assembled response goes to the core, which stores it
  only if the stream completed (it reached its end and the server said why it stopped) and the
  answer validates. A stream that breaks off or is closed early is accounted, never stored.
- A hit is replayed as a few real ``ChatCompletionChunk`` objects (role, the text in pieces,
  tool calls, the finish reason, and a usage chunk when ``stream_options`` asks for one), so
  that code iterating a stream works unchanged.
- ``responses.create(stream=True)`` is the same with the Responses API's events: a miss is
  stored from its ``response.completed`` event (the whole response, as the server made it); a
  hit is replayed as ``response.created`` … ``response.output_text.delta`` (a few) …
  ``response.completed``.
- ``completions.create(stream=True)`` (the legacy Completions API) streams ``Completion``
  chunks: a miss is assembled from their texts (whole when the server said it stopped), a hit
  replayed as a few text chunks, the finish reason, and a usage chunk when asked for.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types import Completion, CompletionChoice
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from ._types import CallInfo

__all__ = [
    "Assembler",
    "AsyncReplayStream",
    "AsyncTeeStream",
    "ChatAssembler",
    "CompletionAssembler",
    "ReplayStream",
    "ResponsesAssembler",
    "TeeStream",
    "chat_chunks",
    "completion_chunks",
    "include_usage",
    "response_events",
]

logger = logging.getLogger("llmcache")

#: How many pieces a replayed answer's text is cut into.
REPLAY_PIECES = 4

EndFn = Callable[[Any, bool], Any]


def include_usage(kwargs: Mapping[str, Any]) -> bool:
    """Whether the request asked for a final usage chunk."""
    options = kwargs.get("stream_options")
    return isinstance(options, Mapping) and bool(options.get("include_usage"))


def _pieces(text: str, n: int) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // n))
    return [text[i : i + size] for i in range(0, len(text), size)]


def chat_chunks(completion: ChatCompletion, *, usage: bool) -> list[ChatCompletionChunk]:
    """The chunks a server would have streamed for ``completion`` (its first choice)."""
    base: dict[str, Any] = {
        "id": completion.id,
        "object": "chat.completion.chunk",
        "created": completion.created,
        "model": completion.model,
        "system_fingerprint": completion.system_fingerprint,
        "service_tier": completion.service_tier,
    }
    if usage:
        base["usage"] = None  # as the API does: null on every chunk but the last

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> ChatCompletionChunk:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
        return ChatCompletionChunk.model_validate({**base, "choices": [choice]})

    choice = completion.choices[0]
    message = choice.message
    chunks = [chunk({"role": "assistant", "content": "" if message.content is not None else None})]
    chunks += [chunk({"content": piece}) for piece in _pieces(message.content or "", REPLAY_PIECES)]
    if message.refusal:
        chunks.append(chunk({"refusal": message.refusal}))
    calls = [
        {
            "index": i,
            "id": call.id,
            "type": "function",
            "function": {"name": call.function.name, "arguments": call.function.arguments},
        }
        for i, call in enumerate(message.tool_calls or [])
        if call.type == "function"
    ]
    if calls:
        chunks.append(chunk({"tool_calls": calls}))
    chunks.append(chunk({}, choice.finish_reason))
    if usage and completion.usage is not None:
        chunks.append(
            ChatCompletionChunk.model_validate(
                {**base, "choices": [], "usage": completion.usage.model_dump(mode="json")}
            )
        )
    return chunks


def completion_chunks(completion: Completion, *, usage: bool) -> list[Completion]:
    """The chunks a server would have streamed for a legacy ``completion`` (its first choice):
    the text in pieces, the finish reason, and a usage chunk (no choices) when asked for."""
    base: dict[str, Any] = {
        "id": completion.id,
        "object": "text_completion",
        "created": completion.created,
        "model": completion.model,
        "system_fingerprint": completion.system_fingerprint,
    }

    def chunk(text: str, finish_reason: str | None = None) -> Completion:
        choice = {"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": None}
        return Completion.model_construct(**{**base, "choices": [_streamed_choice(choice)]})

    choice = completion.choices[0]
    chunks = [chunk(piece) for piece in _pieces(choice.text or "", REPLAY_PIECES)]
    chunks.append(chunk("", choice.finish_reason))
    if usage and completion.usage is not None:
        chunks.append(Completion.model_validate({**base, "choices": [], "usage": completion.usage}))
    return chunks


def _streamed_choice(data: dict[str, Any]) -> Any:
    # A streamed choice has no finish reason until the last chunk, which the SDK's
    # CompletionChoice (a whole answer's) requires: built as the SDK builds a server's chunk,
    # without validation.
    return CompletionChoice.model_construct(**data)


_EVENT: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def response_events(response: Response) -> list[Any]:
    """The events a server would have streamed for ``response`` (text in a few pieces; other
    output items, such as function calls, whole)."""
    numbers = itertools.count()

    def event(kind: str, **fields: Any) -> Any:
        return _EVENT.validate_python({"type": kind, "sequence_number": next(numbers), **fields})

    full: dict[str, Any] = response.model_dump(mode="json", warnings=False)
    begun = {**full, "status": "in_progress", "output": [], "usage": None}
    events = [
        event("response.created", response=begun),
        event("response.in_progress", response=begun),
    ]
    for index, item in enumerate(full.get("output") or []):
        if item.get("type") != "message":
            events.append(event("response.output_item.added", output_index=index, item=item))
            events.append(event("response.output_item.done", output_index=index, item=item))
            continue
        opened = {**item, "status": "in_progress", "content": []}
        events.append(event("response.output_item.added", output_index=index, item=opened))
        for number, part in enumerate(item.get("content") or []):
            where = {"item_id": item["id"], "output_index": index, "content_index": number}
            if part.get("type") != "output_text":
                events.append(event("response.content_part.added", **where, part=part))
                events.append(event("response.content_part.done", **where, part=part))
                continue
            text = part.get("text") or ""
            empty = {**part, "text": ""}
            events.append(event("response.content_part.added", **where, part=empty))
            for piece in _pieces(text, REPLAY_PIECES):
                events.append(
                    event("response.output_text.delta", **where, delta=piece, logprobs=[])
                )
            events.append(event("response.output_text.done", **where, text=text, logprobs=[]))
            events.append(event("response.content_part.done", **where, part=part))
        events.append(event("response.output_item.done", output_index=index, item=item))
    events.append(event("response.completed", response=full))
    return events


class Assembler(Protocol):
    """Watches a stream go by and says what it added up to."""

    def add(self, item: Any) -> None: ...

    def result(self) -> tuple[Any, bool]:
        """The assembled response (``None`` before any) and whether it is whole."""
        ...


class ResponsesAssembler:
    """A Responses stream adds up to the response its ``response.completed`` event carries."""

    def __init__(self) -> None:
        self._last: Any = None
        self._completed = False
        self._failed = False

    def add(self, event: Any) -> None:
        response = getattr(event, "response", None)
        if response is not None:
            self._last = response
        kind = getattr(event, "type", None)
        if kind == "response.completed":
            self._completed = True
        elif kind in ("response.failed", "response.incomplete", "error"):
            self._failed = True

    def result(self) -> tuple[Any, bool]:
        whole = self._completed and not self._failed
        return self._last, whole and getattr(self._last, "status", None) == "completed"


class ChatAssembler:
    """Assembles streamed chunks into the response they add up to, with the SDK's own state."""

    def __init__(self) -> None:
        self._state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
        self._seen = 0
        self._broken = False

    def add(self, chunk: Any) -> None:
        if self._broken:
            return
        try:
            self._state.handle_chunk(chunk)
            self._seen += 1
        except Exception:  # a chunk the SDK cannot read: the answer is passed on, not stored
            logger.warning("could not assemble a streamed chunk; not storing", exc_info=True)
            self._broken = True

    def result(self) -> tuple[Any, bool]:
        """The assembled response (``None`` before any chunk) and whether it is whole."""
        if not self._seen:
            return None, False
        snapshot = self._state.current_completion_snapshot
        finished = all(c.finish_reason is not None for c in snapshot.choices)
        if self._broken or not snapshot.choices or not finished:
            return snapshot, False
        try:
            return self._state.get_final_completion(), True
        except Exception:  # cut off by length or by the content filter: not a whole answer
            return snapshot, False


class CompletionAssembler:
    """Adds legacy ``Completion`` chunks up to the completion they make: the first choice's
    text, its finish reason, and the usage of a final usage chunk."""

    def __init__(self) -> None:
        self._first: Any = None
        self._texts: list[str] = []
        self._finish: Any = None
        self._usage: Any = None
        self._broken = False

    def add(self, chunk: Any) -> None:
        if self._first is None:
            self._first = chunk
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self._usage = usage
        choices = getattr(chunk, "choices", None)
        if not isinstance(choices, list):
            self._broken = True
            return
        for choice in choices:
            if getattr(choice, "index", 0) != 0:
                self._broken = True  # several choices: not one answer to store
                continue
            text = getattr(choice, "text", None)
            if isinstance(text, str):
                self._texts.append(text)
            finish = getattr(choice, "finish_reason", None)
            if finish is not None:
                self._finish = finish

    def result(self) -> tuple[Any, bool]:
        if self._first is None:
            return None, False
        data: dict[str, Any] = {
            "id": getattr(self._first, "id", ""),
            "object": "text_completion",
            "created": getattr(self._first, "created", 0),
            "model": getattr(self._first, "model", ""),
            "system_fingerprint": getattr(self._first, "system_fingerprint", None),
            "choices": [
                {
                    "index": 0,
                    "text": "".join(self._texts),
                    "finish_reason": self._finish or "length",
                    "logprobs": None,
                }
            ],
        }
        if self._usage is not None:
            data["usage"] = (
                self._usage.model_dump(mode="json")
                if hasattr(self._usage, "model_dump")
                else self._usage
            )
        try:
            response = Completion.model_validate(data)
        except Exception:  # a chunk the SDK would not read: passed on, not stored
            logger.warning("could not assemble streamed completion chunks; not storing")
            return None, False
        # Only an answer the server said it finished is whole (not one cut off by length).
        return response, self._finish == "stop" and not self._broken


class _Watch:
    """What a sync and an async pass-through stream share: the end is reported once.

    ``cache_info`` is the call's :class:`~llmcache.CallInfo`, complete once the stream ended.
    """

    def __init__(
        self, stream: Any, assembler: Assembler, on_end: EndFn, info: CallInfo | None = None
    ) -> None:
        self._stream = stream
        self._assembler = assembler
        self._on_end = on_end
        self._ended = False
        self.cache_info = info

    def __getattr__(self, name: str) -> Any:
        # Everything else (``response``, ``_iterator`` …) is the SDK stream's own.
        if name.startswith("__") or name == "_stream":
            raise AttributeError(name)
        return getattr(self._stream, name)

    def _result(self, finished: bool) -> tuple[Any, bool] | None:
        if self._ended:
            return None
        self._ended = True
        response, complete = self._assembler.result()
        return response, finished and complete


class TeeStream(_Watch):
    """A streamed miss: the SDK's stream, passed through chunk by chunk (see module doc)."""

    def __init__(
        self,
        stream: Iterable[Any],
        assembler: Assembler,
        on_end: EndFn,
        info: CallInfo | None = None,
    ) -> None:
        super().__init__(stream, assembler, on_end, info)
        self._iter: Iterator[Any] = iter(stream)

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        try:
            item = next(self._iter)
        except StopIteration:
            self._end(finished=True)
            raise
        except BaseException:
            self._end(finished=False)
            raise
        self._assembler.add(item)
        return item

    def _end(self, *, finished: bool) -> None:
        result = self._result(finished)
        if result is None:
            return
        try:
            self._on_end(*result)
        except Exception:  # the caller has its answer; the cache's bookkeeping must not break it
            logger.warning("could not finish a streamed call", exc_info=True)

    def close(self) -> None:
        self._end(finished=False)
        close = getattr(self._stream, "close", None)
        if callable(close):
            close()

    def __enter__(self) -> TeeStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncTeeStream(_Watch):
    """The async twin of :class:`TeeStream`; the core's bookkeeping runs in a worker thread."""

    def __init__(
        self, stream: Any, assembler: Assembler, on_end: EndFn, info: CallInfo | None = None
    ) -> None:
        super().__init__(stream, assembler, on_end, info)
        self._iter: AsyncIterator[Any] = stream.__aiter__()

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        try:
            item = await self._iter.__anext__()
        except StopAsyncIteration:
            await self._end(finished=True)
            raise
        except BaseException:
            await self._end(finished=False)
            raise
        self._assembler.add(item)
        return item

    async def _end(self, *, finished: bool) -> None:
        result = self._result(finished)
        if result is None:
            return
        # Shielded: a caller cancelled while reading (a server whose client went away, whose
        # cancel scope cancels again at every await) must not cancel the accounting of a call
        # that was paid for; the thread finishes it whether or not this await is cancelled.
        await asyncio.shield(asyncio.to_thread(self._finish, *result))

    def _finish(self, response: Any, complete: bool) -> None:
        try:
            self._on_end(response, complete)
        except Exception:  # the caller has its answer; the bookkeeping must not break it
            logger.warning("could not finish a streamed call", exc_info=True)

    async def close(self) -> None:
        await self._end(finished=False)
        close = getattr(self._stream, "close", None)
        if callable(close):
            await close()

    async def __aenter__(self) -> AsyncTeeStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class ReplayStream:
    """A hit replayed as a stream: iterate it, or use it as a context manager, like the SDK's
    ``Stream``; ``cache_info`` says how the answer was made."""

    def __init__(self, items: Iterable[Any], info: CallInfo | None = None) -> None:
        self._items = iter(list(items))
        self.cache_info = info

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        return next(self._items)

    def close(self) -> None:
        self._items = iter(())

    def __enter__(self) -> ReplayStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncReplayStream:
    """The async twin of :class:`ReplayStream` (``async for``, ``async with``)."""

    def __init__(self, items: Iterable[Any], info: CallInfo | None = None) -> None:
        self._items = iter(list(items))
        self.cache_info = info

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        try:
            return next(self._items)
        except StopIteration:
            raise StopAsyncIteration from None

    async def close(self) -> None:
        self._items = iter(())

    async def __aenter__(self) -> AsyncReplayStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
