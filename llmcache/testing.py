"""Test doubles for code that uses llmcache — fakes, not mocks.

:class:`FakeOpenAI` and :class:`AsyncFakeOpenAI` stand in for ``openai.OpenAI`` /
``openai.AsyncOpenAI`` on ``chat.completions.create`` (also ``stream=True``),
``chat.completions.parse``, ``responses.create`` / ``responses.parse`` and the legacy
``completions.create`` (also ``stream=True``): they record every
request's keyword arguments verbatim and answer with text from a responder you supply, as the
SDK's real types (``ChatCompletion``, a stream of ``ChatCompletionChunk``, ``Response``,
``Completion`` and a stream of ``Completion`` chunks, and
the ``ParsedChatCompletion`` / ``ParsedResponse`` the SDK's own helpers parse them into, as the
real client does). :class:`HashEmbedder` is a deterministic embedder, and
:class:`ScriptedVerifier` a :class:`~llmcache.verification.Verifier` whose verdicts you write. None
of them
produce results anyone should read as measured.

A responder may also return a whole response body (a mapping, e.g. an answer made of tool
calls, or a malformed one): it is built the way the openai SDK builds a server's JSON, without
validation, so code under test meets what a misbehaving server would send.

>>> body = {"choices": [{"index": 0, "finish_reason": "stop", "message": None}]}
>>> FakeOpenAI(lambda request: body).chat.completions.create(model="m", messages=[]).choices[0]
Choice(finish_reason='stop', index=0, logprobs=None, message=None)

>>> from llmcache.testing import FakeOpenAI
>>> fake = FakeOpenAI(lambda request: "pong")
>>> reply = fake.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
>>> reply.choices[0].message.content
'pong'
>>> fake.calls[0]["model"]
'm'
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from openai import omit
from openai.lib._parsing import parse_chat_completion, validate_input_tools
from openai.lib._parsing._responses import parse_response
from openai.types import Completion, CompletionChoice
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from ._hash_embedder import HashEmbedder
from ._types import Usage, Verdict

__all__ = [
    "AsyncFakeOpenAI",
    "AsyncFakeStream",
    "FakeOpenAI",
    "FakeStream",
    "HashEmbedder",
    "Responder",
    "ScriptedVerifier",
    "scripted",
]

#: Answers a request: with the text of the answer, with a whole response body (a mapping,
#: missing top-level fields filled in), or with a ready ChatCompletion (chat) or Response
#: (responses) or Completion (legacy completions). A Responses request carries ``input`` where
#: a chat request has ``messages``, a legacy completions request a ``prompt``.
Responder = Callable[
    [dict[str, Any]], str | Mapping[str, Any] | ChatCompletion | Response | Completion
]


def _turns(request: dict[str, Any]) -> list[Any]:
    """The request's messages: chat ``messages``, Responses ``instructions`` + ``input``, or a
    legacy ``prompt`` as one user message."""
    if "messages" in request:
        return list(request.get("messages") or [])
    if "prompt" in request:
        prompt = request.get("prompt")
        return [{"role": "user", "content": prompt if isinstance(prompt, str) else str(prompt)}]
    turns: list[Any] = []
    if isinstance(request.get("instructions"), str):
        turns.append({"role": "system", "content": request["instructions"]})
    items = request.get("input")
    if isinstance(items, str):
        turns.append({"role": "user", "content": items})
    elif isinstance(items, Iterable):
        turns.extend(items)
    return turns


def _last_user_text(request: dict[str, Any]) -> str:
    for message in reversed(_turns(request)):
        if isinstance(message, Mapping) and message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else str(content)
    return ""


def _echo(request: dict[str, Any]) -> str:
    return f"answer to: {_last_user_text(request)}"


def scripted(answers: Iterable[str | Mapping[str, Any] | ChatCompletion]) -> Responder:
    """A responder that gives the answers in order, repeating the last one when they run out."""
    items = list(answers)
    if not items:
        raise ValueError("scripted() needs at least one answer")
    counter = itertools.count()
    lock = threading.Lock()

    def respond(request: dict[str, Any]) -> str | Mapping[str, Any] | ChatCompletion:
        with lock:
            i = next(counter)
        return items[min(i, len(items) - 1)]

    return respond


class ScriptedVerifier:
    """A :class:`~llmcache.verification.Verifier` test double: ``decide(query, cached)`` gives the
    verdict
    (``True``/``False``), or raises to play a verifier that fails. Every question is kept in
    ``calls`` as ``(query, cached, cosine)``; each verdict reports ``tokens`` prompt tokens
    spent on ``model`` (priced by the cache's price table).

    >>> verifier = ScriptedVerifier(lambda query, cached: query.lower() == cached.lower())
    >>> verifier.verify("Tree idle", "tree idle", cosine=0.85).same
    True
    >>> verifier.calls
    [('Tree idle', 'tree idle', 0.85)]
    """

    def __init__(
        self,
        decide: Callable[[str, str], bool],
        *,
        tokens: int = 0,
        model: str | None = None,
    ) -> None:
        self.decide = decide
        self.tokens = tokens
        self.model = model
        self.calls: list[tuple[str, str, float]] = []
        self._lock = threading.Lock()

    def verify(self, query: str, cached: str, *, cosine: float) -> Verdict:
        with self._lock:
            self.calls.append((query, cached, cosine))
        same = bool(self.decide(query, cached))
        return Verdict(same=same, usage=Usage(prompt_tokens=self.tokens), model=self.model)


def _prompt_chars(request: dict[str, Any]) -> int:
    return sum(len(str(m.get("content") or "")) for m in _turns(request) if isinstance(m, Mapping))


_Built = TypeVar("_Built", ChatCompletion, Completion)


def _fake_usage(kwargs: dict[str, Any], text: str) -> dict[str, int]:
    """The usage a fake server reports: about four characters a token."""
    prompt = _prompt_chars(kwargs) // 4 + 1
    completion = len(text) // 4 + 1
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _given(value: Any) -> Any:
    return value if value is not None else omit


class FakeStream:
    """What ``create(stream=True)`` returns: the chunks (chat) or events (Responses), iterated
    once, closable.

    ``break_after`` (the fake's ``break_streams_after``) makes it raise ``ConnectionError``
    after that many chunks, as a dropped connection would.
    """

    def __init__(self, chunks: list[Any], break_after: int | None = None) -> None:
        self.chunks = chunks
        self.closed = False
        self._break_after = break_after
        self._iter = iter(chunks)
        self._sent = 0

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if self.closed:
            raise StopIteration
        if self._break_after is not None and self._sent >= self._break_after:
            raise ConnectionError("the fake stream broke off")
        self._sent += 1
        return next(self._iter)

    def close(self) -> None:
        self.closed = True

    def __enter__(self) -> FakeStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncFakeStream:
    """The async twin of :class:`FakeStream`."""

    def __init__(self, chunks: list[Any], break_after: int | None = None) -> None:
        self._sync = FakeStream(chunks, break_after)

    @property
    def closed(self) -> bool:
        return self._sync.closed

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        try:
            return next(self._sync)
        except StopIteration:
            raise StopAsyncIteration from None

    async def close(self) -> None:
        self._sync.close()

    async def __aenter__(self) -> AsyncFakeStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _stream_chunks(completion: ChatCompletion, include_usage: bool) -> list[ChatCompletionChunk]:
    """The chunks a server streams for ``completion``: a role, the text word by word, the tool
    calls, the finish reason, and (when asked) a usage chunk with no choices."""
    base: dict[str, Any] = {
        "id": completion.id,
        "object": "chat.completion.chunk",
        "created": completion.created,
        "model": completion.model,
    }
    if include_usage:
        base["usage"] = None

    def chunk(delta: dict[str, Any], finish: str | None = None) -> ChatCompletionChunk:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return ChatCompletionChunk.model_validate({**base, "choices": [choice]})

    message = completion.choices[0].message
    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": w}) for w in re.findall(r"\s*\S+\s*", message.content or "")]
    for i, call in enumerate(message.tool_calls or []):
        if call.type == "function":
            function = {"name": call.function.name, "arguments": call.function.arguments}
            delta = {"index": i, "id": call.id, "type": "function", "function": function}
            chunks.append(chunk({"tool_calls": [delta]}))
    chunks.append(chunk({}, completion.choices[0].finish_reason))
    if include_usage and completion.usage is not None:
        usage = completion.usage.model_dump(mode="json")
        chunks.append(ChatCompletionChunk.model_validate({**base, "choices": [], "usage": usage}))
    return chunks


_EVENT: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def _response_events(response: Response) -> list[Any]:
    """The events a server streams for ``response``: created, each message's text word by
    word, other output items whole, completed."""
    numbers = itertools.count()

    def event(kind: str, **fields: Any) -> Any:
        return _EVENT.validate_python({"type": kind, "sequence_number": next(numbers), **fields})

    full = response.model_dump(mode="json")
    events = [event("response.created", response={**full, "status": "in_progress", "output": []})]
    for index, item in enumerate(full["output"]):
        if item["type"] == "message":
            opened = {**item, "status": "in_progress", "content": []}
            events.append(event("response.output_item.added", output_index=index, item=opened))
            part = item["content"][0]
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            events.append(event("response.content_part.added", **where, part={**part, "text": ""}))
            for word in re.findall(r"\s*\S+\s*", part["text"]):
                events.append(event("response.output_text.delta", **where, delta=word, logprobs=[]))
            events.append(
                event("response.output_text.done", **where, text=part["text"], logprobs=[])
            )
            events.append(event("response.content_part.done", **where, part=part))
        else:
            events.append(event("response.output_item.added", output_index=index, item=item))
        events.append(event("response.output_item.done", output_index=index, item=item))
    events.append(event("response.completed", response=full))
    return events


def _completion_chunks(completion: Completion, include_usage: bool) -> list[Completion]:
    """The chunks a server streams for a legacy ``completion``: its text word by word, the
    finish reason on the last, and (when asked) a usage chunk with no choices."""
    base: dict[str, Any] = {
        "id": completion.id,
        "object": "text_completion",
        "created": completion.created,
        "model": completion.model,
    }

    def chunk(text: str, finish: str | None = None) -> Completion:
        # As the SDK builds a server's chunk: without validation (a finish reason is null
        # until the last chunk, which CompletionChoice does not allow).
        fields: dict[str, Any] = {"index": 0, "text": text, "finish_reason": finish}
        choice = CompletionChoice.model_construct(**fields, logprobs=None)
        return Completion.model_construct(**base, choices=[choice])

    first = completion.choices[0]
    chunks = [chunk(w) for w in re.findall(r"\s*\S+\s*", first.text or "")]
    chunks.append(chunk("", first.finish_reason))
    if include_usage and completion.usage is not None:
        chunks.append(Completion.model_validate({**base, "choices": [], "usage": completion.usage}))
    return chunks


def _wants_usage(kwargs: Mapping[str, Any]) -> bool:
    options = kwargs.get("stream_options")
    return isinstance(options, Mapping) and bool(options.get("include_usage"))


class _FakeRawResponse:
    """The openai SDK's raw response, as frameworks read it: ``parse()`` and ``headers``."""

    status_code = 200

    def __init__(self, parsed: Any) -> None:
        self._parsed = parsed
        self.headers: dict[str, str] = {}
        self.http_response = None

    def parse(self, **_: Any) -> Any:
        return self._parsed


class _FakeRawCompletions:
    def __init__(self, completions: Any) -> None:
        self._completions = completions

    def create(self, **kwargs: Any) -> _FakeRawResponse:
        return _FakeRawResponse(self._completions.create(**kwargs))

    def parse(self, **kwargs: Any) -> _FakeRawResponse:
        return _FakeRawResponse(self._completions.parse(**kwargs))


class _AsyncFakeRawCompletions:
    def __init__(self, completions: Any) -> None:
        self._completions = completions

    async def create(self, **kwargs: Any) -> _FakeRawResponse:
        return _FakeRawResponse(await self._completions.create(**kwargs))

    async def parse(self, **kwargs: Any) -> _FakeRawResponse:
        return _FakeRawResponse(await self._completions.parse(**kwargs))


class _FakeCompletions:
    def __init__(self, owner: _FakeCore) -> None:
        self._owner = owner
        # The SDK's raw-response surface (LangChain's ChatOpenAI sends through it).
        self.with_raw_response = _FakeRawCompletions(self)

    def create(self, **kwargs: Any) -> Any:
        if kwargs.get("stream") is True:
            return FakeStream(self._owner.stream(kwargs), self._owner.break_streams_after)
        return self._owner.answer(kwargs)

    def parse(self, **kwargs: Any) -> Any:
        return self._owner.parse(kwargs)


class _AsyncFakeCompletions:
    def __init__(self, owner: _FakeCore) -> None:
        self._owner = owner
        self.with_raw_response = _AsyncFakeRawCompletions(self)

    async def create(self, **kwargs: Any) -> Any:
        if kwargs.get("stream") is True:
            return AsyncFakeStream(self._owner.stream(kwargs), self._owner.break_streams_after)
        return self._owner.answer(kwargs)

    async def parse(self, **kwargs: Any) -> Any:
        return self._owner.parse(kwargs)


class _FakeResponses:
    def __init__(self, owner: _FakeCore) -> None:
        self._owner = owner

    def create(self, **kwargs: Any) -> Any:
        if kwargs.get("stream") is True:
            events = _response_events(self._owner.respond(kwargs))
            return FakeStream(events, self._owner.break_streams_after)
        return self._owner.respond(kwargs)

    def parse(self, **kwargs: Any) -> Any:
        return self._owner.parse_response(kwargs)


class _AsyncFakeResponses:
    def __init__(self, owner: _FakeCore) -> None:
        self._owner = owner

    async def create(self, **kwargs: Any) -> Any:
        if kwargs.get("stream") is True:
            events = _response_events(self._owner.respond(kwargs))
            return AsyncFakeStream(events, self._owner.break_streams_after)
        return self._owner.respond(kwargs)

    async def parse(self, **kwargs: Any) -> Any:
        return self._owner.parse_response(kwargs)


class _FakeLegacyCompletions:
    def __init__(self, owner: _FakeCore) -> None:
        self._owner = owner

    def create(self, **kwargs: Any) -> Any:
        if kwargs.get("stream") is True:
            chunks = _completion_chunks(self._owner.complete(kwargs), _wants_usage(kwargs))
            return FakeStream(chunks, self._owner.break_streams_after)
        return self._owner.complete(kwargs)


class _AsyncFakeLegacyCompletions:
    def __init__(self, owner: _FakeCore) -> None:
        self._owner = owner

    async def create(self, **kwargs: Any) -> Any:
        if kwargs.get("stream") is True:
            chunks = _completion_chunks(self._owner.complete(kwargs), _wants_usage(kwargs))
            return AsyncFakeStream(chunks, self._owner.break_streams_after)
        return self._owner.complete(kwargs)


class _Chat:
    def __init__(self, completions: Any) -> None:
        self.completions = completions


class _FakeCore:
    def __init__(
        self,
        responder: Responder | None,
        *,
        report_usage: bool,
        break_streams_after: int | None = None,
    ) -> None:
        self.responder: Responder = responder or _echo
        self.report_usage = report_usage
        self.break_streams_after = break_streams_after
        self.calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        # Attributes code commonly reads off a real client.
        self.api_key = "fake-key"
        self.base_url = "http://fake.invalid/v1"

    def _take(self, kwargs: dict[str, Any]) -> tuple[int, Any]:
        """Record one request verbatim; its number and the responder's answer."""
        with self._lock:
            self.calls.append(kwargs)
            n = next(self._ids)
        return n, self.responder(kwargs)

    def _built(
        self,
        cls: type[_Built],
        data: dict[str, Any],
        answer: Any,
        kwargs: dict[str, Any],
        text: str,
    ) -> _Built:
        """``data`` as a ``cls`` with the fake usage added; a responder's own mapping is taken
        as the openai SDK takes a server's JSON: without validating it."""
        if self.report_usage and "usage" not in data:
            data["usage"] = _fake_usage(kwargs, text)
        if isinstance(answer, Mapping):
            return cls.construct(**data)
        return cls.model_validate(data)

    def answer(self, kwargs: dict[str, Any]) -> ChatCompletion:
        n, answer = self._take(kwargs)
        if isinstance(answer, ChatCompletion):
            return answer
        if isinstance(answer, Response):
            raise TypeError("a Response answers responses.create, not chat.completions")
        data: dict[str, Any] = {
            "id": f"chatcmpl-fake-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(kwargs.get("model", "fake-model")),
        }
        if isinstance(answer, Mapping):
            data.update(answer)
            text = str(answer)
        else:
            data["choices"] = [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": answer},
                }
            ]
            text = answer
        return self._built(ChatCompletion, data, answer, kwargs, text)

    def stream(self, kwargs: dict[str, Any]) -> list[ChatCompletionChunk]:
        """``create(stream=True)``: the answer, as the chunks a server streams."""
        return _stream_chunks(self.answer(kwargs), _wants_usage(kwargs))

    def parse(self, kwargs: dict[str, Any]) -> Any:
        """``chat.completions.parse``: the answer, parsed by the SDK's own helper (which raises
        as the real client does when the text does not fit ``response_format``)."""
        completion = self.answer(kwargs)
        return parse_chat_completion(
            response_format=_given(kwargs.get("response_format")),
            input_tools=validate_input_tools(_given(kwargs.get("tools"))),
            chat_completion=completion,
        )

    def respond(self, kwargs: dict[str, Any]) -> Response:
        """``responses.create``: the answer as the text of one output message."""
        n, answer = self._take(kwargs)
        if isinstance(answer, Response):
            return answer
        if isinstance(answer, ChatCompletion):
            raise TypeError("a ChatCompletion answers chat.completions, not responses")
        data: dict[str, Any] = {
            "id": f"resp_fake_{n}",
            "object": "response",
            "created_at": float(int(time.time())),
            "model": str(kwargs.get("model", "fake-model")),
            "status": "completed",
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        }
        if isinstance(answer, Mapping):
            data.update(answer)
            text = str(answer)
        else:
            data["output"] = [
                {
                    "type": "message",
                    "id": f"msg_fake_{n}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": answer, "annotations": []}],
                }
            ]
            text = answer
        if self.report_usage and "usage" not in data:
            prompt = _prompt_chars(kwargs) // 4 + 1
            completion = len(text) // 4 + 1
            data["usage"] = {
                "input_tokens": prompt,
                "output_tokens": completion,
                "total_tokens": prompt + completion,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            }
        if isinstance(answer, Mapping):
            built: Response = Response.construct(**data)
            return built
        return Response.model_validate(data)

    def complete(self, kwargs: dict[str, Any]) -> Completion:
        """Legacy ``completions.create``: the answer as the text of one choice."""
        n, answer = self._take(kwargs)
        if isinstance(answer, Completion):
            return answer
        if isinstance(answer, (ChatCompletion, Response)):
            raise TypeError(f"a {type(answer).__name__} does not answer legacy completions")
        data: dict[str, Any] = {
            "id": f"cmpl-fake-{n}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": str(kwargs.get("model", "fake-model")),
        }
        if isinstance(answer, Mapping):
            data.update(answer)
            text = str(answer)
        else:
            data["choices"] = [{"index": 0, "finish_reason": "stop", "text": answer}]
            text = answer
        return self._built(Completion, data, answer, kwargs, text)

    def parse_response(self, kwargs: dict[str, Any]) -> Any:
        """``responses.parse``: the answer, parsed into ``text_format`` by the SDK's helper."""
        return parse_response(
            text_format=_given(kwargs.get("text_format")),
            input_tools=_given(kwargs.get("tools")),
            response=self.respond(kwargs),
        )


