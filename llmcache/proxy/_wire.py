"""Cache options on the wire: the body's ``cache`` object, or ``X-LLMCache-*`` headers.

The names follow what LiteLLM's proxy users know (``cache: {"no-cache": true}`` sent through
the SDK's ``extra_body``), plus llmcache's own: the table's ``category`` and ``agent``, the
``keywords`` it is embedded by, the ``mode``, ``embed`` and ``threshold``, and the ``fallback``
answer of a call whose every attempt was invalid. Headers carry the
same fields for clients that cannot add a body field; where both say something, the body wins.

What the flags mean (LiteLLM's documented semantics):

- ``no-cache``: do not serve from the cache; call the upstream, and store its answer
  (llmcache's ``collect`` mode);
- ``no-store``: serve from the cache if it can; do not store a miss's answer
  (``CacheOptions(store=False)``);
- both: the call goes to the upstream and nothing is looked up or stored (``off``, counted).

``ttl`` and ``s-maxage`` are refused with a 400: llmcache bounds an entry's age cache-wide
(``--ttl-seconds``), not per entry, and a per-request value the cache cannot keep must not be
accepted silently.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator

from .. import CacheOptions, EmbedMode, Mode
from ._errors import RequestError
from ._settings import valid_namespace

__all__ = [
    "HEADER_PREFIX",
    "OPTION_HEADERS",
    "Tenant",
    "WireOptions",
    "bind_recognised",
    "cache_options",
]

HEADER_PREFIX = "x-llmcache-"
#: The category of a request whose options name none.
DEFAULT_CATEGORY = "default"


@dataclass(frozen=True)
class Tenant:
    """What an authenticated key is bound to (``None``: free to name it)."""

    namespace: str | None = None
    agent: str | None = None


class WireOptions(BaseModel):
    """The ``cache`` object of a request body (and its ``X-LLMCache-*`` headers)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    category: str | None = Field(default=None, min_length=1)
    agent: str | None = None
    keywords: list[str] | None = None
    mode: Mode | None = None
    embed: EmbedMode | None = None
    threshold: float | None = Field(default=None, ge=-1.0, le=1.0)
    namespace: str | None = None
    ttl: float | None = None
    s_maxage: float | None = Field(
        default=None, validation_alias=AliasChoices("s-maxage", "s_maxage")
    )
    no_cache: bool = Field(default=False, validation_alias=AliasChoices("no-cache", "no_cache"))
    no_store: bool = Field(default=False, validation_alias=AliasChoices("no-store", "no_store"))
    # The answer text when every attempt was invalid (see CacheOptions.fallback).
    fallback: str | None = None

    @field_validator("keywords", mode="before")
    @classmethod
    def _listed(cls, value: Any) -> Any:
        # One keyword alone is a keyword, not a string to split into characters.
        return [value] if isinstance(value, str) else value

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str | None) -> str | None:
        return None if value is None else valid_namespace(value)


# The wire name of each field, as headers spell it after the prefix.
_WIRE_NAMES = {
    "category": "category",
    "agent": "agent",
    "keywords": "keywords",
    "mode": "mode",
    "embed": "embed",
    "threshold": "threshold",
    "namespace": "namespace",
    "ttl": "ttl",
    "s-maxage": "s-maxage",
    "no-cache": "no-cache",
    "no-store": "no-store",
    "fallback": "fallback",
}
_VALID = ", ".join(_WIRE_NAMES)
#: Every request header that carries an option (lower-cased, as they arrive).
OPTION_HEADERS = tuple(HEADER_PREFIX + name for name in _WIRE_NAMES)
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _header(name: str) -> str:
    """A field's header, spelt as the documentation spells it (headers arrive lower-cased)."""
    return "X-LLMCache-" + "-".join(part.capitalize() for part in name.split("-"))


def _header_value(name: str, raw: str) -> Any:
    """A header's text as the field's value. Texts are percent-decoded UTF-8 (a header is
    ASCII on the wire); keywords are a JSON array or comma-separated; flags are yes/no."""
    if name == "keywords":
        if raw.lstrip().startswith("["):
            try:
                return json.loads(raw)
            except ValueError:
                raise RequestError(
                    400, f"{_header(name)} is not a JSON array", param=_header(name)
                ) from None
        return [unquote(part.strip()) for part in raw.split(",") if part.strip()]
    if name in ("no-cache", "no-store"):
        text = raw.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise RequestError(400, f"{_header(name)} takes yes or no", param=_header(name))
    return unquote(raw.strip())


