"""End a schema-constrained answer where its JSON ends (a client-side fix for llama.cpp).

llama.cpp turns a request's JSON schema into a grammar whose objects may be followed by
whitespace (``"}" space``, with ``space`` up to two newlines and twenty blanks). A small model
that has closed the object rarely picks end-of-generation next: it spends the rest of its
``max_tokens`` on that whitespace, the answer ends with ``finish_reason="length"``, and the time
goes on tokens nobody reads (an importance rating of eight real tokens ran to its cap of 25).

The grammar forbids end-of-generation until the JSON value is complete, so a positive bias on the
model's end token changes nothing inside the answer and ends it as soon as the grammar allows.
That is only true when the value cannot be complete early: an object or an array ends at its
closing bracket, whereas a number (``1`` of ``10``) could be cut short, so the bias is only added
for schemas whose every alternative is an object or an array.

The bias is moderate on purpose. llama.cpp samples a token first and applies the grammar to the
whole vocabulary only when that token breaks it; a bias so large that the end token is the
first choice at every step sends every step down that slow path (measured: a bias of 100 cost
more per generated token than it saved in tokens), while a moderate one still outranks the
whitespace once the object is closed (``benchmarks/bench_local_llm.py --levers``).

The same grammar lets the model lay its JSON out over lines and indent it, and small models do:
an initial plan of 446 tokens had one newline-and-indent token per line, a list of insights put
every evidence number on a line of its own. Those tokens cost as much to generate as words. So
a constrained request also gets :data:`WHITESPACE_BIAS` on the model's tokens made only of
newlines, tabs or runs of spaces: the answer comes out compact (``{"a": 1, "b": [2, 3]}``),
which the grammar allows as well. A single space is left alone -- the tokenizer may need it
before a digit (SmolLM2 writes "at 5" as ``at`` ``" "`` ``5``) -- and a caller's own bias for a
token wins.

:class:`JSONEndTransport` adds the biases to such requests on their way to the server, after
the cache has keyed them, so they neither split cache tables nor reach a hosted provider. The
tokens are looked up once per model from the server (``/props`` and ``/tokenize``).
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import httpx2 as http
else:  # openai 3 talks through httpx2; earlier releases through httpx (the same API)
    try:
        import httpx2 as http
    except ImportError:  # pragma: no cover - depends on the installed openai
        import httpx as http

__all__ = [
    "END_BIAS",
    "WHITESPACE_BIAS",
    "AsyncJSONEndTransport",
    "JSONEndTransport",
    "ends_at_bracket",
]

_log = logging.getLogger(__name__)

END_BIAS: Final = 10.0
"""Added to the end token's logit: enough to end the answer once its JSON is closed, small enough
not to make the end token every step's first choice (which the grammar then has to refuse)."""

WHITESPACE_BIAS: Final = -100.0
"""Added to the logits of tokens made only of layout whitespace in a constrained answer: never
chosen, so the JSON comes out on one line. The grammar never requires such a token between
JSON values, so no answer needs one."""

_PATHS: Final = ("/chat/completions", "/completions")

# Layout whitespace a tokenizer may hold as one token: newlines with indents, tabs, runs of two
# or more spaces. Each candidate that tokenizes to a single token is biased.
_WHITESPACE: Final = tuple(
    sorted(
        {
            *(
                lead + pad * n
                for lead in ("\n", "\n\n", "\r\n")
                for pad in (" ", "\t")
                for n in range(25)
            ),
            *(" " * n for n in range(2, 33)),
            *("\t" * n for n in range(1, 9)),
            *(" " * n + "\n" for n in range(1, 5)),
        }
    )
)


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


@dataclass(frozen=True)
class _Tokens:
    end: int | None = None
    whitespace: tuple[int, ...] = ()


