"""llmcache as LangChain's cache (extra ``[langchain]``): ``set_llm_cache(LLMCache())``.

>>> from langchain_core.globals import set_llm_cache        # doctest: +SKIP
>>> from llmcache.langchain import LLMCache                   # doctest: +SKIP
>>> set_llm_cache(LLMCache(".llmcache"))                      # doctest: +SKIP

Every LangChain model call (chat or text model) is then filed under the template its prompt
was filled from (declared templates, or the templates learned from the traffic) and its agent,
and answered from that table when a close enough answer is there; see :class:`LLMCache`.
"""

from __future__ import annotations

try:
    from ._langchain import LLMCache, PromptFiler
except ImportError as exc:  # pragma: no cover - without the extra
    if exc.name is None or not exc.name.startswith("langchain_core"):
        raise
    raise ImportError(
        "llmcache.langchain needs langchain-core: pip install 'llmcache[langchain]'",
        name=exc.name,
    ) from exc

__all__ = ["LLMCache", "PromptFiler"]
