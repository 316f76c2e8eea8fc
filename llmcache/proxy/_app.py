"""The ASGI app: authentication, the cached calls, the upstream's errors, health and metrics.

One request, start to finish::

    authenticate (the proxy's own keys)  →  read the body (bounded)  →  take out its cache
    options (body object or X-LLMCache-* headers; the key's binding applied)  →  SDK keyword
    arguments  →  no options: straight to the upstream
                  options: AsyncCachedLLM (create_with_info, or a stream's cache_info)
    →  the SDK's answer written back as the server's JSON or events, the outcome in headers

The cache core is synchronous: ``AsyncCachedLLM`` runs it in a worker thread and hands every
upstream request back to the event loop, so a miss waiting for the upstream holds a thread
but never the loop. The threads come from the app's own pool (``worker_threads``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import inspect
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio
import openai
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from .. import AsyncCachedLLM, CacheOptions, CacheStats, CallInfo, SemanticCache
from ..errors import ConfigurationError, InvalidResponseError, LLMCacheError
from ..llm import LLMConnection
from ..templates import TemplateLearner, text_alone
from ._calls import (
    CHAT,
    COMPLETIONS,
    RESPONSES,
    chat_events,
    dump,
    dump_chat_hit,
    response_events,
    sdk_kwargs,
)
from ._errors import RequestError, error_response
from ._metrics import CONTENT_TYPE, ProxyMetrics
from ._settings import ProxySettings
from ._upstream import open_upstream, safe_location
from ._wire import OPTION_HEADERS, Tenant, bind_recognised, cache_options

__all__ = ["check_settings", "create_app", "template_recognition_available"]

logger = logging.getLogger("llmcache.proxy")

Handler = Callable[[Request], Awaitable[tuple[Response, str]]]
Events = Callable[[Any], AsyncGenerator[bytes, None]]


def template_recognition_available() -> bool:
    """Whether this llmcache recognises prompt templates in requests that name none (a
    ``templates=`` argument of the cached client)."""
    return "templates" in inspect.signature(AsyncCachedLLM.__init__).parameters


def _json(body: bytes, headers: dict[str, str] | None = None) -> Response:
    return Response(body, media_type="application/json", headers=headers)


#: The response headers that say how an answer was made.
OUTCOME_HEADERS = ("x-llmcache", "x-llmcache-similarity", "x-llmcache-table", "x-llmcache-reason")


def _outcome_headers(
    outcome: str, info: CallInfo | None = None, reason: str | None = None
) -> dict[str, str]:
    """How the answer was made, for the client: the body stays the server's own shape."""
    headers = {"x-llmcache": outcome}
    if info is not None:
        if info.similarity is not None:
            headers["x-llmcache-similarity"] = f"{info.similarity.cosine:.4f}"
        if info.partition_key:
            headers["x-llmcache-table"] = info.partition_key
        if info.category:
            # The table's name (a recognised call's template): Latin-1, like every header.
            headers["x-llmcache-category"] = info.category.encode("ascii", "replace").decode()
    if reason:
        # Headers are Latin-1: the reasons are llmcache's own English sentences.
        headers["x-llmcache-reason"] = reason.encode("ascii", "replace").decode()
    return headers