class _ModelTokens:
    """Each served model's end-of-generation token and layout-whitespace tokens, asked once."""

    def __init__(self, root_url: str, timeout: float = 600.0) -> None:
        self._root = root_url.rstrip("/")
        self._timeout = timeout
        self._ids: dict[str, _Tokens] = {}
        self._lock = threading.Lock()

    def get(self, model: str) -> _Tokens:
        with self._lock:
            if model not in self._ids:
                self._ids[model] = _Tokens(self._end(model), self._whitespace(model))
            return self._ids[model]

    def _single(self, model: str, text: str, special: bool = False) -> int | None:
        """The id of ``text`` when the model holds it as exactly one token."""
        pieces = self._call(
            "/tokenize", {"model": model, "content": text, "parse_special": special}
        ).get("tokens")
        if isinstance(pieces, list) and len(pieces) == 1:
            first = pieces[0]
            token_id = first.get("id") if isinstance(first, Mapping) else first
            return token_id if isinstance(token_id, int) else None
        return None

    def _end(self, model: str) -> int | None:
        # Failure here only loses the optimisation; the request itself goes out unchanged.
        try:
            props = self._call(f"/props?model={urllib.parse.quote(model)}", None)
            token = props.get("eos_token")
            if not isinstance(token, str) or not token:
                return None
            return self._single(model, token, special=True)
        except (OSError, ValueError) as exc:
            _log.warning("no end token for %s (%s): answers end where the model ends", model, exc)
        return None

    def _whitespace(self, model: str) -> tuple[int, ...]:
        try:
            found = {self._single(model, text) for text in _WHITESPACE}
        except (OSError, ValueError) as exc:
            _log.warning("no whitespace tokens for %s (%s): JSON keeps its layout", model, exc)
            return ()
        return tuple(sorted(t for t in found if t is not None))

    def _call(self, path: str, body: Mapping[str, Any] | None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self._root + path, data=data, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=self._timeout) as response:
            answer = json.loads(response.read())
        return answer if isinstance(answer, dict) else {}


def _with_biases(
    request: http.Request, tokens: _ModelTokens, end: float, whitespace: float | None
) -> http.Request:
    if request.method != "POST" or not request.url.path.endswith(_PATHS):
        return request
    try:
        body = json.loads(request.content)
    except ValueError:
        return request
    if not isinstance(body, dict):
        return request
    schema = _constrained_schema(body)
    model = body.get("model")
    if schema is None or not isinstance(model, str):
        return request
    bias = body.get("logit_bias")
    if bias is None:
        bias = {}
    if not isinstance(bias, dict):
        return request  # a list form of the caller's own: leave it alone
    known = tokens.get(model)
    added: dict[str, float] = {}
    if whitespace is not None:
        added.update((str(t), whitespace) for t in known.whitespace)
    if known.end is not None and ends_at_bracket(schema):
        added[str(known.end)] = end
    added = {t: v for t, v in added.items() if t not in bias}  # the caller's own bias wins
    if not added:
        return request
    body["logit_bias"] = {**bias, **added}
    headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"content-length"]
    return http.Request(
        request.method, request.url, headers=headers, content=json.dumps(body).encode()
    )


class JSONEndTransport(http.BaseTransport):
    """An HTTP transport for a local llama.cpp server that ends JSON answers at their end and
    keeps them compact (``whitespace=None``: leave their layout to the model)."""

    def __init__(
        self,
        root_url: str,
        inner: http.BaseTransport | None = None,
        bias: float = END_BIAS,
        whitespace: float | None = WHITESPACE_BIAS,
    ) -> None:
        self._tokens = _ModelTokens(root_url)
        self._inner = inner or http.HTTPTransport()
        self._bias = bias
        self._whitespace = whitespace

    def handle_request(self, request: http.Request) -> http.Response:
        return self._inner.handle_request(
            _with_biases(request, self._tokens, self._bias, self._whitespace)
        )

    def close(self) -> None:
        self._inner.close()


class AsyncJSONEndTransport(http.AsyncBaseTransport):
    """The async twin of :class:`JSONEndTransport` (its token lookup blocks, once a model)."""

    def __init__(
        self,
        root_url: str,
        inner: http.AsyncBaseTransport | None = None,
        bias: float = END_BIAS,
        whitespace: float | None = WHITESPACE_BIAS,
    ) -> None:
        self._tokens = _ModelTokens(root_url)
        self._inner = inner or http.AsyncHTTPTransport()
        self._bias = bias
        self._whitespace = whitespace

    async def handle_async_request(self, request: http.Request) -> http.Response:
        return await self._inner.handle_async_request(
            _with_biases(request, self._tokens, self._bias, self._whitespace)
        )

    async def aclose(self) -> None:
        await self._inner.aclose()
