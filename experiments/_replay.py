"""A client that answers with a recorded run's real answers: how the studies write a run's
answers into a real cache through the library's own write path (same tables, same embeddings as
a live run), and how a replay answers a held-out run's misses."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from openai.types.chat import ChatCompletion, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice
from openai.types.completion_usage import CompletionUsage

from ._data import Prompt, messages_key

__all__ = ["ReplayClient"]


class _Completions:
    def __init__(self, answers: dict[str, Prompt]) -> None:
        self._answers = answers

    def create(self, **kwargs: Any) -> ChatCompletion:
        p = self._answers.get(messages_key(kwargs["messages"]))
        if p is None:
            raise KeyError("the replay has no recorded answer for these messages")
        return ChatCompletion(
            id=f"replay-{p.run}-{p.index}",
            object="chat.completion",
            created=int(time.time()),
            model=p.model,
            choices=[
                Choice(
                    index=0,
                    finish_reason="stop",
                    message=ChatCompletionMessage(role="assistant", content=p.response),
                )
            ],
            usage=CompletionUsage(
                prompt_tokens=p.prompt_tokens,
                completion_tokens=p.completion_tokens,
                total_tokens=p.prompt_tokens + p.completion_tokens,
            ),
        )


class _Chat:
    def __init__(self, answers: dict[str, Prompt]) -> None:
        self.completions = _Completions(answers)


class ReplayClient:
    """An OpenAI-shaped client that answers with a recorded run's real answers.

    It is how a table is rebuilt from a dataset through the library's own write path (same
    partitions, same embeddings as a live run); it never answers a query it has not recorded.
    """

    def __init__(self, prompts: Sequence[Prompt]) -> None:
        self._answers = {messages_key(p.messages): p for p in prompts}
        self.chat = _Chat(self._answers)

    def answer_for(self, messages: Any) -> Prompt | None:
        """The recorded prompt that answers ``messages`` (the last of them, when asked more
        than once), or ``None``."""
        return self._answers.get(messages_key(messages))
