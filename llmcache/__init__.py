"""llmcache — a semantic cache for the openai client, split by prompt category and agent.

>>> from llmcache import CachedLLM, CacheOptions          # doctest: +SKIP
>>> client = CachedLLM(OpenAI())                          # doctest: +SKIP
>>> client.chat.completions.create(model="gpt-4o-mini", messages=msgs,
...     cache=CacheOptions(category="importance", agent="Liam Oliver",
...                        keywords=["Tree in Victoria Park is Idle"]))  # doctest: +SKIP

The LLM runtime -- a local llama.cpp server, and the choice between it, OpenAI and any
OpenAI-compatible URL -- is the subpackage :mod:`llmcache.llm`; the cache never imports it.
"""

from __future__ import annotations

from ._backend import LocalBackend
from ._budget import same_answer
from ._cache import SemanticCache, default_embedder
from ._client import AsyncCachedLLM, CachedLLM
from ._config import CacheConfig, CategoryPolicy, Limits
from ._embedders import BatchingEmbedder, MemoEmbedder, MiniLMEmbedder, OpenAIEmbedder
from ._errors import (
    ConfigurationError,
    CorruptEntryError,
    EmbedderError,
    EmbedderMismatchError,
    InvalidResponseError,
    LLMCacheError,
    StoreError,
)
from ._index import AutoIndex, ExactIndex, HnswIndex
from ._keys import embedding_text, messages_text
from ._ledger import CacheStats, Price, PriceTable, TableStats
from ._llm_verifier import LLMVerifier
from ._manifest import Manifest
from ._modifiers import Choose, Read, Revise
from ._pg import PgBackend
from ._protocols import (
    BoundedBackend,
    CacheBackend,
    Embedder,
    Equivalence,
    Modifier,
    ModifyContext,
    Validator,
    VectorIndex,
    Verifier,
)
from ._recorder import RecordedCall, Recorder, read_records
from ._template import FilledPrompt, PromptTemplate
from ._transfer import transfer
from ._types import (
    Adapted,
    CacheEntry,
    CacheOptions,
    CallInfo,
    Candidate,
    EmbedMode,
    Mode,
    Partition,
    Similarity,
    Usage,
    Verdict,
)

__version__ = "0.1.0"

__all__ = [
    "Adapted",
    "AsyncCachedLLM",
    "AutoIndex",
    "BatchingEmbedder",
    "BoundedBackend",
    "CacheBackend",
    "CacheConfig",
    "CacheEntry",
    "CacheOptions",
    "CacheStats",
    "CachedLLM",
    "CallInfo",
    "Candidate",
    "CategoryPolicy",
    "Choose",
    "ConfigurationError",
    "CorruptEntryError",
    "EmbedMode",
    "Embedder",
    "EmbedderError",
    "EmbedderMismatchError",
    "Equivalence",
    "ExactIndex",
    "FilledPrompt",
    "HnswIndex",
    "InvalidResponseError",
    "LLMCacheError",
    "LLMVerifier",
    "Limits",
    "LocalBackend",
    "Manifest",
    "MemoEmbedder",
    "MiniLMEmbedder",
    "Mode",
    "Modifier",
    "ModifyContext",
    "OpenAIEmbedder",
    "Partition",
    "PgBackend",
    "Price",
    "PriceTable",
    "PromptTemplate",
    "Read",
    "RecordedCall",
    "Recorder",
    "Revise",
    "SemanticCache",
    "Similarity",
    "StoreError",
    "TableStats",
    "Usage",
    "Validator",
    "VectorIndex",
    "Verdict",
    "Verifier",
    "__version__",
    "default_embedder",
    "embedding_text",
    "messages_text",
    "read_records",
    "same_answer",
    "transfer",
]
