"""The upstream: whichever LLM :func:`llmcache.llm.open_llm` connects to, and what of it may
be said in a log line."""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

from ..llm import LLMConnection, open_llm

__all__ = ["PER_REQUEST", "open_upstream", "safe_location"]

#: The model a URL upstream is opened with when none is configured: the proxy sends each
#: request's own ``model``, so the connection's is only a name in its description.
PER_REQUEST = "(the model each request names)"


def _is_url(spec: str | None) -> bool:
    if spec is not None:
        return spec == "url" or spec.startswith(("http://", "https://"))
    configured = os.environ.get("LLMCACHE_LLM", "").strip().lower()
    return configured == "url" or (not configured and bool(os.environ.get("LLMCACHE_BASE_URL")))


def open_upstream(spec: str | None) -> LLMConnection:
    """``open_llm(spec)``: the local server (started), OpenAI, or any URL. Its key is read
    from the environment by the runtime, as for every other entry point."""
    model = PER_REQUEST if _is_url(spec) and not os.environ.get("LLMCACHE_MODEL") else None
    return open_llm(spec, model=model)


def safe_location(location: str | None) -> str:
    """A cache's location for a log line: a DSN without its password."""
    if location is None:
        return os.environ.get("LLMCACHE_DIR", ".llmcache")
    if "://" not in location:
        return location
    parts = urlsplit(location)
    if parts.password is None:
        return location
    user = parts.username or ""
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))
