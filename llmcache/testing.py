"""Test doubles for code that uses llmcache — fakes, not mocks.

:class:`FakeOpenAI` and :class:`AsyncFakeOpenAI` stand in for ``openai.OpenAI`` /
``openai.AsyncOpenAI`` on the chat-completions path: they record every request's keyword
arguments verbatim and answer with text from a responder you supply, as real
``ChatCompletion`` objects. :class:`HashEmbedder` is a deterministic embedder. None of them
produce results anyone should read as measured.

A responder may also return a whole response body (a mapping, e.g. an answer made of tool
calls, or a malformed one): it is built the way the openai SDK builds a server's JSON, without
validation, so code under test meets what a misbehaving server would send.

>>> body = {"choices": [{"index": 0, "finish_reason": "stop", "message": None}]}
>>> FakeOpenAI(lambda request: body).chat.completions.create(model="m", messages=[]).choices[0]
Choice(finish_reason='stop', index=0, logprobs=None, message=None)

>>> from llmcache.testing import FakeOpenAI
>>> fake = FakeOpenAI(lambda request: "pong")
>>> reply = fake.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
>>> reply.choices[0].message.content
'pong'
>>> fake.calls[0]["model"]
'm'
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from openai.types.chat import ChatCompletion

from ._hash_embedder import HashEmbedder

__all__ = ["AsyncFakeOpenAI", "FakeOpenAI", "HashEmbedder", "Responder", "scripted"]

#: Answers a request: with the text of the answer, with a whole response body (a mapping,
#: missing top-level fields filled in), or with a ready ChatCompletion.
Responder = Callable[[dict[str, Any]], str | Mapping[str, Any] | ChatCompletion]


def _last_user_text(request: dict[str, Any]) -> str:
    for message in reversed(request.get("messages", [])):
        if message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else str(content)
    return ""


def _echo(request: dict[str, Any]) -> str:
    return f"answer to: {_last_user_text(request)}"


def scripted(answers: Iterable[str | Mapping[str, Any] | ChatCompletion]) -> Responder:
    """A responder that gives the answers in order, repeating the last one when they run out."""
    items = list(answers)
    if not items:
        raise ValueError("scripted() needs at least one answer")
    counter = itertools.count()
    lock = threading.Lock()

    def respond(request: dict[str, Any]) -> str | Mapping[str, Any] | ChatCompletion:
        with lock:
            i = next(counter)
        return items[min(i, len(items) - 1)]

    return respond


def _prompt_chars(request: dict[str, Any]) -> int:
    return sum(len(str(m.get("content") or "")) for m in request.get("messages", []))


class _FakeCompletions:
    def __init__(self, owner: _FakeCore) -> None:
        self._owner = owner

    def create(self, **kwargs: Any) -> ChatCompletion:
        return self._owner.answer(kwargs)


class _AsyncFakeCompletions:
    def __init__(self, owner: _FakeCore) -> None:
        self._owner = owner

    async def create(self, **kwargs: Any) -> ChatCompletion:
        return self._owner.answer(kwargs)


class _Chat:
    def __init__(self, completions: Any) -> None:
        self.completions = completions


class _FakeCore:
    def __init__(self, responder: Responder | None, *, report_usage: bool) -> None:
        self.responder: Responder = responder or _echo
        self.report_usage = report_usage
        self.calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        # Attributes code commonly reads off a real client.
        self.api_key = "fake-key"
        self.base_url = "http://fake.invalid/v1"

    def answer(self, kwargs: dict[str, Any]) -> ChatCompletion:
        with self._lock:
            self.calls.append(kwargs)
            n = next(self._ids)
        answer = self.responder(kwargs)
        if isinstance(answer, ChatCompletion):
            return answer
        data: dict[str, Any] = {
            "id": f"chatcmpl-fake-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(kwargs.get("model", "fake-model")),
        }
        if isinstance(answer, Mapping):
            data.update(answer)
            text = str(answer)
        else:
            data["choices"] = [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": answer},
                }
            ]
            text = answer
        if self.report_usage and "usage" not in data:
            prompt = _prompt_chars(kwargs) // 4 + 1
            completion = len(text) // 4 + 1
            data["usage"] = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
        if isinstance(answer, Mapping):
            # As the openai SDK turns a server's JSON into a response: without validating it.
            built: ChatCompletion = ChatCompletion.construct(**data)
            return built
        return ChatCompletion.model_validate(data)


class FakeOpenAI(_FakeCore):
    """A fake ``openai.OpenAI``: ``chat.completions.create(**kwargs)`` answers with
    ``responder(kwargs)`` and appends ``kwargs`` to ``calls`` exactly as received.

    ``report_usage=False`` mimics a server that returns no token usage.
    """

    def __init__(self, responder: Responder | None = None, *, report_usage: bool = True) -> None:
        super().__init__(responder, report_usage=report_usage)
        self.chat = _Chat(_FakeCompletions(self))


class AsyncFakeOpenAI(_FakeCore):
    """The async twin of :class:`FakeOpenAI` (``await chat.completions.create(...)``)."""

    def __init__(self, responder: Responder | None = None, *, report_usage: bool = True) -> None:
        super().__init__(responder, report_usage=report_usage)
        self.chat = _Chat(_AsyncFakeCompletions(self))
