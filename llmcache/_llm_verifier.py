"""A verifier that asks a chat model whether one answer would serve two requests."""

from __future__ import annotations

import json
import re
from typing import Any

from ._errors import InvalidResponseError
from ._shapes import CHAT
from ._types import Usage, Verdict

__all__ = ["LLMVerifier"]

# Generic on purpose: it knows nothing of what the requests are about (a town's templates, a
# product's questions), only that a cached answer is served when one answer fits both.
_SYSTEM = (
    "You compare two requests sent to an assistant. Decide whether a single answer would "
    "serve both of them equally well: the same question or instruction, asked in other words. "
    "Requests that differ in a detail that changes the answer (a name, a number, a place, a "
    "time, a negation) are not the same. Reply with JSON only: "
    '{"same": true} or {"same": false}.'
)
_USER = "Request A:\n{cached}\n\nRequest B:\n{query}\n\nWould one answer serve both requests?"

_SCHEMA: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {
        "name": "same_request",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"same": {"type": "boolean"}},
            "required": ["same"],
            "additionalProperties": False,
        },
    },
}

# A model that ignores the schema may still say it in words or wrap the JSON in a fence.
_SAID = re.compile(r'"same"\s*:\s*(true|false)', re.IGNORECASE)


class LLMVerifier:
    """A :class:`~llmcache.verification.Verifier` that asks any OpenAI-compatible chat model a
    short yes/no
    question: would one answer serve both requests? The answer is constrained to the JSON
    schema ``{"same": true|false}``.

    ``client`` is a plain ``openai.OpenAI`` (or any object with ``chat.completions.create``),
    not a cached one: a verdict must come from the model, not from the cache it judges.
    ``model`` names the model; its tokens are priced by the cache's
    :class:`~llmcache.types.PriceTable` and counted as ``verify_tokens``/``verify_usd``.
    ``extra`` are further keyword arguments of every request (e.g. ``extra_body`` for a local
    server). Raises :class:`~llmcache.errors.InvalidResponseError` when the model's answer says
    neither yes nor no (the cache turns that into a counted miss).
    """

    def __init__(self, client: Any, model: str, *, max_tokens: int = 16, **extra: Any) -> None:
        self.client = client
        self.model = model
        self.max_tokens = max_tokens
        self.extra = extra

    def messages(self, query: str, cached: str) -> list[dict[str, str]]:
        """The prompt: the cached request first, the new one second."""
        return [
            {"role": "system", "content": _SYSTEM},
            {"role": "user", "content": _USER.format(cached=cached, query=query)},
        ]

    def verify(self, query: str, cached: str, *, cosine: float) -> Verdict:
        messages = self.messages(query, cached)
        request = {
            "model": self.model,
            "messages": messages,
            "temperature": 0,
            "max_tokens": self.max_tokens,
            "response_format": _SCHEMA,
            **self.extra,
        }
        response = self.client.chat.completions.create(**request)
        # Read as the cache reads any chat answer: defensively, usage estimated if absent.
        usage: Usage = CHAT.usage(response, messages)
        content = CHAT.content(response) or ""
        same = _parse(content)
        if same is None:
            raise InvalidResponseError(
                f"the verifier's model said neither yes nor no: {content[:200]!r}",
                attempts=1,
                last_content=content,
                last_error='not {"same": true|false}',
                usage=usage,
            )
        return Verdict(same=same, usage=usage, model=self.model)


def _parse(content: str) -> bool | None:
    try:
        value = json.loads(content)
    except ValueError:
        value = None
    if isinstance(value, dict) and isinstance(value.get("same"), bool):
        return bool(value["same"])
    said = _SAID.search(content)
    return said.group(1).lower() == "true" if said else None
