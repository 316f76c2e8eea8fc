"""llmcache — a semantic cache for the openai client, split by prompt category and agent.

>>> from llmcache import CachedLLM, CacheOptions          # doctest: +SKIP
>>> client = CachedLLM(OpenAI())                          # doctest: +SKIP
>>> client.chat.completions.create(model="gpt-4o-mini", messages=msgs,
...     cache=CacheOptions(category="importance", agent="Liam Oliver",
...                        keywords=["Tree in Victoria Park is Idle"]))  # doctest: +SKIP

The top level holds what a user of the drop-in client needs. The parts behind it live in
public submodules, each with its own ``__all__``:

- :mod:`llmcache.storage`: backends (a directory, Postgres + pgvector), bounds, transfer;
- :mod:`llmcache.index`: the vector indexes a directory cache keeps per table;
- :mod:`llmcache.embedders`: embedding models and the text a prompt is embedded by;
- :mod:`llmcache.modifiers`: read, choose, revise, and the hit step they run in;
- :mod:`llmcache.verification`: validators, answer equivalence, verifiers;
- :mod:`llmcache.recording`: the JSONL dataset of every cached call;
- :mod:`llmcache.templates`: prompts recognised from their text (``CachedLLM(templates=)``);
- :mod:`llmcache.types`: the data types that cross those boundaries;
- :mod:`llmcache.errors`: the exception tree;
- :mod:`llmcache.testing`: test doubles; :mod:`llmcache.llm`: the LLM runtime (a local
  llama.cpp server, or any OpenAI-compatible endpoint), which the cache never imports.
"""

from __future__ import annotations

from ._cache import SemanticCache
from ._client import AsyncCachedLLM, CachedLLM
from ._config import CacheConfig, CategoryPolicy
from ._errors import LLMCacheError
from ._ledger import CacheStats
from ._template import PromptTemplate
from ._types import CacheOptions, CallInfo, EmbedMode, Mode

__version__ = "0.1.0"

__all__ = [
    "AsyncCachedLLM",
    "CacheConfig",
    "CacheOptions",
    "CacheStats",
    "CachedLLM",
    "CallInfo",
    "CategoryPolicy",
    "EmbedMode",
    "LLMCacheError",
    "Mode",
    "PromptTemplate",
    "SemanticCache",
    "__version__",
]