def _from_headers(headers: Mapping[str, str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for header, raw in headers.items():
        lowered = header.lower()
        if not lowered.startswith(HEADER_PREFIX):
            continue
        name = lowered[len(HEADER_PREFIX) :]
        if name not in _WIRE_NAMES:
            raise RequestError(
                400,
                f"unknown header {_header(name)}: the X-LLMCache- headers are {_VALID}",
                param=_header(name),
            )
        found[name] = _header_value(name, raw)
    return found


def _refusal(exc: ValidationError) -> RequestError:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error.get("loc", ()))
    if error.get("type") == "extra_forbidden":
        message = f"cache has no option {where!r}; valid options are: {_VALID}"
    else:
        message = f"cache.{where}: {str(error.get('msg', '')).removeprefix('Value error, ')}"
    return RequestError(400, message, param=f"cache.{where}" if where else "cache")


def cache_options(
    body: dict[str, Any], headers: Mapping[str, str], tenant: Tenant
) -> CacheOptions | None:
    """The request's :class:`~llmcache.CacheOptions`, or ``None`` when it asks for none.

    Takes the ``cache`` object out of ``body`` (it never reaches the upstream). A key's
    binding wins: a request that names another namespace or agent than its key's is refused
    with 403, and a namespaced request's tables are that namespace's (``<namespace>/<category>``).
    """
    given = body.pop("cache", None)
    fields = _from_headers(headers)
    if given is None and not fields:
        return None
    if not isinstance(given, (dict, type(None))):
        raise RequestError(400, "cache must be a JSON object", param="cache")
    fields.update(given or {})
    try:
        wire = WireOptions.model_validate(fields)
    except ValidationError as exc:
        raise _refusal(exc) from None
    for name, value in (("ttl", wire.ttl), ("s-maxage", wire.s_maxage)):
        if value is not None:
            raise RequestError(
                400,
                f"cache.{name} is not supported: llmcache bounds how long entries live for the "
                "whole cache (python -m llmcache proxy --ttl-seconds), not per entry",
                param=f"cache.{name}",
                code="unsupported_cache_option",
            )
    namespace = _bound("namespace", wire.namespace, tenant.namespace)
    agent = _bound("agent", wire.agent, tenant.agent)
    category = wire.category or DEFAULT_CATEGORY
    mode, store = wire.mode, not wire.no_store
    if wire.no_cache:
        if mode not in (None, Mode.COLLECT, Mode.OFF):
            raise RequestError(
                400, f"cache.no-cache contradicts mode {mode.value!r}", param="cache.no-cache"
            )
        # Not served from the cache, stored (collect); stored neither: the cache is off.
        mode = Mode.OFF if wire.no_store else (mode or Mode.COLLECT)
    try:
        return CacheOptions(
            category=f"{namespace}/{category}" if namespace else category,
            agent=agent or "",
            keywords=wire.keywords,
            mode=mode,
            store=store,
            # Without keywords the whole prompt is what a request can be found by.
            embed=wire.embed or (EmbedMode.KEYWORD if wire.keywords else EmbedMode.FULL),
            threshold=wire.threshold,
            fallback=wire.fallback,
        )
    except ValidationError as exc:
        raise _refusal(exc) from None


def bind_recognised(options: CacheOptions, tenant: Tenant) -> CacheOptions:
    """A recognised call's options under its key's binding: a namespaced key's tables are its
    namespace's (the template's identity, which keys the table, and its name both prefixed),
    and a key bound to an agent files every call it sends under that agent."""
    update: dict[str, Any] = {}
    if tenant.namespace is not None:
        update["category"] = f"{tenant.namespace}/{options.category}"
        update["template"] = f"{tenant.namespace}/{options.template}"
    if tenant.agent is not None:
        update["agent"] = tenant.agent
    return options.model_copy(update=update) if update else options


def _bound(name: str, asked: str | None, bound: str | None) -> str | None:
    if bound is None:
        return asked
    if asked is not None and asked != bound:
        raise RequestError(
            403,
            f"this key is bound to another {name}: it may not reach {name} {asked!r}",
            type="permission_error",
            param=f"cache.{name}",
            code="permission_denied",
        )
    return bound
