"""What the proxy is started with: its keys, its upstream, its cache and its limits."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from .. import CacheConfig
from ..errors import ConfigurationError

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_PORT",
    "ProxyKey",
    "ProxySettings",
    "describe",
    "parse_keys",
]

DEFAULT_PORT = 8400
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
# A namespace becomes a prefix of its tables' category ("<namespace>/<category>"): without a
# slash of its own, the prefix cannot be read two ways, so two namespaces never share a table.
_NAMESPACE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_KEY = re.compile(r"^[\x21-\x7e]{8,}$")


def valid_namespace(value: str) -> str:
    """``value`` if it can name a namespace (letters, digits, ``_ . -``; no slash)."""
    if not _NAMESPACE.match(value):
        raise ValueError(
            f"namespace {value!r}: use 1-64 letters, digits, '_', '.' or '-' (no slash)"
        )
    return value


class ProxyKey(BaseModel):
    """A key clients of the proxy authenticate with (``Authorization: Bearer <key>``), and
    what it may reach.

    A key bound to a ``namespace`` reaches only that namespace's tables (the category of each
    table it fills is prefixed ``<namespace>/``); a key bound to an ``agent`` only that agent's.
    A request naming another namespace or agent than its key's is refused (403), so a tenant
    is never served, nor files answers under, another's tables. A key bound to neither is the
    operator's: it may name any namespace and agent, and read ``/metrics``.

    The key itself is a :class:`~pydantic.SecretStr`: it never shows in a repr, a log line or
    a dump.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: SecretStr
    namespace: str | None = None
    agent: str | None = None

    @field_validator("key")
    @classmethod
    def _printable(cls, value: SecretStr) -> SecretStr:
        if not _KEY.match(value.get_secret_value()) or ":" in value.get_secret_value():
            raise ValueError("a proxy key is at least 8 printable characters, no space, no ':'")
        return value

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str | None) -> str | None:
        return None if value is None else valid_namespace(value)

    @field_validator("agent")
    @classmethod
    def _agent(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("an agent a key is bound to cannot be blank")
        return value

    @property
    def bound(self) -> bool:
        """Whether the key is a tenant's (bound to a namespace or an agent)."""
        return self.namespace is not None or self.agent is not None

    @classmethod
    def parse(cls, text: str) -> ProxyKey:
        """``KEY``, ``KEY:NAMESPACE`` or ``KEY:NAMESPACE:AGENT`` (``KEY::AGENT``: an agent in
        no namespace). The agent is everything after the second colon."""
        key, _, rest = text.strip().partition(":")
        namespace, _, agent = rest.partition(":")
        return cls(key=SecretStr(key), namespace=namespace or None, agent=agent or None)


def parse_keys(text: str) -> list[ProxyKey]:
    """Keys written one a line (a keys file) or separated by commas (``LLMCACHE_PROXY_KEYS``);
    blank lines and lines starting with ``#`` are skipped."""
    keys: list[ProxyKey] = []
    for line in text.splitlines():
        if line.strip().startswith("#"):
            continue
        keys.extend(ProxyKey.parse(item) for item in line.split(",") if item.strip())
    return keys


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ProxySettings(BaseModel):
    """How ``python -m llmcache proxy`` (or :func:`~llmcache.proxy.create_app`) serves.

    ``upstream`` is an :func:`llmcache.llm.open_llm` spec: ``local``, ``openai``, ``url`` or
    the base URL of any OpenAI-compatible server (``None``: follow ``LLMCACHE_LLM`` and
    friends). Its key comes from the environment the runtime reads (``OPENAI_API_KEY``,
    ``LLMCACHE_API_KEY``), never from here. ``cache`` is a directory or a ``postgresql://``
    DSN (``None``: ``$LLMCACHE_DIR`` or ``./.llmcache``). ``keys`` authenticate clients;
    ``no_auth`` serves without any, and only on a loopback address. ``max_body_bytes`` bounds
    a request body (413 past it). ``upstream_timeout`` and ``upstream_retries`` are the openai
    client's own. ``worker_threads`` bounds how many cached calls run at once (each runs the
    synchronous cache core in a thread, and holds it while its miss waits for the upstream).
    ``templates`` names a directory of prompt templates to recognise in requests that carry no
    cache options, where the library offers recognition; ``learn_templates`` learns the
    templates of such requests from the traffic instead (declared ones win), and
    ``learned_templates`` keeps what it learned in that file between runs (it implies
    ``learn_templates``). ``config`` is
    the cache's own configuration (threshold, wrong-hit budget, bounds ...). ``cors_origins``
    lets web pages of those origins call the proxy from a browser (and read its
    ``X-LLMCache`` headers); none by default.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    upstream: str | None = None
    cache: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    keys: tuple[ProxyKey, ...] = ()
    no_auth: bool = False
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, ge=1024)
    upstream_timeout: float = Field(default=600.0, gt=0)
    upstream_retries: int = Field(default=2, ge=0)
    worker_threads: int = Field(default=64, ge=1)
    templates: Path | None = None
    learn_templates: bool = False
    learned_templates: Path | None = None
    config: CacheConfig = Field(default_factory=CacheConfig)
    cors_origins: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _authenticated(self) -> ProxySettings:
        if self.no_auth and self.keys:
            raise ValueError("give keys or no_auth, not both")
        if not self.keys and not self.no_auth:
            raise ValueError(
                "the proxy needs at least one key (--key, --keys-file or LLMCACHE_PROXY_KEYS); "
                "--no-auth serves without keys, on a loopback address only"
            )
        if self.no_auth and not _loopback(self.host):
            raise ValueError(f"--no-auth is refused on {self.host}: only on a loopback address")
        secrets = [k.key.get_secret_value() for k in self.keys]
        if len(set(secrets)) != len(secrets):
            raise ValueError("a key is given twice")
        return self

    @classmethod
    def build(cls, **fields: object) -> ProxySettings:
        """Like the constructor, raising :class:`~llmcache.errors.ConfigurationError` with
        pydantic's messages instead of a ``ValidationError``."""
        try:
            return cls.model_validate(fields)
        except ValidationError as exc:
            raise ConfigurationError(describe(exc)) from None


def describe(exc: ValidationError) -> str:
    """pydantic's errors as one line (a key's text never shows: it is a SecretStr)."""
    return "; ".join(_message(error) for error in exc.errors())


def _message(error: ErrorDetails) -> str:
    """One of pydantic's errors as a sentence: where, then what (without its "Value error, ")."""
    where = ".".join(str(part) for part in error.get("loc", ()))
    text = str(error.get("msg", "")).removeprefix("Value error, ")
    return f"{where}: {text}" if where else text
