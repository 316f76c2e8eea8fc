"""A client that answers with a recorded run's real answers: how the studies write a run's
answers into a real cache through the library's own write path (same tables, same embeddings as
a live run), and how a replay answers a held-out run's misses."""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from openai.types.chat import ChatCompletion, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice
from openai.types.completion_usage import CompletionUsage

from ._data import Prompt, messages_key

__all__ = ["OutOfRevisions", "RecordedAnswers", "ReplayClient"]


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


class OutOfRevisions(Exception):
    """A revision asked for after the revise budget ran out."""


class RecordedAnswers:
    """A replay's LLM (the budget and cost studies'): the query being answered gets its
    recorded answer (its true answer, at its recorded tokens: the call the run made) the first
    time it is asked; asked again within the same call (a twin) it goes to the real LLM, as does
    a revision of a cached answer, while the revise budget lasts (``None``: no limit)."""

    def __init__(
        self, recorded: Sequence[Prompt], client: Any, model: str, budget: int | None = None
    ) -> None:
        self._replay = ReplayClient(recorded)
        self._client = client
        self._model = model
        self._budget = budget
        self._asked: set[int] = set()
        self.revise_calls = 0
        self.refused = False  # set when a revision was refused; the caller resets it
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def begin(self) -> None:
        """A new query: its first ask is its recorded answer."""
        self._asked.clear()
        self.refused = False

    def create(self, **kwargs: Any) -> Any:
        try:
            recorded = self._replay.chat.completions.create(**kwargs)
        except KeyError:  # not a recorded query: a revision
            recorded = None
        if recorded is not None:
            key = id(self._replay.answer_for(kwargs["messages"]))
            if key not in self._asked:
                self._asked.add(key)
                return recorded
            # The same query asked again while answering it: a fresh answer (a twin).
            return self._client.chat.completions.create(**{**kwargs, "model": self._model})
        if self._budget is not None and self.revise_calls >= self._budget:
            self.refused = True
            raise OutOfRevisions("the revise budget of this configuration is spent")
        self.revise_calls += 1
        return self._client.chat.completions.create(**{**kwargs, "model": self._model})
