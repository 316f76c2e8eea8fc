"""The runtime's error, a branch of llmcache's one exception root."""

from __future__ import annotations

from .. import LLMCacheError

__all__ = ["LocalServerError"]


class LocalServerError(LLMCacheError):
    """The local LLM server binary or weights are missing, or the server did not become healthy."""
