"""End a schema-constrained answer where its JSON ends (a client-side fix for llama.cpp).

llama.cpp turns a request's JSON schema into a grammar whose objects may be followed by
whitespace (``"}" space``, with ``space`` up to two newlines and twenty blanks). A small model
that has closed the object rarely picks end-of-generation next: it spends the rest of its
``max_tokens`` on that whitespace, the answer ends with ``finish_reason="length"``, and the time
goes on tokens nobody reads (``docs/local-llm.md``, *End the answer where its JSON ends*).

The grammar forbids end-of-generation until the JSON value is complete, so a positive bias on the
model's end token changes nothing inside the answer and ends it as soon as the grammar allows.
That is only true when the value cannot be complete early: an object or an array ends at its
closing bracket, whereas a number (``1`` of ``10``) could be cut short, so the bias is only added
for schemas whose every alternative is an object or an array.

The bias is moderate on purpose. llama.cpp samples a token first and applies the grammar to the
whole vocabulary only when that token breaks it; a bias so large that the end token is the
first choice at every step sends every step down that slow path, so a very large bias costs more
per generated token than it saves in tokens, while a moderate one still outranks the whitespace
once the object is closed. Both were measured on the town's prompts: ``docs/local-llm.md`` (the
town-mix rows of *Measured figures*, ``benchmarks/bench_local_llm.py --levers``).

:class:`JSONEndTransport` adds the bias to such requests on their way to the server, after the
cache has keyed them, so it neither splits cache tables nor reaches a hosted provider. The end
token is looked up once per model from the server (``/props`` and ``/tokenize``).
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import httpx2 as http
else:  # openai 3 talks through httpx2; earlier releases through httpx (the same API)
    try:
        import httpx2 as http
    except ImportError:  # pragma: no cover - depends on the installed openai
        import httpx as http

__all__ = ["END_BIAS", "AsyncJSONEndTransport", "JSONEndTransport", "ends_at_bracket"]

_log = logging.getLogger(__name__)

END_BIAS: Final = 10.0
"""Added to the end token's logit: enough to end the answer once its JSON is closed, small enough
not to make the end token every step's first choice (which the grammar then has to refuse)."""

_PATHS: Final = ("/chat/completions", "/completions")


def ends_at_bracket(schema: Any) -> bool:
    """True when every value the schema allows is an object or an array.

    >>> ends_at_bracket({"type": "object", "properties": {"score": {"type": "integer"}}})
    True
    >>> ends_at_bracket({"anyOf": [{"type": "array"}, {"type": "object"}]})
    True
    >>> ends_at_bracket({"type": "integer"})
    False
    """
    if not isinstance(schema, Mapping):
        return False
    alternatives = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(alternatives, list) and alternatives:
        return all(ends_at_bracket(alt) for alt in alternatives)
    kind = schema.get("type")
    if kind is None:
        return "properties" in schema or "items" in schema or "prefixItems" in schema
    kinds = kind if isinstance(kind, list) else [kind]
    return bool(kinds) and all(k in ("object", "array") for k in kinds)


def _constrained_schema(body: Mapping[str, Any]) -> Any:
    """The schema a request constrains its answer to, or None when it is unconstrained."""
    fmt = body.get("response_format")
    if isinstance(fmt, Mapping):
        if fmt.get("type") == "json_object":
            return fmt.get("schema") or {"type": "object"}
        if fmt.get("type") == "json_schema":
            spec = fmt.get("json_schema")
            return spec.get("schema") if isinstance(spec, Mapping) else None
    return body.get("json_schema")


class _EndTokens:
    """The end-of-generation token of each model the server serves, asked for once."""

    def __init__(self, root_url: str, timeout: float = 600.0) -> None:
        self._root = root_url.rstrip("/")
        self._timeout = timeout
        self._ids: dict[str, int | None] = {}
        self._lock = threading.Lock()

    def get(self, model: str) -> int | None:
        with self._lock:
            if model not in self._ids:
                self._ids[model] = self._ask(model)
            return self._ids[model]

    def _ask(self, model: str) -> int | None:
        # Failure here only loses the optimisation; the request itself goes out unchanged.
        try:
            props = self._call(f"/props?model={urllib.parse.quote(model)}", None)
            token = props.get("eos_token")
            if not isinstance(token, str) or not token:
                return None
            pieces = self._call(
                "/tokenize", {"model": model, "content": token, "parse_special": True}
            ).get("tokens")
            if isinstance(pieces, list) and len(pieces) == 1:
                first = pieces[0]
                token_id = first.get("id") if isinstance(first, Mapping) else first
                return token_id if isinstance(token_id, int) else None
        except (OSError, ValueError) as exc:
            _log.warning("no end token for %s (%s): answers end where the model ends", model, exc)
        return None

    def _call(self, path: str, body: Mapping[str, Any] | None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self._root + path, data=data, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=self._timeout) as response:
            answer = json.loads(response.read())
        return answer if isinstance(answer, dict) else {}


def _with_end_bias(request: http.Request, tokens: _EndTokens, value: float) -> http.Request:
    if request.method != "POST" or not request.url.path.endswith(_PATHS):
        return request
    try:
        body = json.loads(request.content)
    except ValueError:
        return request
    if not isinstance(body, dict) or not ends_at_bracket(_constrained_schema(body)):
        return request
    model = body.get("model")
    token = tokens.get(model) if isinstance(model, str) else None
    if token is None:
        return request
    bias = body.get("logit_bias")
    if bias is None:
        bias = {}
    if not isinstance(bias, dict) or str(token) in bias:
        return request  # the caller set its own bias (or a list form): leave it alone
    body["logit_bias"] = {**bias, str(token): value}
    headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"content-length"]
    return http.Request(
        request.method, request.url, headers=headers, content=json.dumps(body).encode()
    )


class JSONEndTransport(http.BaseTransport):
    """An HTTP transport for a local llama.cpp server that ends JSON answers at their end."""

    def __init__(
        self, root_url: str, inner: http.BaseTransport | None = None, bias: float = END_BIAS
    ) -> None:
        self._tokens = _EndTokens(root_url)
        self._inner = inner or http.HTTPTransport()
        self._bias = bias

    def handle_request(self, request: http.Request) -> http.Response:
        return self._inner.handle_request(_with_end_bias(request, self._tokens, self._bias))

    def close(self) -> None:
        self._inner.close()


class AsyncJSONEndTransport(http.AsyncBaseTransport):
    """The async twin of :class:`JSONEndTransport` (its token lookup blocks, once a model)."""

    def __init__(
        self, root_url: str, inner: http.AsyncBaseTransport | None = None, bias: float = END_BIAS
    ) -> None:
        self._tokens = _EndTokens(root_url)
        self._inner = inner or http.AsyncHTTPTransport()
        self._bias = bias

    async def handle_async_request(self, request: http.Request) -> http.Response:
        return await self._inner.handle_async_request(
            _with_end_bias(request, self._tokens, self._bias)
        )

    async def aclose(self) -> None:
        await self._inner.aclose()
