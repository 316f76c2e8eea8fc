"""The code site a call without cache options came from, for the template learner.

Two templates that a chain calls one after the other often share their values: an agent's
chain asks "What is the observed entity in the following observation? {observation}" and then
"What is the {entity} doing in the following observation? {observation}", about the same
observation. Read as text alone, the shared observation looks like fixed text and the two
questions like slot values, and the learner joins them into one template (on LangChain's
generative agents and Qwen2.5-Coder-1.5B's answers, one that never settled, so neither was
filed: ``benchmarks/bench_frameworks.py``; in ``tests/test_site.py``, one that files both).
The code that built a prompt tells them apart where the text cannot: so prompts are learned
per code site, and two sites' prompts never make one template.

A call's site is read from the stack: the innermost frame outside the packages that only carry
a call (llmcache, the openai client, LangChain's chains and models, the event loop, threads).
For LangChain's generative agents that is the framework function that built the prompt; for
code that calls ``CachedLLM`` directly, the line that called it. Where every call goes through
one helper of the user's (or a thread pool whose stack holds no frame of theirs), all calls
read as one site, and templates are told apart by their text alone, as before; so are the
proxy's requests, which carry no stack (it names them all one site, "proxy").
:func:`code_site` names the site instead: around such a helper's callers, or when recorded
calls are replayed with the sites they were recorded with.

The site separates learning only. A learned template files every prompt that fits it, from any
site: filing asks for an exact fit of its fixed text, which a second template's prompts do not
have.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar

__all__ = ["TEXT_ALONE", "carried_by", "code_site", "current_site", "names_code", "text_alone"]

#: The one site of calls learned by their text alone (:func:`text_alone`: the proxy's requests,
#: which carry no stack): it stands for no code. (A replay of calls recorded through the proxy
#: names them so too: their recorded site.)
TEXT_ALONE = "proxy"

# Packages that carry a call to the model without building its prompt: a frame of theirs is
# never the site. (``langchain`` matches ``langchain.chains``, never ``langchain_experimental``:
# prefixes match whole package names.)
_CARRIERS = (
    "llmcache",
    "openai",
    "httpx",
    "httpcore",
    "anyio",
    "asyncio",
    "concurrent",
    "threading",
    "contextlib",
    "contextvars",
    "functools",
    "tenacity",
    "langchain",
    "langchain_core",
    "langchain_classic",
    "langchain_openai",
    "langchain_community",
    "starlette",
    "uvicorn",
)

_NAMED: ContextVar[str | None] = ContextVar("llmcache_code_site", default=None)
# Objects whose methods carry the call being made (``carried_by``): a frame whose ``self`` is
# one of them is never the site, whatever module defines it (a user's subclass of the cache).
_CARRYING: ContextVar[tuple[object, ...]] = ContextVar("llmcache_site_carriers", default=())


@contextmanager
def code_site(name: str) -> Iterator[None]:
    """Learn the calls made inside as one code site's (see ``llmcache/_site.py``): prompts of
    two sites never make one learned template. By default a call's site is read from the
    stack; name it where every call goes through one helper, or when replaying recorded
    calls with the sites they were recorded with. Nested, the innermost name holds."""
    token = _NAMED.set(name)
    try:
        yield
    finally:
        _NAMED.reset(token)


def text_alone() -> AbstractContextManager[None]:
    """Learn the calls made inside by their text alone, as one site that stands for no code
    (what the proxy does with every request: it carries no stack). Two templates alike but
    for a word or two are then never made one (``TemplateLearner`` widens a learned template
    to a new slot only at the code that made it)."""
    return code_site(TEXT_ALONE)


@contextmanager
def carried_by(carrier: object) -> Iterator[None]:
    """Inside, a frame of a method of ``carrier`` (a cache, a client; a subclass of theirs
    defined anywhere) is never a call's site."""
    token = _CARRYING.set((*_CARRYING.get(), carrier))
    try:
        yield
    finally:
        _CARRYING.reset(token)


def current_site() -> str | None:
    """The site of the call being made: the name :func:`code_site` gave it, else
    ``module:function:line`` of the innermost frame outside the packages that carry calls,
    else ``None`` (no such frame: one site for all)."""
    named = _NAMED.get()
    if named is not None:
        return named
    carriers = _CARRYING.get()
    frame = sys._getframe(1)
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        if not _carries(module) and not (
            carriers and any(frame.f_locals.get("self") is c for c in carriers)
        ):
            code = frame.f_code
            return f"{module}:{getattr(code, 'co_qualname', code.co_name)}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return None


def names_code(site: str | None) -> bool:
    """Whether ``site`` stands for the code that built a prompt (read from the stack, or named
    by ``code_site``), so that two prompts of it are one template's by construction; not for
    no site, nor for the proxy's one site of every request (:data:`TEXT_ALONE`)."""
    return site is not None and site != TEXT_ALONE


def _carries(module: str) -> bool:
    package = module.partition(".")[0]
    return package in _CARRIERS
