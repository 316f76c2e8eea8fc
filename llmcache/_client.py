"""Drop-in wrappers of the openai client.

``CachedLLM(OpenAI())`` and ``AsyncCachedLLM(AsyncOpenAI())``.

Intercepted: ``chat.completions.create`` (also with ``stream=True``), ``chat.completions.parse``
and ``responses.create`` / ``responses.parse``, each with a ``*_with_info`` sibling that also
reports how the answer was made. The wrapper pops its own ``cache=`` keyword and forwards every
other keyword verbatim to the wrapped client's own method: a miss sends exactly what the SDK
would have sent. Every other attribute, at every level of the resource tree, is the wrapped
client's own.

Not cached (sent as they are, nothing stored): calls without ``cache=``; ``n`` > 1; Responses
requests that depend on server state or on the world at call time (see
``_shapes.responses_bypass_reason``); ``responses.parse(stream=True)``.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Any

from openai.types.chat import ChatCompletion

from ._cache import SemanticCache
from ._config import CacheConfig
from ._core import CHAT, Shape, run_cached_call, start_streamed_call
from ._errors import ConfigurationError
from ._protocols import CacheBackend, Embedder
from ._recorder import Recorder
from ._shapes import ParsedChatShape, ResponsesShape, responses_bypass_reason
from ._stream import (
    Assembler,
    AsyncReplayStream,
    AsyncTeeStream,
    ChatAssembler,
    ReplayStream,
    ResponsesAssembler,
    TeeStream,
    chat_chunks,
    include_usage,
    response_events,
)
from ._types import CacheOptions, CallInfo

__all__ = ["AsyncCachedLLM", "CachedLLM"]

logger = logging.getLogger("llmcache")


def _open_cache(
    cache: SemanticCache | str | os.PathLike[str] | CacheBackend | None,
    embedder: Embedder | None,
    config: CacheConfig | None,
) -> SemanticCache:
    if isinstance(cache, SemanticCache):
        if embedder is not None or config is not None:
            raise ConfigurationError(
                "pass embedder/config to SemanticCache(...) or to CachedLLM, not both"
            )
        return cache
    return SemanticCache(cache, embedder=embedder, config=config)


def _open_recorder(recorder: Recorder | str | os.PathLike[str] | None) -> Recorder | None:
    if recorder is None or isinstance(recorder, Recorder):
        return recorder
    return Recorder(Path(recorder))


def _split(kwargs: dict[str, Any]) -> tuple[dict[str, Any], CacheOptions | None]:
    options = kwargs.pop("cache", None)
    if options is not None and not isinstance(options, CacheOptions):
        raise ConfigurationError(f"cache= takes a CacheOptions, not {type(options).__name__}")
    return kwargs, options


def _cacheable(kwargs: dict[str, Any]) -> bool:
    # Several choices cannot be answered from one stored completion.
    n = kwargs.get("n")
    return n is None or n == 1 or type(n).__name__ in {"NotGiven", "Omit"}


def _streams(kwargs: dict[str, Any]) -> bool:
    return kwargs.get("stream") is True


def _whole(request: dict[str, Any]) -> dict[str, Any]:
    """A modifier's own request (``revise``) made while a stream is served: it needs the whole
    answer at once, so it is sent without ``stream``; the caller still gets a stream."""
    return {k: v for k, v in request.items() if k not in ("stream", "stream_options")}


def _not_cacheable(method: str, why: str) -> ConfigurationError:
    return ConfigurationError(f"{method}_with_info needs cache=CacheOptions(...) and {why}")


Replay = Callable[[Any], list[Any]]


def _assembler(shape: Shape) -> Assembler:
    return ResponsesAssembler() if isinstance(shape, ResponsesShape) else ChatAssembler()


def _stream(
    owner: Any,
    create: Callable[..., Any],
    kwargs: dict[str, Any],
    options: CacheOptions,
    shape: Shape,
    replay: Replay,
) -> Any:
    """``create(stream=True)``: a hit replayed by ``replay``, a miss passed through and stored
    at its end (see ``_stream.py``)."""

    def call(request: dict[str, Any]) -> Any:
        return create(**_whole(request))

    started = start_streamed_call(owner.cache, kwargs, options, call, owner.recorder, shape)
    if started.served is not None:
        return ReplayStream(replay(started.served), started.info)
    try:
        stream = create(**started.request)
    except BaseException:
        started.finish(None, complete=False)
        raise
    return TeeStream(
        stream,
        _assembler(shape),
        lambda response, done: started.finish(response, complete=done),
        started.info,
    )


async def _stream_async(
    owner: Any,
    create: Callable[..., Any],
    kwargs: dict[str, Any],
    options: CacheOptions,
    shape: Shape,
    replay: Replay,
) -> Any:
    """The async twin of :func:`_stream`: the core runs in a worker thread, the requests on
    the caller's event loop."""
    loop = asyncio.get_running_loop()

    def call(request: dict[str, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(create(**_whole(request)), loop).result()

    started = await asyncio.to_thread(
        start_streamed_call, owner.cache, kwargs, options, call, owner.recorder, shape
    )
    if started.served is not None:
        return AsyncReplayStream(replay(started.served), started.info)
    try:
        stream = await create(**started.request)
    except BaseException:
        await asyncio.to_thread(started.finish, None, complete=False)
        raise
    return AsyncTeeStream(
        stream,
        _assembler(shape),
        lambda response, done: started.finish(response, complete=done),
        started.info,
    )


class _Base:
    def __init__(
        self,
        client: Any,
        cache: SemanticCache | str | os.PathLike[str] | CacheBackend | None = None,
        *,
        embedder: Embedder | None = None,
        config: CacheConfig | None = None,
        recorder: Recorder | str | os.PathLike[str] | None = None,
    ) -> None:
        self._client = client
        self.cache: SemanticCache = _open_cache(cache, embedder, config)
        self.recorder: Recorder | None = _open_recorder(recorder)

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes this wrapper does not define: delegate to the client.
        # Dunder and private lookups (copy, pickle) must not recurse into a missing _client.
        if name.startswith("__") or name == "_client":
            raise AttributeError(name)
        return getattr(self._client, name)

    def with_cache(self, **changes: Any) -> Any:
        """A copy whose cache configuration differs (``mode=``, ``threshold=`` …), sharing the
        same tables, like openai's ``with_options``."""
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        # The cached_properties must bind to the clone.
        clone.__dict__.pop("chat", None)
        clone.__dict__.pop("responses", None)
        clone.cache = self.cache.with_config(**changes)
        return clone

    def close(self) -> None:
        """Flush counters and close the cache and recorder (not the wrapped client)."""
        self.cache.close()
        if self.recorder is not None:
            self.recorder.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Delegating:
    def __init__(self, owner: Any, wrapped: Any) -> None:
        self._owner = owner
        self._wrapped = wrapped

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_wrapped":
            raise AttributeError(name)
        return getattr(self._wrapped, name)


class _Completions(_Delegating):
    def create(self, **kwargs: Any) -> Any:
        """``chat.completions.create`` with an optional ``cache=CacheOptions(...)``; with
        ``stream=True`` a stream of chunks (a hit replayed, a miss passed through)."""
        kwargs, options = _split(kwargs)
        if options is None or not _cacheable(kwargs):
            return self._wrapped.create(**kwargs)
        if _streams(kwargs):
            return self._stream(kwargs, options)
        completion, _ = self._run(kwargs, options)
        return completion

    def create_with_info(self, **kwargs: Any) -> tuple[ChatCompletion, CallInfo]:
        """Like ``create``, and also report how the answer was made."""
        kwargs, options = _split(kwargs)
        if options is None or not _cacheable(kwargs) or _streams(kwargs):
            raise _not_cacheable("create", "a non-streaming, n=1 request")
        completion, info = self._run(kwargs, options)
        return completion, info

    def parse(self, **kwargs: Any) -> Any:
        """``chat.completions.parse`` with an optional ``cache=CacheOptions(...)``: a hit is a
        ``ParsedChatCompletion`` whose ``parsed`` is the ``response_format`` type, validated."""
        kwargs, options = _split(kwargs)
        if options is None or not _cacheable(kwargs):
            return self._wrapped.parse(**kwargs)
        completion, _ = self._run(kwargs, options, ParsedChatShape(kwargs), "parse")
        return completion

    def parse_with_info(self, **kwargs: Any) -> tuple[Any, CallInfo]:
        """Like ``parse``, and also report how the answer was made."""
        kwargs, options = _split(kwargs)
        if options is None or not _cacheable(kwargs):
            raise _not_cacheable("parse", "an n=1 request")
        return self._run(kwargs, options, ParsedChatShape(kwargs), "parse")

    def _run(
        self,
        kwargs: dict[str, Any],
        options: CacheOptions,
        shape: Shape = CHAT,
        method: str = "create",
    ) -> tuple[Any, CallInfo]:
        owner: CachedLLM = self._owner
        send = getattr(self._wrapped, method)

        def call(request: dict[str, Any]) -> Any:
            return send(**request)

        return run_cached_call(owner.cache, kwargs, options, call, owner.recorder, shape)

    def _stream(self, kwargs: dict[str, Any], options: CacheOptions) -> Any:
        def replay(served: Any) -> list[Any]:
            return chat_chunks(served, usage=include_usage(kwargs))

        return _stream(self._owner, self._wrapped.create, kwargs, options, CHAT, replay)


class _Chat(_Delegating):
    @cached_property
    def completions(self) -> _Completions:
        return _Completions(self._owner, self._wrapped.completions)


class _Responses(_Delegating):
    """``responses.create`` / ``responses.parse`` with an optional ``cache=CacheOptions(...)``."""

    def create(self, **kwargs: Any) -> Any:
        """``responses.create``; a hit is a real ``Response`` (with ``stream=True``, replayed
        as the events a server streams)."""
        kwargs, options = _split(kwargs)
        if options is None or _responses_bypass(kwargs, streams_cached=True):
            return self._wrapped.create(**kwargs)
        if _streams(kwargs):
            return self._stream(kwargs, options)
        response, _ = self._run(kwargs, options, "create")
        return response

    def create_with_info(self, **kwargs: Any) -> tuple[Any, CallInfo]:
        """Like ``create``, and also report how the answer was made."""
        kwargs, options = _split(kwargs)
        _check_responses("create", kwargs, options)
        return self._run(kwargs, options, "create")

    def parse(self, **kwargs: Any) -> Any:
        """``responses.parse``; a hit is a ``ParsedResponse`` of the ``text_format`` type."""
        kwargs, options = _split(kwargs)
        if options is None or _responses_bypass(kwargs):
            return self._wrapped.parse(**kwargs)
        response, _ = self._run(kwargs, options, "parse")
        return response

    def parse_with_info(self, **kwargs: Any) -> tuple[Any, CallInfo]:
        kwargs, options = _split(kwargs)
        _check_responses("parse", kwargs, options)
        return self._run(kwargs, options, "parse")

    def _run(
        self, kwargs: dict[str, Any], options: CacheOptions | None, method: str
    ) -> tuple[Any, CallInfo]:
        assert options is not None
        owner: CachedLLM = self._owner
        send = getattr(self._wrapped, method)

        def call(request: dict[str, Any]) -> Any:
            return send(**request)

        return run_cached_call(
            owner.cache, kwargs, options, call, owner.recorder, ResponsesShape(kwargs)
        )

    def _stream(self, kwargs: dict[str, Any], options: CacheOptions) -> Any:
        shape = ResponsesShape(kwargs)
        return _stream(self._owner, self._wrapped.create, kwargs, options, shape, response_events)


def _responses_bypass(kwargs: dict[str, Any], *, streams_cached: bool = False) -> bool:
    if _streams(kwargs) and not streams_cached:
        return True
    reason = responses_bypass_reason(kwargs)
    if reason is not None:
        logger.debug("not cached: %s", reason)
    return reason is not None


def _check_responses(method: str, kwargs: dict[str, Any], options: CacheOptions | None) -> None:
    if options is None:
        raise _not_cacheable(method, "a cacheable request")
    if _streams(kwargs):
        raise _not_cacheable(method, "a non-streaming request")
    reason = responses_bypass_reason(kwargs)
    if reason is not None:
        raise _not_cacheable(method, f"a request the cache can answer (here {reason})")


class CachedLLM(_Base):
    """``CachedLLM(OpenAI())``: the same calls and return types, answered from a semantic cache
    whenever a call carries ``cache=CacheOptions(...)``.

    ``cache`` is a :class:`SemanticCache`, a directory, a ``postgresql://`` DSN or a backend
    (default: ``$LLMCACHE_DIR`` or ``./.llmcache``). ``recorder`` (a path or
    :class:`Recorder`) appends every cached call to a JSONL dataset.
    """

    @cached_property
    def chat(self) -> _Chat:
        return _Chat(self, self._client.chat)

    @cached_property
    def responses(self) -> _Responses:
        return _Responses(self, self._client.responses)

    def with_cache(self, **changes: Any) -> CachedLLM:
        clone: CachedLLM = super().with_cache(**changes)
        return clone


async def _run_async(
    owner: AsyncCachedLLM,
    send: Any,
    kwargs: dict[str, Any],
    options: CacheOptions,
    shape: Shape,
) -> tuple[Any, CallInfo]:
    loop = asyncio.get_running_loop()

    def call(request: dict[str, Any]) -> Any:
        # The synchronous core runs in a worker thread; the LLM request goes back to the
        # caller's event loop, where the async client lives.
        return asyncio.run_coroutine_threadsafe(send(**request), loop).result()

    return await asyncio.to_thread(
        run_cached_call, owner.cache, kwargs, options, call, owner.recorder, shape
    )


class _AsyncCompletions(_Delegating):
    async def create(self, **kwargs: Any) -> Any:
        kwargs, options = _split(kwargs)
        if options is None or not _cacheable(kwargs):
            return await self._wrapped.create(**kwargs)
        if _streams(kwargs):
            return await self._stream(kwargs, options)
        completion, _ = await self._run(kwargs, options)
        return completion

    async def create_with_info(self, **kwargs: Any) -> tuple[ChatCompletion, CallInfo]:
        kwargs, options = _split(kwargs)
        if options is None or not _cacheable(kwargs) or _streams(kwargs):
            raise _not_cacheable("create", "a non-streaming, n=1 request")
        completion, info = await self._run(kwargs, options)
        return completion, info

    async def parse(self, **kwargs: Any) -> Any:
        kwargs, options = _split(kwargs)
        if options is None or not _cacheable(kwargs):
            return await self._wrapped.parse(**kwargs)
        completion, _ = await self._run(kwargs, options, ParsedChatShape(kwargs), "parse")
        return completion

    async def parse_with_info(self, **kwargs: Any) -> tuple[Any, CallInfo]:
        kwargs, options = _split(kwargs)
        if options is None or not _cacheable(kwargs):
            raise _not_cacheable("parse", "an n=1 request")
        return await self._run(kwargs, options, ParsedChatShape(kwargs), "parse")

    async def _run(
        self,
        kwargs: dict[str, Any],
        options: CacheOptions,
        shape: Shape = CHAT,
        method: str = "create",
    ) -> tuple[Any, CallInfo]:
        send = getattr(self._wrapped, method)
        return await _run_async(self._owner, send, kwargs, options, shape)

    async def _stream(self, kwargs: dict[str, Any], options: CacheOptions) -> Any:
        def replay(served: Any) -> list[Any]:
            return chat_chunks(served, usage=include_usage(kwargs))

        create = self._wrapped.create
        return await _stream_async(self._owner, create, kwargs, options, CHAT, replay)


class _AsyncChat(_Delegating):
    @cached_property
    def completions(self) -> _AsyncCompletions:
        return _AsyncCompletions(self._owner, self._wrapped.completions)


class _AsyncResponses(_Delegating):
    async def create(self, **kwargs: Any) -> Any:
        kwargs, options = _split(kwargs)
        if options is None or _responses_bypass(kwargs, streams_cached=True):
            return await self._wrapped.create(**kwargs)
        if _streams(kwargs):
            return await self._stream(kwargs, options)
        response, _ = await self._run(kwargs, options, "create")
        return response

    async def create_with_info(self, **kwargs: Any) -> tuple[Any, CallInfo]:
        kwargs, options = _split(kwargs)
        _check_responses("create", kwargs, options)
        return await self._run(kwargs, options, "create")

    async def parse(self, **kwargs: Any) -> Any:
        kwargs, options = _split(kwargs)
        if options is None or _responses_bypass(kwargs):
            return await self._wrapped.parse(**kwargs)
        response, _ = await self._run(kwargs, options, "parse")
        return response

    async def parse_with_info(self, **kwargs: Any) -> tuple[Any, CallInfo]:
        kwargs, options = _split(kwargs)
        _check_responses("parse", kwargs, options)
        return await self._run(kwargs, options, "parse")

    async def _run(
        self, kwargs: dict[str, Any], options: CacheOptions | None, method: str
    ) -> tuple[Any, CallInfo]:
        assert options is not None
        send = getattr(self._wrapped, method)
        return await _run_async(self._owner, send, kwargs, options, ResponsesShape(kwargs))

    async def _stream(self, kwargs: dict[str, Any], options: CacheOptions) -> Any:
        shape = ResponsesShape(kwargs)
        create = self._wrapped.create
        return await _stream_async(self._owner, create, kwargs, options, shape, response_events)


class AsyncCachedLLM(_Base):
    """The async twin of :class:`CachedLLM`, for ``AsyncOpenAI()``; same core, same tables."""

    @cached_property
    def chat(self) -> _AsyncChat:
        return _AsyncChat(self, self._client.chat)

    @cached_property
    def responses(self) -> _AsyncResponses:
        return _AsyncResponses(self, self._client.responses)

    def with_cache(self, **changes: Any) -> AsyncCachedLLM:
        clone: AsyncCachedLLM = super().with_cache(**changes)
        return clone
