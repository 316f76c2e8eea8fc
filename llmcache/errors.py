"""The exception tree: every error llmcache raises derives from :class:`LLMCacheError` (its
docstring draws the tree)."""

from __future__ import annotations

from ._errors import (
    ConfigurationError,
    CorruptEntryError,
    EmbedderError,
    EmbedderMismatchError,
    InvalidResponseError,
    LLMCacheError,
    ReplayError,
    ReplayInputError,
    StoreError,
)

__all__ = [
    "ConfigurationError",
    "CorruptEntryError",
    "EmbedderError",
    "EmbedderMismatchError",
    "InvalidResponseError",
    "LLMCacheError",
    "ReplayError",
    "ReplayInputError",
    "StoreError",
]
