"""The exception tree of llmcache.

Every error the library raises on purpose derives from :class:`LLMCacheError`, so a caller
can catch the whole family with one ``except``::

    LLMCacheError
    ├── ConfigurationError          bad options or arguments (e.g. keyword mode without keywords)
    ├── EmbedderError               an embedder could not load or embed
    │   └── EmbedderMismatchError   the cache on disk was built with another embedder / dimension
    ├── StoreError                  the entry store or index failed (never raised into an
    │   │                           LLM call: store failures there are logged and counted)
    │   └── CorruptEntryError       one stored entry is damaged: undecodable, failing its
    │                               checksum, or its value file gone (a counted miss; evicted)
    ├── InvalidResponseError        the LLM answered invalidly after every retry and escalation
    ├── ReplayInputError            a recording or call file to replay has malformed lines
    │                               (every one of them named, after the good ones were read)
    ├── ReplayError                 a replayed call asked the recording for what it does not
    │                               hold (a modifier's revision prompt), or failed in the cache
    └── LocalServerError            (``llmcache.llm``, the LLM runtime) the local OpenAI-compatible
                                    server could not start or is missing

Errors raised by the wrapped ``openai`` client (``openai.APIError`` and friends) pass through
unchanged: llmcache never hides or rewraps the provider's own failures.

The option models (``CacheOptions``, ``CacheConfig``, ``CategoryPolicy``) are pydantic models:
a value of the wrong type, out of range, or an unknown field is refused when they are built,
with pydantic's ``ValidationError`` (a ``ValueError``), whose message names the valid fields.
"""

from __future__ import annotations

from typing import Any

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


class LLMCacheError(Exception):
    """Root of every error llmcache raises on purpose."""


class ConfigurationError(LLMCacheError, ValueError):
    """Options or arguments that cannot work together."""


class EmbedderError(LLMCacheError):
    """An embedder failed to load its model or to embed texts."""


class EmbedderMismatchError(EmbedderError):
    """A cache directory was opened with an embedder other than the one that built it."""


class StoreError(LLMCacheError):
    """The entry store or the vector index failed."""


class CorruptEntryError(StoreError):
    """A stored entry could not be decoded; the cache drops it and counts a miss."""


class InvalidResponseError(LLMCacheError):
    """The LLM answered invalidly on every attempt, including the escalation attempts.

    ``attempts`` counts every request sent; ``last_content`` is the last invalid answer and
    ``last_error`` the validator's reason for refusing it; ``usage``/``cost_usd`` what the
    refused attempts cost; ``last_response`` the last response received, as the endpoint's
    SDK type (a ``ChatCompletion`` for chat), for a caller that wants to look at it.
    """

    def __init__(
        self,
        message: str,
        *,
        attempts: int,
        last_content: str | None,
        last_error: str,
        usage: Any = None,
        cost_usd: float = 0.0,
        last_response: Any = None,
    ):
        super().__init__(message)
        self.attempts = attempts
        self.last_content = last_content
        self.last_error = last_error
        # What the refused attempts spent (an llmcache Usage): spent all the same.
        self.usage = usage
        self.cost_usd = cost_usd
        self.last_response = last_response


class ReplayInputError(LLMCacheError, ValueError):
    """Lines of a file to replay that are not calls: ``problems`` lists each as ``(line
    number, what is wrong)``, all of them, read to the end; ``good`` counts the lines that
    were calls, none of them lost (read again with ``strict=False`` to use them)."""

    def __init__(self, source: str, problems: list[tuple[int, str]], good: int) -> None:
        shown = "; ".join(f"line {n}: {why}" for n, why in problems[:10])
        more = f"; and {len(problems) - 10} more" if len(problems) > 10 else ""
        super().__init__(
            f"{source}: {len(problems)} malformed line(s) ({good} good): {shown}{more}"
        )
        self.source = source
        self.problems = problems
        self.good = good


class ReplayError(LLMCacheError):
    """A replay could not go on: a call sent a request that is none of the recording's
    prompts (a modifier's revision, which no recording answers), or failed in the cache."""