class FakeOpenAI(_FakeCore):
    """A fake ``openai.OpenAI``: ``chat.completions.create(**kwargs)`` (and ``parse``,
    ``responses.create``, ``responses.parse``, the legacy ``completions.create``) answers
    with ``responder(kwargs)`` and appends ``kwargs`` to ``calls`` exactly as received.

    ``report_usage=False`` mimics a server that returns no token usage;
    ``break_streams_after=k`` one whose streams break off after ``k`` chunks.
    """

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        report_usage: bool = True,
        break_streams_after: int | None = None,
    ) -> None:
        super().__init__(
            responder, report_usage=report_usage, break_streams_after=break_streams_after
        )
        self.chat = _Chat(_FakeCompletions(self))
        self.responses = _FakeResponses(self)
        self.completions = _FakeLegacyCompletions(self)


class AsyncFakeOpenAI(_FakeCore):
    """The async twin of :class:`FakeOpenAI` (``await chat.completions.create(...)``)."""

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        report_usage: bool = True,
        break_streams_after: int | None = None,
    ) -> None:
        super().__init__(
            responder, report_usage=report_usage, break_streams_after=break_streams_after
        )
        self.chat = _Chat(_AsyncFakeCompletions(self))
        self.responses = _AsyncFakeResponses(self)
        self.completions = _AsyncFakeLegacyCompletions(self)