class _Proxy:
    """The app's state and handlers (one per app)."""

    def __init__(
        self,
        settings: ProxySettings,
        upstream: openai.AsyncOpenAI | LLMConnection | None,
        cache: SemanticCache | None,
    ) -> None:
        self.settings = settings
        self._given_upstream = upstream
        self._given_cache = cache
        # Keys are compared by their SHA-256, in constant time, against every key (no early
        # exit): neither a key's length nor which key matched shows in the time taken.
        self._keys = [
            (hashlib.sha256(k.key.get_secret_value().encode()).digest(), k) for k in settings.keys
        ]
        self._client: AsyncCachedLLM | None = None
        self._upstream: openai.AsyncOpenAI | None = None
        self._secret = ""
        self.metrics = ProxyMetrics(self._stats)

    # -- lifetime ----------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        executor = ThreadPoolExecutor(
            max_workers=self.settings.worker_threads, thread_name_prefix="llmcache-proxy"
        )
        asyncio.get_running_loop().set_default_executor(executor)
        # Closed in the reverse order: the cache first (its counters flushed), once the server
        # has answered every request it accepted; then the upstream; the threads last.
        async with contextlib.AsyncExitStack() as stack:
            stack.callback(executor.shutdown, wait=True)
            upstream, where = await self._open_upstream(stack)
            cache = self._given_cache
            if cache is None:
                cache = await asyncio.to_thread(
                    SemanticCache, self.settings.cache, config=self.settings.config
                )
            stack.callback(cache.close)
            self._upstream = upstream
            self._secret = str(getattr(upstream, "api_key", "") or "")
            # Template recognition is the library's: where it offers it, it gets the directory.
            recognise: dict[str, Any] = {}
            if self.settings.templates is not None:
                recognise["templates"] = self.settings.templates
            if self.settings.learned_templates is not None:
                recognise["learn_templates"] = TemplateLearner(path=self.settings.learned_templates)
            elif self.settings.learn_templates:
                recognise["learn_templates"] = True
            self._client = AsyncCachedLLM(upstream, cache=cache, **recognise)
            logger.info(
                "llmcache proxy: upstream %s; cache %s; %s",
                where,
                safe_location(self.settings.cache),
                f"{len(self._keys)} key(s)" if self._keys else "no authentication (loopback)",
            )
            yield
            logger.info("llmcache proxy: stopping")
            self._client = None

    async def _open_upstream(
        self, stack: contextlib.AsyncExitStack
    ) -> tuple[openai.AsyncOpenAI, str]:
        given = self._given_upstream
        if isinstance(given, openai.AsyncOpenAI):
            stack.push_async_callback(given.close)
            return given, str(given.base_url)
        connection = given
        if connection is None:
            connection = await asyncio.to_thread(open_upstream, self.settings.upstream)
        stack.callback(connection.close)
        upstream = connection.async_client().with_options(
            timeout=self.settings.upstream_timeout, max_retries=self.settings.upstream_retries
        )
        stack.push_async_callback(upstream.close)
        return upstream, connection.backend.description

    @property
    def client(self) -> AsyncCachedLLM:
        if self._client is None:
            raise RequestError(503, "the proxy is not serving", type="server_error")
        return self._client

    def _stats(self) -> CacheStats:
        return self.client.cache.stats()

    # -- the request's parts -----------------------------------------------------------------

    def _authenticate(self, request: Request) -> Tenant:
        if self.settings.no_auth:
            return Tenant()
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise RequestError(
                401,
                "You didn't provide an API key. Send the proxy's key as "
                "'Authorization: Bearer <key>'.",
                code="invalid_api_key",
            )
        digest = hashlib.sha256(token.strip().encode()).digest()
        found = None
        for known, key in self._keys:
            if hmac.compare_digest(known, digest):
                found = key
        if found is None:
            # Never echoed, not even in part.
            raise RequestError(401, "Incorrect API key provided.", code="invalid_api_key")
        request.state.operator = not found.bound
        return Tenant(found.namespace, found.agent)

    async def _body(self, request: Request) -> dict[str, Any]:
        limit = self.settings.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None:
            if not declared.isdigit():
                raise RequestError(400, "The Content-Length header is not a number.")
            if int(declared) > limit:
                raise _too_large(limit)
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
        try:
            body = json.loads(b"".join(chunks))
        except ValueError:  # UnicodeDecodeError included
            raise RequestError(
                400,
                "We could not parse the JSON body of your request. The body must be one JSON "
                "object.",
            ) from None
        if not isinstance(body, dict):
            raise RequestError(400, "The request body must be a JSON object.")
        return body

    async def _prepare(
        self, request: Request, endpoint: Any, resource: Any = None
    ) -> tuple[dict[str, Any], CacheOptions | None]:
        tenant = self._authenticate(request)
        body = await self._body(request)
        options = cache_options(body, request.headers, tenant)
        kwargs = sdk_kwargs(body, endpoint)
        if options is None and resource is not None and self.client.learner is not None:
            # Filed here (recognised, or learned from: once), under the key's binding; one
            # passed through is sent on without filing it again.
            found = await asyncio.to_thread(_filed_by_text, resource, kwargs)
            if found is None:
                return {**kwargs, "cache": False}, None
            return kwargs, bind_recognised(found, tenant)
        if options is None and resource is not None and self.client.templates is not None:
            # Recognised here, not by the client's create: the key's binding must apply to
            # recognised calls as it does to named ones. One that is not recognised goes to
            # create without options, which counts it and passes it through.
            found = await asyncio.to_thread(lambda: resource.cache_options_for(**kwargs))
            if found is not None:
                options = bind_recognised(found, tenant)
        return kwargs, options

    # -- endpoints ---------------------------------------------------------------------------

    async def chat(self, request: Request) -> tuple[Response, str]:
        return await self._answer(
            request, self.client.chat.completions, CHAT, chat_events, dump_chat_hit
        )

    async def responses(self, request: Request) -> tuple[Response, str]:
        return await self._answer(request, self.client.responses, RESPONSES, response_events, dump)

    async def completions(self, request: Request) -> tuple[Response, str]:
        # The legacy Completions API, cached like chat (its chunks are written as chat's are).
        return await self._answer(
            request, self.client.completions, COMPLETIONS, chat_events, dump_chat_hit
        )

    async def _answer(
        self,
        request: Request,
        resource: Any,
        endpoint: Any,
        events: Events,
        dump_hit: Callable[[BaseModel], bytes],
    ) -> tuple[Response, str]:
        """One endpoint's request: passed through, bypassed with its reason, or answered by
        the cache (a hit's body written by ``dump_hit``), streamed as ``events``."""
        kwargs, options = await self._prepare(request, endpoint, resource)
        if kwargs.get("stream") is True:
            return await self._stream(resource, kwargs, options, events)
        if options is None:
            return _json(dump(await resource.create(**kwargs)), _outcome_headers("pass")), "pass"
        reason = resource.cache_bypass_reason(**kwargs, cache=options)
        if reason is not None:
            answer = await resource.create(**kwargs)
            return _json(dump(answer), _outcome_headers("bypass", reason=reason)), "bypass"
        answer, info = await resource.create_with_info(**kwargs, cache=options)
        body = dump_hit(answer) if info.outcome == "hit" else dump(answer)
        return _json(body, _outcome_headers(info.outcome, info)), info.outcome

    async def _stream(
        self,
        resource: Any,
        kwargs: dict[str, Any],
        options: CacheOptions | None,
        events: Events,
    ) -> tuple[Response, str]:
        if options is None:
            stream = await resource.create(**kwargs)
            return _events(events(stream), _outcome_headers("pass")), "pass"
        reason = resource.cache_bypass_reason(**kwargs, cache=options)
        stream = await resource.create(**kwargs, cache=options)
        info: CallInfo | None = getattr(stream, "cache_info", None)
        outcome = info.outcome if info is not None else "bypass"
        return _events(events(stream), _outcome_headers(outcome, info, reason)), outcome

    async def models(self, request: Request) -> tuple[Response, str]:
        self._authenticate(request)
        assert self._upstream is not None
        raw = await self._upstream.models.with_raw_response.list()
        media = raw.headers.get("content-type", "application/json")
        return Response(raw.content, status_code=raw.status_code, media_type=media), "pass"

    async def health(self, request: Request) -> tuple[Response, str]:
        # Liveness only, unauthenticated: it says nothing about the upstream or the tables.
        self.client  # noqa: B018 - raises 503 while the proxy is not serving
        return _json(b'{"status":"ok"}'), "pass"

    async def metrics_page(self, request: Request) -> tuple[Response, str]:
        self._authenticate(request)
        if not getattr(request.state, "operator", True):
            # Category names are the tenants' own: only a key bound to nothing reads them all.
            raise RequestError(
                403,
                "the metrics are for the operator's keys (a key bound to no namespace or agent)",
                type="permission_error",
                code="permission_denied",
            )
        page = await asyncio.to_thread(self.metrics.render)
        return Response(page, media_type=CONTENT_TYPE), "pass"

    # -- errors ------------------------------------------------------------------------------

    def failure(self, exc: Exception) -> Response:
        """The error response for what a handler raised; the upstream's key never in it."""
        if isinstance(exc, RequestError):
            return exc.response()
        if isinstance(exc, openai.APIStatusError):
            return self._upstream_status(exc)
        if isinstance(exc, openai.APITimeoutError):
            return error_response(
                504,
                f"The upstream did not answer within {self.settings.upstream_timeout:g} s.",
                type="server_error",
                code="upstream_timeout",
            )
        if isinstance(exc, openai.APIConnectionError):
            return error_response(
                502,
                f"The upstream ({self._upstream_host()}) is down or unreachable: the proxy could "
                "not connect to it.",
                type="server_error",
                code="upstream_unavailable",
            )
        if isinstance(exc, ConfigurationError):
            return error_response(400, str(exc))
        if isinstance(exc, InvalidResponseError):
            return error_response(
                502,
                f"The upstream's answers failed validation {exc.attempts} time(s).",
                type="server_error",
                code="invalid_upstream_answer",
            )
        if isinstance(exc, LLMCacheError):
            logger.warning("the cache failed: %s", type(exc).__name__, exc_info=True)
            return error_response(500, "The cache failed.", type="server_error")
        logger.error("unexpected error", exc_info=exc)
        return error_response(500, "The proxy failed.", type="server_error")

    def _upstream_status(self, exc: openai.APIStatusError) -> Response:
        if exc.status_code == 401:
            # The client's own key was accepted: the upstream refused the operator's. A 401
            # would tell the client its key is wrong, and the upstream's message may quote a
            # part of the operator's key.
            logger.warning("the upstream refused the proxy's credentials (401)")
            return error_response(
                502,
                "The upstream refused the proxy's own credentials; the proxy's operator must "
                "fix them.",
                type="server_error",
                code="upstream_auth_failed",
            )
        body = exc.response.content
        if self._secret and len(self._secret) >= 8:
            body = body.replace(self._secret.encode(), b"[redacted]")
        media = exc.response.headers.get("content-type", "application/json")
        logger.info("the upstream answered %s", exc.status_code)
        if not body:
            return error_response(
                exc.status_code, f"The upstream answered {exc.status_code}.", type="server_error"
            )
        return Response(body, status_code=exc.status_code, media_type=media)

    def _upstream_host(self) -> str:
        url = getattr(self._upstream, "base_url", None)
        host = getattr(url, "host", "") or "?"
        port = getattr(url, "port", None)
        return f"{host}:{port}" if port else str(host)

    def route(self, endpoint: str, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        """``handler`` with its errors answered as OpenAI's, and counted."""

        async def handle(request: Request) -> Response:
            started = time.perf_counter()
            try:
                response, outcome = await handler(request)
            except Exception as exc:
                response, outcome = self.failure(exc), "error"
            self.metrics.observe(
                endpoint, outcome, response.status_code, time.perf_counter() - started
            )
            return response

        return handle


class _EventStream(StreamingResponse):
    """Server-sent events whose source is closed however the response ends: a client that
    goes away may cancel it while it waits to send, where the events' own ``finally`` would
    otherwise run only when the garbage collector finds them."""

    def __init__(self, events: AsyncGenerator[bytes, None], headers: dict[str, str]) -> None:
        super().__init__(events, media_type="text/event-stream", headers=headers)
        self._events = events

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self._events.aclose()


def _events(body: AsyncGenerator[bytes, None], headers: dict[str, str]) -> StreamingResponse:
    return _EventStream(body, headers)


def _filed_by_text(resource: Any, kwargs: dict[str, Any]) -> CacheOptions | None:
    """A request's options, recognised or learned from. A request carries no stack, so every
    request is one code site to the learner: templates are told apart by their text alone
    (``llmcache/_site.py``), whatever frames a server or its instrumentation runs it in."""
    with text_alone():
        found: CacheOptions | None = resource.file_call(**kwargs)
        return found


def _too_large(limit: int) -> RequestError:
    return RequestError(
        413,
        f"The request body is larger than the proxy's limit of {limit} bytes.",
        code="request_too_large",
    )


async def _not_found(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 404
    if status == 405:
        return error_response(
            405, f"Method {request.method} is not allowed on {request.url.path}.", code=None
        )
    return error_response(
        status, f"Invalid URL ({request.method} {request.url.path})", code="unknown_url"
    )


def check_settings(settings: ProxySettings) -> None:
    """Refuse settings this llmcache cannot serve (before anything is opened)."""
    if settings.templates is not None and not template_recognition_available():
        raise ConfigurationError(
            "--templates needs template recognition, which this llmcache does not offer yet "
            "(the cached client takes no templates=): send cache options with each request"
        )
    if settings.templates is not None and not settings.templates.is_dir():
        raise ConfigurationError(f"--templates: no folder of templates at {settings.templates}")


def create_app(
    settings: ProxySettings,
    *,
    upstream: openai.AsyncOpenAI | LLMConnection | None = None,
    cache: SemanticCache | None = None,
) -> Starlette:
    """The proxy as an ASGI app (serve it with uvicorn, or any ASGI server).

    ``upstream`` is an ``openai.AsyncOpenAI`` used as it is (tests give a fake this way), or
    an open :class:`~llmcache.llm.LLMConnection` whose async client the app makes; ``None``
    opens ``settings.upstream`` when the app starts. ``cache`` likewise defaults to
    ``settings.cache``. The app owns what it is given: all of it is closed when it stops.

    Raises:
        ConfigurationError: ``settings.templates`` is set but names no folder (or this
            llmcache cannot recognise templates).
    """
    check_settings(settings)
    proxy = _Proxy(settings, upstream, cache)
    endpoints: list[tuple[str, str, Handler, str]] = [
        ("/chat/completions", "chat.completions", proxy.chat, "POST"),
        ("/responses", "responses", proxy.responses, "POST"),
        ("/completions", "completions", proxy.completions, "POST"),
        ("/models", "models", proxy.models, "GET"),
    ]
    routes = []
    # The OpenAI paths under /v1, and without it for clients whose base URL lacks it.
    for prefix in ("/v1", ""):
        for path, name, handler, method in endpoints:
            routes.append(Route(prefix + path, proxy.route(name, handler), methods=[method]))
    routes.append(Route("/health", proxy.route("health", proxy.health), methods=["GET"]))
    routes.append(Route("/metrics", proxy.route("metrics", proxy.metrics_page), methods=["GET"]))
    middleware = []
    if settings.cors_origins:
        # A browser asks first (OPTIONS) whether a page may send the key, and lets the page
        # read only the response headers it is told it may.
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(settings.cors_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["authorization", "content-type", *OPTION_HEADERS],
                expose_headers=list(OUTCOME_HEADERS),
            )
        )
    return Starlette(
        routes=routes,
        middleware=middleware,
        lifespan=proxy.lifespan,
        exception_handlers={HTTPException: _not_found},
    )
