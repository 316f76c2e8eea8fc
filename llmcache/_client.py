"""Drop-in wrappers of the openai client.

``CachedLLM(OpenAI())`` and ``AsyncCachedLLM(AsyncOpenAI())``.

Intercepted: ``chat.completions.create`` (also with ``stream=True``), ``chat.completions.parse``,
``responses.create`` / ``responses.parse`` and the legacy ``completions.create`` (also with
``stream=True``), each with a ``*_with_info`` sibling that also
reports how the answer was made. The wrapper pops its own ``cache=`` keyword and forwards every
other keyword verbatim to the wrapped client's own method: a miss sends exactly what the SDK
would have sent. Every other attribute, at every level of the resource tree, is the wrapped
client's own.

Not cached (sent as they are, nothing stored): calls without ``cache=``; ``n`` > 1; Responses
requests that depend on server state or on the world at call time (see
``_shapes.responses_bypass_reason``); legacy completions of anything but one text prompt, or
with ``echo``, ``logprobs``, ``suffix`` or ``best_of`` (see
``_shapes.completions_bypass_reason``); ``responses.parse(stream=True)``. Each resource's
``cache_bypass_reason(**kwargs)`` says, before a call, whether and why ``create`` would bypass.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

import openai
from openai.types.chat import ChatCompletion

from ._cache import SemanticCache
from ._cached_call import file_paid, run_cached_call, start_streamed_call
from ._config import CacheConfig
from ._errors import ConfigurationError
from ._late import LateFiling
from ._learn import TemplateLearner
from ._ledger import LEARNED_PREFIX, UNTABLED_KEY
from ._protocols import CacheBackend, Embedder
from ._recognise import TemplateSet
from ._recorder import Recorder
from ._shapes import (
    CHAT,
    COMPLETIONS,
    CompletionsShape,
    ParsedChatShape,
    Prompt,
    ResponsesShape,
    Shape,
    chat_bypass_reason,
    chat_prompt,
    completions_bypass_reason,
    completions_prompt,
    responses_bypass_reason,
    responses_prompt,
)
from ._site import carried_by, current_site
from ._stream import (
    Assembler,
    AsyncReplayStream,
    AsyncTeeStream,
    ChatAssembler,
    CompletionAssembler,
    ReplayStream,
    ResponsesAssembler,
    TeeStream,
    chat_chunks,
    completion_chunks,
    include_usage,
    response_events,
)
from ._template import PromptTemplate
from ._types import CacheOptions, CallInfo, EmbedMode

__all__ = ["AsyncCachedLLM", "CachedLLM"]

logger = logging.getLogger("llmcache")


def _open_cache(
    cache: SemanticCache | str | os.PathLike[str] | CacheBackend | None,
    embedder: Embedder | None,
    config: CacheConfig | str | os.PathLike[str] | None,
) -> SemanticCache:
    if isinstance(config, (str, os.PathLike)):
        # A file written by CacheConfig.to_file (e.g. by `python -m llmcache tune`).
        config = CacheConfig.from_file(config)
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


def _pop_options(kwargs: dict[str, Any]) -> CacheOptions | bool:
    """Take this wrapper's own ``cache=`` keyword out of a call's keyword arguments: the
    options given, ``True`` when none were (the prompt may be recognised), ``False`` for
    ``cache=False`` (not cached, not recognised)."""
    options = kwargs.pop("cache", None)
    if options is None:
        return True
    if options is False or isinstance(options, CacheOptions):
        return options
    raise ConfigurationError(
        f"cache= takes a CacheOptions (or False), not {type(options).__name__}"
    )


# -- templates recognised from a call's prompt: one place for every intercepted call ----------

Templates = TemplateSet | Iterable[PromptTemplate] | str | os.PathLike[str]


def _open_templates(templates: Templates | None) -> TemplateSet | None:
    if templates is None or isinstance(templates, TemplateSet):
        return templates
    if isinstance(templates, (str, os.PathLike)):
        return TemplateSet.from_folder(templates)
    return TemplateSet(templates)


def recognised_options(
    templates: TemplateSet | None, prompt: Prompt, default_agent: str
) -> tuple[CacheOptions | None, str | None]:
    """The options a call without ``cache=`` is filed under, or ``None`` and why not."""
    if templates is None:
        return None, None
    if isinstance(prompt, str):
        return None, f"no template recognised: {prompt}"
    found = templates.recognise(*prompt)
    filled = found.filled
    if filled is None:
        return None, f"no template recognised: {found.reason}"
    options = filled.cache_options(agent=found.agent(default_agent))
    values = options.keywords if options.keywords is not None else (options.slots or {}).values()
    if not any(v.strip() for v in values):
        # A template without slots (or whose slots are blank here) has no keywords to embed:
        # its whole, fixed prompt is what it is found by.
        options = options.model_copy(update={"embed": EmbedMode.FULL})
    return options, None


def _open_learner(learn: bool | TemplateLearner) -> TemplateLearner | None:
    if isinstance(learn, TemplateLearner):
        return learn
    return TemplateLearner() if learn else None


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
    if isinstance(shape, ResponsesShape):
        return ResponsesAssembler()
    if isinstance(shape, CompletionsShape):
        return CompletionAssembler()
    return ChatAssembler()


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


_Client = TypeVar("_Client", bound="_Base")


class _Base:
    """What ``CachedLLM`` and ``AsyncCachedLLM`` share: the cache, the recorder, delegation of
    everything else to the wrapped client, and copies with another configuration."""

    def __init__(
        self,
        client: Any,
        cache: SemanticCache | str | os.PathLike[str] | CacheBackend | None = None,
        *,
        embedder: Embedder | None = None,
        config: CacheConfig | str | os.PathLike[str] | None = None,
        recorder: Recorder | str | os.PathLike[str] | None = None,
        templates: Templates | None = None,
        default_agent: str = "",
        learn_templates: bool | TemplateLearner = False,
    ) -> None:
        self._client = client
        self.cache: SemanticCache = _open_cache(cache, embedder, config)
        self.recorder: Recorder | None = _open_recorder(recorder)
        self.templates: TemplateSet | None = _open_templates(templates)
        self.default_agent = default_agent
        self.learner: TemplateLearner | None = _open_learner(learn_templates)
        self._described: set[str] = set()
        # Calls the learner handled (passed through, or filed under a learned template), with
        # their requests and fresh answers: filed under the template that files them once one
        # is learned or changed (llmcache/_late.py).
        self._late: LateFiling[tuple[dict[str, Any], Any]] = LateFiling()

    def file_prompt(self, prompt: Prompt) -> CacheOptions | None:
        """The options a call without ``cache=`` is filed under (its prompt recognised by
        ``templates``, else learned by ``learn_templates``); ``None`` when it is not cached,
        counted as ``unrecognised`` when the client has templates, as ``learning`` when the
        learner passed it through. For every intercepted resource (see ``chat_prompt``)."""
        if self.templates is None and self.learner is None:
            return None
        options, reason = recognised_options(self.templates, prompt, self.default_agent)
        if options is None and self.learner is not None and not isinstance(prompt, str):
            # Declared templates first; what they do not recognise is learned from.
            with carried_by(self):  # a subclass's method is not the call's code site
                options = self.learner.options(*prompt, self.default_agent)
                # Its answer is filed under the template that files it once one is learned,
                # or changed (llmcache/_late.py).
                if options is None:
                    self._late.expect(prompt, current_site())
                else:
                    self._late.expect(prompt, options.metadata.get("site"), options.category)
            if options is None:
                self.cache.ledger.add(UNTABLED_KEY, {"learning": 1})
                return None
            self._describe(options)
            return options
        if options is None:
            logger.debug("not cached: %s", reason)
            self.cache.ledger.add(UNTABLED_KEY, {"unrecognised": 1})
        return options

    def _heard(self, kwargs: dict[str, Any], completion: Any, *, fresh: bool = True) -> bool:
        """Tell the learner a chat call's answer (``TemplateLearner.heard``): a later prompt
        that quotes it holds it as a value; and keep it when the learner handled its call
        (``llmcache/_late.py``). Calls the learner may see only (one user message
        after at most one system message), non-streamed; anything else is skipped. Told by the
        chat resource's cached core (``_run``; ``fresh``: the model's own answer, not a hit's)
        and by its pass-throughs. Whether answers kept are now due to be filed
        (:meth:`_file_late`)."""
        if self.learner is None or _streams(kwargs):
            return False
        prompt = chat_prompt(kwargs)
        choices = getattr(completion, "choices", None)
        if isinstance(prompt, str) or not choices:
            return False
        text = getattr(getattr(choices[0], "message", None), "content", None)
        if isinstance(text, str):
            self.learner.heard(text, *prompt)
        self._late.answered(prompt, (dict(kwargs), completion), fresh=fresh)
        return self._late.ready(self.learner)

    def _hear(self, kwargs: dict[str, Any], completion: Any, *, fresh: bool = True) -> None:
        """:meth:`_heard`, then the answers due filed (the synchronous resources)."""
        if self._heard(kwargs, completion, fresh=fresh):
            self._file_late()

    async def _hear_async(
        self, kwargs: dict[str, Any], completion: Any, *, fresh: bool = True
    ) -> None:
        """:meth:`_heard`, then the answers due filed in a worker thread (they are embedded and
        stored: not on the caller's event loop)."""
        if self._heard(kwargs, completion, fresh=fresh):
            await asyncio.to_thread(self._file_late)

    def _file_late(self) -> None:
        """File the kept answers that a template learned or changed since files under another
        category than before (``llmcache/_late.py``), counted as ``filed_late``."""
        if self.learner is None:
            return
        filed = 0
        for (kwargs, completion), options in self._late.due(self.learner, self.default_agent):
            self._describe(options)
            filed += file_paid(self.cache, kwargs, options, completion, CHAT) is not None
        if filed:
            self.cache.ledger.add(UNTABLED_KEY, {"filed_late": filed})

    def peek_prompt(self, prompt: Prompt) -> tuple[CacheOptions | None, str | None]:
        """The options a call without ``cache=`` would be filed under, learning and counting
        nothing, or ``None`` and why not."""
        options, reason = recognised_options(self.templates, prompt, self.default_agent)
        if options is None and self.learner is not None and not isinstance(prompt, str):
            options = self.learner.recognise(*prompt, self.default_agent)
            if options is None:
                reason = "no learned template recognised: its template is still being learned"
        return options, reason

    def _describe(self, options: CacheOptions) -> None:
        # A learned template's text, written once per process into the cache's counters, so
        # that stats() and the proxy's /metrics can show it beside its tables.
        if options.category in self._described or self.learner is None:
            return
        self._described.add(options.category)
        for learned in self.learner.templates():
            if learned.name == options.category:
                name = f"{LEARNED_PREFIX}{learned.name}:{learned.shown()}"
                self.cache.ledger.add(UNTABLED_KEY, {name: 1.0})

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes this wrapper does not define: delegate to the client.
        # Dunder and private lookups (copy, pickle) must not recurse into a missing _client.
        if name.startswith("__") or name == "_client":
            raise AttributeError(name)
        return getattr(self._client, name)

    def with_cache(self: _Client, **changes: Any) -> _Client:
        """A copy whose cache configuration differs (``mode=``, ``threshold=`` …), sharing the
        same tables, recorder and wrapped client, like openai's ``with_options``."""
        return type(self)(
            self._client,
            self.cache.with_config(**changes),
            recorder=self.recorder,
            templates=self.templates,
            default_agent=self.default_agent,
            learn_templates=self.learner if self.learner is not None else False,
        )

    def close(self) -> None:
        """Flush counters and close the cache and recorder (not the wrapped client)."""
        self.cache.close()
        if self.recorder is not None:
            self.recorder.close()

    def __enter__(self: _Client) -> _Client:
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


# -- what a call is, before anything is sent: shared by the sync and async resources ----------


class _CompletionsBase(_Delegating):
    """``chat.completions``: which calls the cache answers, with which :class:`Shape`.

    ``_options`` pops ``cache=`` and returns it, or ``None`` when the call goes to the wrapped
    client as given; ``_options_with_info`` refuses, naming why, a call the cache cannot answer.
    """

    def cache_bypass_reason(self, **kwargs: Any) -> str | None:
        """Why ``create(**kwargs)`` would go to the wrapped client as it is (nothing looked
        up, stored or counted), or ``None`` when the cache answers it. Without ``cache=`` in
        ``kwargs``, on a client with templates: also when no template is recognised."""
        reason = chat_bypass_reason(kwargs)
        if reason is not None:
            return reason
        return _recognition_reason(self._owner, kwargs, chat_prompt)

    def cache_options_for(self, **kwargs: Any) -> CacheOptions | None:
        """The options ``create(**kwargs)`` without ``cache=`` is filed under: recognised from
        its prompt by the client's templates (``None``: not recognised, or no templates)."""
        return _recognised_for(self._owner, kwargs, chat_prompt)

    def file_call(self, **kwargs: Any) -> CacheOptions | None:
        """What ``create(**kwargs)`` does first: the options it files a call without
        ``cache=`` under (recognised, or learned from its prompt), counting it as ``create``
        would; ``None``: it passes through. A caller that sends it on must not file it again
        (``cache=False``)."""
        return self._options(dict(kwargs))

    def _options(self, kwargs: dict[str, Any]) -> CacheOptions | None:
        options = _pop_options(kwargs)
        if options is False or chat_bypass_reason(kwargs) is not None:
            return None
        if options is True:
            owner: _Base = self._owner
            return owner.file_prompt(chat_prompt(kwargs))
        return options

    def _options_with_info(self, kwargs: dict[str, Any], method: str) -> CacheOptions:
        options = self._options(kwargs)
        if method == "create":
            if options is None or _streams(kwargs):
                raise _not_cacheable("create", "a non-streaming, n=1 request")
        elif options is None:
            raise _not_cacheable("parse", "an n=1 request")
        return options

    @staticmethod
    def _shape(kwargs: dict[str, Any], method: str) -> Shape:
        return CHAT if method == "create" else ParsedChatShape(kwargs)

    @staticmethod
    def _replay(kwargs: dict[str, Any]) -> Replay:
        def replay(served: Any) -> list[Any]:
            return chat_chunks(served, usage=include_usage(kwargs))

        return replay


class _ResponsesBase(_Delegating):
    """``responses``: which calls the cache answers (see :class:`_CompletionsBase`)."""

    def cache_bypass_reason(self, **kwargs: Any) -> str | None:
        """Why ``create(**kwargs)`` would go to the wrapped client as it is (the answer
        depends on state held by the server, or on the world at call time), or ``None`` when
        the cache answers it. Without ``cache=`` in ``kwargs``, on a client with templates:
        also when no template is recognised."""
        reason = responses_bypass_reason(kwargs)
        if reason is not None:
            return reason
        return _recognition_reason(self._owner, kwargs, responses_prompt)

    def cache_options_for(self, **kwargs: Any) -> CacheOptions | None:
        """The options ``create(**kwargs)`` without ``cache=`` is filed under: recognised from
        its prompt by the client's templates (``None``: not recognised, or no templates)."""
        return _recognised_for(self._owner, kwargs, responses_prompt)

    def file_call(self, **kwargs: Any) -> CacheOptions | None:
        """What ``create(**kwargs)`` does first: the options it files a call without
        ``cache=`` under (recognised, or learned from its prompt), counting it as ``create``
        would; ``None``: it passes through. A caller that sends it on must not file it again
        (``cache=False``)."""
        return self._options(dict(kwargs), "create")

    def _options(self, kwargs: dict[str, Any], method: str) -> CacheOptions | None:
        options = _pop_options(kwargs)
        # Only create replays a stream; responses.parse(stream=True) is not intercepted.
        if options is False or _responses_bypass(kwargs, streams_cached=method == "create"):
            return None
        if options is True:
            owner: _Base = self._owner
            return owner.file_prompt(responses_prompt(kwargs))
        return options

    def _options_with_info(self, kwargs: dict[str, Any], method: str) -> CacheOptions:
        popped = _pop_options(kwargs)
        options: CacheOptions | None = None
        if isinstance(popped, CacheOptions):
            options = popped
        elif popped and not _streams(kwargs) and responses_bypass_reason(kwargs) is None:
            options = self._owner.file_prompt(responses_prompt(kwargs))
        if options is None:
            raise _not_cacheable(method, "a cacheable request")
        if _streams(kwargs):
            raise _not_cacheable(method, "a non-streaming request")
        reason = responses_bypass_reason(kwargs)
        if reason is not None:
            raise _not_cacheable(method, f"a request the cache can answer (here {reason})")
        return options

    @staticmethod
    def _shape(kwargs: dict[str, Any]) -> ResponsesShape:
        return ResponsesShape(kwargs)


class _LegacyBase(_Delegating):
    """``completions`` (the legacy Completions API): which calls the cache answers."""

    def cache_bypass_reason(self, **kwargs: Any) -> str | None:
        """Why ``create(**kwargs, cache=...)`` would go to the wrapped client as it is (several
        prompts or token ids, several choices, ``echo``, ``logprobs``, ``suffix``), or ``None``
        when the cache answers it. Without ``cache=`` in ``kwargs``, on a client with
        templates: also when no template is recognised."""
        reason = completions_bypass_reason(kwargs)
        if reason is not None:
            return reason
        return _recognition_reason(self._owner, kwargs, completions_prompt)

    def cache_options_for(self, **kwargs: Any) -> CacheOptions | None:
        """The options ``create(**kwargs)`` without ``cache=`` is filed under (see
        :meth:`_CompletionsBase.cache_options_for`)."""
        return _recognised_for(self._owner, kwargs, completions_prompt)

    def file_call(self, **kwargs: Any) -> CacheOptions | None:
        """What ``create(**kwargs)`` does first: the options it files a call without
        ``cache=`` under (recognised, or learned from its prompt), counting it as ``create``
        would; ``None``: it passes through. A caller that sends it on must not file it again
        (``cache=False``)."""
        return self._options(dict(kwargs))

    def _options(self, kwargs: dict[str, Any]) -> CacheOptions | None:
        options = _pop_options(kwargs)
        if options is False:
            return None
        reason = completions_bypass_reason(kwargs)
        if reason is not None:
            logger.debug("not cached: %s", reason)
            return None
        if options is True:
            owner: _Base = self._owner
            return owner.file_prompt(completions_prompt(kwargs))
        return options

    def _options_with_info(self, kwargs: dict[str, Any]) -> CacheOptions:
        if _streams(kwargs):
            raise _not_cacheable("create", "a non-streaming request")
        reason = completions_bypass_reason(kwargs)
        if reason is not None:
            raise _not_cacheable("create", f"a request the cache can answer (here {reason})")
        options = self._options(kwargs)
        if options is None:
            raise _not_cacheable("create", "a cacheable request")
        return options

    @staticmethod
    def _replay(kwargs: dict[str, Any]) -> Replay:
        def replay(served: Any) -> list[Any]:
            return list(completion_chunks(served, usage=include_usage(kwargs)))

        return replay


def _recognition_reason(
    owner: _Base, kwargs: Mapping[str, Any], prompt: Callable[[Mapping[str, Any]], Prompt]
) -> str | None:
    if kwargs.get("cache") is not None:
        return None
    return owner.peek_prompt(prompt(kwargs))[1]


def _recognised_for(
    owner: _Base, kwargs: Mapping[str, Any], prompt: Callable[[Mapping[str, Any]], Prompt]
) -> CacheOptions | None:
    return owner.peek_prompt(prompt(kwargs))[0]


def _responses_bypass(kwargs: dict[str, Any], *, streams_cached: bool) -> bool:
    if _streams(kwargs) and not streams_cached:
        return True
    reason = responses_bypass_reason(kwargs)
    if reason is not None:
        logger.debug("not cached: %s", reason)
    return reason is not None


# -- sync ---------------------------------------------------------------------------------------


def _run(
    owner: CachedLLM, send: Any, kwargs: dict[str, Any], options: CacheOptions, shape: Shape
) -> tuple[Any, CallInfo]:
    def call(request: dict[str, Any]) -> Any:
        return send(**request)

    return run_cached_call(owner.cache, kwargs, options, call, owner.recorder, shape)


class _Completions(_CompletionsBase):
    def create(self, **kwargs: Any) -> Any:
        """``chat.completions.create`` with an optional ``cache=CacheOptions(...)``; with
        ``stream=True`` a stream of chunks (a hit replayed, a miss passed through)."""
        options = self._options(kwargs)
        if options is None:
            completion = self._wrapped.create(**kwargs)
            self._owner._hear(kwargs, completion)
            return completion
        if _streams(kwargs):
            create = self._wrapped.create
            return _stream(self._owner, create, kwargs, options, CHAT, self._replay(kwargs))
        return self._run(kwargs, options, "create")[0]

    def create_with_info(self, **kwargs: Any) -> tuple[ChatCompletion, CallInfo]:
        """Like ``create``, and also report how the answer was made."""
        options = self._options_with_info(kwargs, "create")
        completion, info = self._run(kwargs, options, "create")
        return completion, info

    def parse(self, **kwargs: Any) -> Any:
        """``chat.completions.parse`` with an optional ``cache=CacheOptions(...)``: a hit is a
        ``ParsedChatCompletion`` whose ``parsed`` is the ``response_format`` type, validated."""
        options = self._options(kwargs)
        if options is None:
            return self._wrapped.parse(**kwargs)
        return self._run(kwargs, options, "parse")[0]

    def parse_with_info(self, **kwargs: Any) -> tuple[Any, CallInfo]:
        """Like ``parse``, and also report how the answer was made."""
        options = self._options_with_info(kwargs, "parse")
        return self._run(kwargs, options, "parse")

    @cached_property
    def with_raw_response(self) -> _RawCompletions:
        """The raw-response surface of the openai SDK, cached like ``create``/``parse``
        (:class:`CachedRawResponse`)."""
        return _RawCompletions(self)

    def _run(
        self, kwargs: dict[str, Any], options: CacheOptions, method: str
    ) -> tuple[Any, CallInfo]:
        shape = self._shape(kwargs, method)
        send: Callable[..., Any] = self._wrapped.create
        if isinstance(shape, ParsedChatShape):
            create, parsed = send, shape

            def send(**request: Any) -> Any:
                return parsed.parsed_answer(create(**parsed.create_request(request)))

        completion, info = _run(self._owner, send, kwargs, options, shape)
        if method == "create":
            self._owner._hear(kwargs, completion, fresh=info.outcome in ("miss", "collect"))
        return completion, info


class CachedRawResponse:
    """What ``chat.completions.with_raw_response.create`` (or ``.parse``) returns for a call
    the cache handled: the openai SDK's raw-response surface that frameworks read (LangChain's
    ``ChatOpenAI`` sends every non-streaming request this way). ``parse()`` is the
    completion, hit or miss; ``headers`` say how it was made (``x-llmcache``: ``hit``,
    ``miss``, ...), since a hit has no HTTP response of its own; ``info`` is its
    :class:`~llmcache.CallInfo`."""

    status_code = 200

    def __init__(self, completion: Any, info: CallInfo) -> None:
        self._completion = completion
        self.info = info
        self.headers: dict[str, str] = {"x-llmcache": info.outcome}
        self.http_response = None
        self.request_id = getattr(completion, "_request_id", None)

    def parse(self, **_: Any) -> Any:
        return self._completion


def _hear_raw(owner: _Base, kwargs: dict[str, Any], response: Any) -> bool:
    """Tell the learner the answer of a raw response passed through (openai parses it once and
    keeps what it parsed, so the caller's ``parse()`` reads the same object). One that does not
    parse is left for the caller's ``parse()`` to report. Whether kept answers are now due to
    be filed (``_Base._file_late``)."""
    if _streams(kwargs) or not callable(getattr(response, "parse", None)):
        return False
    try:
        completion = response.parse()
    except (openai.OpenAIError, ValueError, TypeError) as exc:
        logger.debug("a raw response's answer was not read for the learner: %s", exc)
        return False
    return owner._heard(kwargs, completion)


class _RawCompletions:
    """``chat.completions.with_raw_response``: a call the cache answers returns a
    :class:`CachedRawResponse`; any other goes to the wrapped client's own raw resource."""

    def __init__(self, completions: _Completions) -> None:
        self._completions = completions

    def _call(self, method: str, kwargs: dict[str, Any]) -> Any:
        completions = self._completions
        options = completions._options(kwargs)
        if options is None or _streams(kwargs):
            raw = completions._wrapped.with_raw_response
            response = getattr(raw, method)(**kwargs)
            due = method == "create" and completions._owner.learner is not None
            if due and _hear_raw(completions._owner, kwargs, response):
                completions._owner._file_late()
            return response
        return CachedRawResponse(*completions._run(kwargs, options, method))

    def create(self, **kwargs: Any) -> Any:
        return self._call("create", kwargs)

    def parse(self, **kwargs: Any) -> Any:
        return self._call("parse", kwargs)


class _Chat(_Delegating):
    @cached_property
    def completions(self) -> _Completions:
        return _Completions(self._owner, self._wrapped.completions)


class _Responses(_ResponsesBase):
    """``responses.create`` / ``responses.parse`` with an optional ``cache=CacheOptions(...)``."""

    def create(self, **kwargs: Any) -> Any:
        """``responses.create``; a hit is a real ``Response`` (with ``stream=True``, replayed
        as the events a server streams)."""
        options = self._options(kwargs, "create")
        if options is None:
            return self._wrapped.create(**kwargs)
        if _streams(kwargs):
            shape = self._shape(kwargs)
            create = self._wrapped.create
            return _stream(self._owner, create, kwargs, options, shape, response_events)
        return self._run(kwargs, options, "create")[0]

    def create_with_info(self, **kwargs: Any) -> tuple[Any, CallInfo]:
        """Like ``create``, and also report how the answer was made."""
        options = self._options_with_info(kwargs, "create")
        return self._run(kwargs, options, "create")

    def parse(self, **kwargs: Any) -> Any:
        """``responses.parse``; a hit is a ``ParsedResponse`` of the ``text_format`` type."""
        options = self._options(kwargs, "parse")
        if options is None:
            return self._wrapped.parse(**kwargs)
        return self._run(kwargs, options, "parse")[0]

    def parse_with_info(self, **kwargs: Any) -> tuple[Any, CallInfo]:
        options = self._options_with_info(kwargs, "parse")
        return self._run(kwargs, options, "parse")

    def _run(
        self, kwargs: dict[str, Any], options: CacheOptions, method: str
    ) -> tuple[Any, CallInfo]:
        shape = self._shape(kwargs)
        send: Callable[..., Any] = getattr(self._wrapped, method)
        if method == "parse" and shape.parses_locally:
            create = self._wrapped.create

            def send(**request: Any) -> Any:
                return shape.parsed_answer(create(**shape.create_request(request)))

        return _run(self._owner, send, kwargs, options, shape)


class _LegacyCompletions(_LegacyBase):
    """``completions.create`` with an optional ``cache=CacheOptions(...)``."""

    def create(self, **kwargs: Any) -> Any:
        """``completions.create``; a hit is a real ``Completion`` (with ``stream=True``,
        replayed as ``Completion`` chunks)."""
        options = self._options(kwargs)
        if options is None:
            return self._wrapped.create(**kwargs)
        create = self._wrapped.create
        if _streams(kwargs):
            return _stream(self._owner, create, kwargs, options, COMPLETIONS, self._replay(kwargs))
        return _run(self._owner, create, kwargs, options, COMPLETIONS)[0]

    def create_with_info(self, **kwargs: Any) -> tuple[Any, CallInfo]:
        """Like ``create``, and also report how the answer was made."""
        options = self._options_with_info(kwargs)
        return _run(self._owner, self._wrapped.create, kwargs, options, COMPLETIONS)


class CachedLLM(_Base):
    """``CachedLLM(OpenAI())``: the same calls and return types, answered from a semantic cache
    whenever a call carries ``cache=CacheOptions(...)``.

    ``cache`` is a :class:`SemanticCache`, a directory, a ``postgresql://`` DSN or a backend
    (default: ``$LLMCACHE_DIR`` or ``./.llmcache``). ``config`` is a :class:`CacheConfig` or
    the path of a file :meth:`CacheConfig.from_file` reads (``python -m llmcache tune``
    writes one). ``recorder`` (a path or :class:`Recorder`) appends every cached call to a
    JSONL dataset. A call without ``cache=`` is filed by ``templates`` (declared prompt
    templates) when they recognise it, else, with ``learn_templates=True`` (or a
    :class:`~llmcache.templates.TemplateLearner` to share), by a template learned from the
    traffic once it is learned with confidence; until then it passes through, counted.
    """

    @cached_property
    def chat(self) -> _Chat:
        return _Chat(self, self._client.chat)

    @cached_property
    def responses(self) -> _Responses:
        return _Responses(self, self._client.responses)

    @cached_property
    def completions(self) -> _LegacyCompletions:
        return _LegacyCompletions(self, self._client.completions)


# -- async --------------------------------------------------------------------------------------


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


class _AsyncCompletions(_CompletionsBase):
    async def create(self, **kwargs: Any) -> Any:
        options = self._options(kwargs)
        if options is None:
            completion = await self._wrapped.create(**kwargs)
            await self._owner._hear_async(kwargs, completion)
            return completion
        if _streams(kwargs):
            create = self._wrapped.create
            replay = self._replay(kwargs)
            return await _stream_async(self._owner, create, kwargs, options, CHAT, replay)
        completion, _ = await self._run(kwargs, options, "create")
        return completion

    async def create_with_info(self, **kwargs: Any) -> tuple[ChatCompletion, CallInfo]:
        options = self._options_with_info(kwargs, "create")
        completion, info = await self._run(kwargs, options, "create")
        return completion, info

    async def parse(self, **kwargs: Any) -> Any:
        options = self._options(kwargs)
        if options is None:
            return await self._wrapped.parse(**kwargs)
        completion, _ = await self._run(kwargs, options, "parse")
        return completion

    async def parse_with_info(self, **kwargs: Any) -> tuple[Any, CallInfo]:
        options = self._options_with_info(kwargs, "parse")
        return await self._run(kwargs, options, "parse")

    @cached_property
    def with_raw_response(self) -> _AsyncRawCompletions:
        """The raw-response surface, cached (:class:`CachedRawResponse`)."""
        return _AsyncRawCompletions(self)

    async def _run(
        self, kwargs: dict[str, Any], options: CacheOptions, method: str
    ) -> tuple[Any, CallInfo]:
        shape = self._shape(kwargs, method)
        send: Callable[..., Any] = self._wrapped.create
        if isinstance(shape, ParsedChatShape):
            create, parsed = send, shape

            async def send(**request: Any) -> Any:
                return parsed.parsed_answer(await create(**parsed.create_request(request)))

        completion, info = await _run_async(self._owner, send, kwargs, options, shape)
        if method == "create":
            await self._owner._hear_async(
                kwargs, completion, fresh=info.outcome in ("miss", "collect")
            )
        return completion, info


class _AsyncRawCompletions:
    """``chat.completions.with_raw_response`` of the async client (see
    :class:`_RawCompletions`)."""

    def __init__(self, completions: _AsyncCompletions) -> None:
        self._completions = completions

    async def _call(self, method: str, kwargs: dict[str, Any]) -> Any:
        completions = self._completions
        options = completions._options(kwargs)
        if options is None or _streams(kwargs):
            raw = completions._wrapped.with_raw_response
            response = await getattr(raw, method)(**kwargs)
            due = method == "create" and completions._owner.learner is not None
            if due and _hear_raw(completions._owner, kwargs, response):
                await asyncio.to_thread(completions._owner._file_late)
            return response
        return CachedRawResponse(*await completions._run(kwargs, options, method))

    async def create(self, **kwargs: Any) -> Any:
        return await self._call("create", kwargs)

    async def parse(self, **kwargs: Any) -> Any:
        return await self._call("parse", kwargs)


class _AsyncChat(_Delegating):
    @cached_property
    def completions(self) -> _AsyncCompletions:
        return _AsyncCompletions(self._owner, self._wrapped.completions)


class _AsyncResponses(_ResponsesBase):
    async def create(self, **kwargs: Any) -> Any:
        options = self._options(kwargs, "create")
        if options is None:
            return await self._wrapped.create(**kwargs)
        if _streams(kwargs):
            shape = self._shape(kwargs)
            create = self._wrapped.create
            return await _stream_async(self._owner, create, kwargs, options, shape, response_events)
        response, _ = await self._run(kwargs, options, "create")
        return response

    async def create_with_info(self, **kwargs: Any) -> tuple[Any, CallInfo]:
        options = self._options_with_info(kwargs, "create")
        return await self._run(kwargs, options, "create")

    async def parse(self, **kwargs: Any) -> Any:
        options = self._options(kwargs, "parse")
        if options is None:
            return await self._wrapped.parse(**kwargs)
        response, _ = await self._run(kwargs, options, "parse")
        return response

    async def parse_with_info(self, **kwargs: Any) -> tuple[Any, CallInfo]:
        options = self._options_with_info(kwargs, "parse")
        return await self._run(kwargs, options, "parse")

    async def _run(
        self, kwargs: dict[str, Any], options: CacheOptions, method: str
    ) -> tuple[Any, CallInfo]:
        shape = self._shape(kwargs)
        send: Callable[..., Any] = getattr(self._wrapped, method)
        if method == "parse" and shape.parses_locally:
            create = self._wrapped.create

            async def send(**request: Any) -> Any:
                return shape.parsed_answer(await create(**shape.create_request(request)))

        return await _run_async(self._owner, send, kwargs, options, shape)


class _AsyncLegacyCompletions(_LegacyBase):
    async def create(self, **kwargs: Any) -> Any:
        options = self._options(kwargs)
        if options is None:
            return await self._wrapped.create(**kwargs)
        create = self._wrapped.create
        if _streams(kwargs):
            replay = self._replay(kwargs)
            return await _stream_async(self._owner, create, kwargs, options, COMPLETIONS, replay)
        completion, _ = await _run_async(self._owner, create, kwargs, options, COMPLETIONS)
        return completion

    async def create_with_info(self, **kwargs: Any) -> tuple[Any, CallInfo]:
        options = self._options_with_info(kwargs)
        return await _run_async(self._owner, self._wrapped.create, kwargs, options, COMPLETIONS)


class AsyncCachedLLM(_Base):
    """The async twin of :class:`CachedLLM`, for ``AsyncOpenAI()``; same core, same tables."""

    @cached_property
    def chat(self) -> _AsyncChat:
        return _AsyncChat(self, self._client.chat)

    @cached_property
    def responses(self) -> _AsyncResponses:
        return _AsyncResponses(self, self._client.responses)

    @cached_property
    def completions(self) -> _AsyncLegacyCompletions:
        return _AsyncLegacyCompletions(self, self._client.completions)
