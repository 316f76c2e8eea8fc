"""Drop-in wrappers of the openai client.

``CachedLLM(OpenAI())`` and ``AsyncCachedLLM(AsyncOpenAI())``.

Only ``chat.completions.create`` (and its sibling ``create_with_info``) is intercepted; the
wrapper pops its own ``cache=`` keyword and forwards every other keyword verbatim. Every other
attribute, at every level of the resource tree, is the wrapped client's own.
"""

from __future__ import annotations

import asyncio
import os
from functools import cached_property
from pathlib import Path
from typing import Any

from openai.types.chat import ChatCompletion

from ._cache import SemanticCache
from ._config import CacheConfig
from ._core import run_cached_call
from ._errors import ConfigurationError
from ._protocols import CacheBackend, Embedder
from ._recorder import Recorder
from ._types import CacheOptions, CallInfo

__all__ = ["AsyncCachedLLM", "CachedLLM"]


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
    # A stream or several choices cannot be answered from one stored completion.
    n = kwargs.get("n")
    return not kwargs.get("stream") and (n is None or n == 1 or type(n).__name__ == "NotGiven")


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
        clone.__dict__.pop("chat", None)  # the cached_property must bind to the clone
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
        """``chat.completions.create`` with an optional ``cache=CacheOptions(...)``."""
        kwargs, options = _split(kwargs)
        if options is None or not _cacheable(kwargs):
            return self._wrapped.create(**kwargs)
        completion, _ = self._run(kwargs, options)
        return completion

    def create_with_info(self, **kwargs: Any) -> tuple[ChatCompletion, CallInfo]:
        """Like ``create``, and also report how the answer was made."""
        kwargs, options = _split(kwargs)
        if options is None or not _cacheable(kwargs):
            raise ConfigurationError(
                "create_with_info needs cache=CacheOptions(...) and a non-streaming, n=1 request"
            )
        return self._run(kwargs, options)

    def _run(
        self, kwargs: dict[str, Any], options: CacheOptions
    ) -> tuple[ChatCompletion, CallInfo]:
        owner: CachedLLM = self._owner

        def call(request: dict[str, Any]) -> ChatCompletion:
            result: ChatCompletion = self._wrapped.create(**request)
            return result

        return run_cached_call(owner.cache, kwargs, options, call, owner.recorder)


class _Chat(_Delegating):
    @cached_property
    def completions(self) -> _Completions:
        return _Completions(self._owner, self._wrapped.completions)


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

    def with_cache(self, **changes: Any) -> CachedLLM:
        clone: CachedLLM = super().with_cache(**changes)
        return clone


class _AsyncCompletions(_Delegating):
    async def create(self, **kwargs: Any) -> Any:
        kwargs, options = _split(kwargs)
        if options is None or not _cacheable(kwargs):
            return await self._wrapped.create(**kwargs)
        completion, _ = await self._run(kwargs, options)
        return completion

    async def create_with_info(self, **kwargs: Any) -> tuple[ChatCompletion, CallInfo]:
        kwargs, options = _split(kwargs)
        if options is None or not _cacheable(kwargs):
            raise ConfigurationError(
                "create_with_info needs cache=CacheOptions(...) and a non-streaming, n=1 request"
            )
        return await self._run(kwargs, options)

    async def _run(
        self, kwargs: dict[str, Any], options: CacheOptions
    ) -> tuple[ChatCompletion, CallInfo]:
        owner: AsyncCachedLLM = self._owner
        loop = asyncio.get_running_loop()

        def call(request: dict[str, Any]) -> ChatCompletion:
            # The synchronous core runs in a worker thread; the LLM request goes back to the
            # caller's event loop, where the async client lives.
            future = asyncio.run_coroutine_threadsafe(self._wrapped.create(**request), loop)
            result: ChatCompletion = future.result()
            return result

        return await asyncio.to_thread(
            run_cached_call, owner.cache, kwargs, options, call, owner.recorder
        )


class _AsyncChat(_Delegating):
    @cached_property
    def completions(self) -> _AsyncCompletions:
        return _AsyncCompletions(self._owner, self._wrapped.completions)


class AsyncCachedLLM(_Base):
    """The async twin of :class:`CachedLLM`, for ``AsyncOpenAI()``; same core, same tables."""

    @cached_property
    def chat(self) -> _AsyncChat:
        return _AsyncChat(self, self._client.chat)

    def with_cache(self, **changes: Any) -> AsyncCachedLLM:
        clone: AsyncCachedLLM = super().with_cache(**changes)
        return clone
