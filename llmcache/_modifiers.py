"""The three ways a cached answer becomes the answer to a new query (thesis Table 3.3).

llmcache holds the mechanism only. What an option is, how a cached answer names its choice and
what a revision prompt says are the caller's (``agent_core`` supplies them per category).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._protocols import ModifyContext

__all__ = ["Choose", "Read", "Revise", "modifier_name"]


class Read:
    """Return the cached answer as it is."""

    name = "read"

    def apply(self, ctx: ModifyContext) -> str | None:
        return ctx.candidate.entry.content


def _default_extract(content: str, options: Sequence[str]) -> str | None:
    # Without a caller-supplied parser the whole answer is taken to be the chosen option,
    # optionally as a JSON string.
    text = content.strip()
    try:
        loaded = json.loads(text)
    except ValueError:
        return text or None
    return loaded if isinstance(loaded, str) else text


def _default_render(content: str, choice: str) -> str:
    return choice


class Choose:
    """Map the option the cached answer chose onto the closest of the query's own options.

    ``extract(cached_content, cached_options)`` returns the option text the cached answer
    picked (or ``None`` if it cannot tell); the query's options come from
    ``CacheOptions.options``. The cached choice and every query option are embedded with the
    cache's embedder and the most similar query option wins (thesis 3.4.2);
    ``render(cached_content, query_option)`` writes the answer that picks it.
    """

    name = "choose"

    def __init__(
        self,
        extract: Callable[[str, Sequence[str]], str | None] = _default_extract,
        render: Callable[[str, str], str] = _default_render,
    ) -> None:
        self._extract = extract
        self._render = render

    def apply(self, ctx: ModifyContext) -> str | None:
        query_options = list(ctx.options.options or ())
        if not query_options:
            return None
        entry = ctx.candidate.entry
        chosen = self._extract(entry.content, entry.options or ())
        if not chosen:
            return None
        if chosen in query_options:
            return self._render(entry.content, chosen)
        vectors = ctx.embedder.embed([chosen, *query_options])
        scores = vectors[1:] @ vectors[0]
        return self._render(entry.content, query_options[int(np.argmax(scores))])


class Revise:
    """Ask the LLM to rewrite the cached answer for the new query.

    ``builder(ctx)`` returns the revision prompt's messages (or ``None`` to give up, making the
    call a miss). The prompt is sent with the query's model and parameters; its tokens count
    as spent, and the revised answer is validated like any other.
    """

    name = "revise"

    def __init__(self, builder: Callable[[ModifyContext], list[dict[str, Any]] | None]) -> None:
        self._builder = builder

    def apply(self, ctx: ModifyContext) -> str | None:
        messages = self._builder(ctx)
        if not messages:
            return None
        return ctx.complete(messages)


def modifier_name(modifier: Any) -> str:
    return str(getattr(modifier, "name", type(modifier).__name__))
