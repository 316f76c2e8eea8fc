"""An OpenAI-compatible caching proxy: llmcache's tables for any client that speaks HTTP.

``python -m llmcache proxy --upstream openai --key $PROXY_KEY`` (extra ``[proxy]``) serves
``POST /v1/chat/completions`` (also ``stream: true``), ``POST /v1/responses``,
``POST /v1/completions`` (the legacy API, cached like chat), ``GET /v1/models``
(the upstream's), ``GET /health`` and ``GET /metrics`` (Prometheus's text format). A client
changes nothing but its base URL and key; a request says how it is cached in a ``cache``
object of its body (the SDK's ``extra_body``) or in ``X-LLMCache-*`` headers::

    client = OpenAI(base_url="http://127.0.0.1:8400/v1", api_key=PROXY_KEY)   # doctest: +SKIP
    client.chat.completions.create(model="gpt-4o-mini", messages=msgs,
        extra_body={"cache": {"category": "importance", "agent": "Liam Oliver",
                              "keywords": ["Tree in Victoria Park is Idle"]}})  # doctest: +SKIP

The answer's body is the server's own shape, hit or miss; how it was made comes back in
headers (``X-LLMCache``: hit, miss, collect, bypass or pass; ``X-LLMCache-Similarity``;
``X-LLMCache-Table``). A request without options passes straight through. Clients
authenticate with the proxy's own keys (:class:`ProxyKey`, each bindable to a namespace or an
agent); only the proxy holds the upstream's key.

:func:`create_app` builds the ASGI app (Starlette) for any ASGI server; the command serves it
with uvicorn. It is built on the cache's public surface: an ``AsyncCachedLLM`` around an
``openai.AsyncOpenAI`` pointed at the upstream (:func:`llmcache.llm.open_llm`).
"""

from __future__ import annotations

from ._app import create_app
from ._settings import ProxyKey, ProxySettings

__all__ = ["ProxyKey", "ProxySettings", "create_app"]
