"""A judge that answers the task itself first, then ranks the candidates by closeness to that.

A small model asked to compare answers tends to follow their position or their surface
(:class:`~experiments._pairwise_judge.PairwiseJudge` measured so). Answering the task is what
it was trained for, so :class:`AnswerFirstJudge` asks that instead -- the "reference-guided"
judge of Zheng et al.'s MT-Bench, with the judge's own answer as the reference:

- the model answers the query's prompt (greedy: ``temperature=0``), never seeing the
  candidates or the true response;
- an answer that is one integer rating (a bare number on its first line, or a JSON object
  with one integer field) is replaced by the rating's **expectation** over the digit's token
  odds where the server returns them: a rating read as an expectation follows a stronger
  model's ratings far more closely than one sampled digit (``docs/local-llm.md``);
- the candidates are then ranked by :class:`~experiments._judge.ReferenceJudge`'s closeness to
  that answer (numbers by their gap, JSON field by field, text by embedding).

Each candidate is scored alone against the reference, so there is no presentation order to
reverse: the judgement's order-independence holds by construction (``reversal_pairs`` 0). A
task the model gave no answer for fails the judgement (counted, never guessed).
"""

from __future__ import annotations

import json
from typing import Any

from ._judge import Judgement, JudgeQuery, ReferenceJudge, TextEmbedder, failed_judgement
from ._odds import check_positive, choice_field, first_readable, rating_distribution

__all__ = ["AnswerFirstJudge", "expected_rating"]

# Expectations are written with this many decimals: enough to order candidates one apart.
_RATING_DIGITS = 3


def _one_rating(text: str) -> tuple[Any, str | None] | None:
    """``(parsed, field)`` when ``text`` is one integer rating: a bare integer on the first line
    (field None) or a JSON object with exactly one integer field; else None."""
    first_line = text.strip().split("\n", 1)[0].strip()
    if first_line.isdigit():
        # A bare rating, perhaps followed by an explanation: the rating is the answer.
        return int(first_line), None
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return None
    if isinstance(data, int) and not isinstance(data, bool):
        return data, None
    if isinstance(data, dict):
        ints = [k for k, v in data.items() if isinstance(v, int) and not isinstance(v, bool)]
        if len(ints) == 1:
            return data, ints[0]
    return None


def expected_rating(choice: Any) -> str | None:
    """The answer text of one completion choice, a one-rating answer's rating replaced by its
    expectation over the token odds (see the module docstring); None when empty."""
    message = choice_field(choice, "message")
    text = str(choice_field(message, "content") or "").strip() if message is not None else ""
    if not text:
        return None
    rating = _one_rating(text)
    if rating is None:
        return text
    data, field = rating
    odds = rating_distribution(choice)
    value = round(sum(k * p for k, p in odds.items()), _RATING_DIGITS) if odds else None
    if field is None:
        return json.dumps(data if value is None else value)
    return text if value is None else json.dumps({**data, field: value}, ensure_ascii=False)


class AnswerFirstJudge:
    """Ranks candidates by closeness to the model's own answer (see the module docstring).

    ``client`` is any OpenAI-compatible client; ``embedder`` compares texts (llmcache's
    ``MiniLMEmbedder`` fits). ``max_attempts`` asks before the query fails (API errors and
    empty answers alike); ``max_tokens`` bounds the judge's own answer.
    """

    def __init__(
        self,
        client: Any,
        embedder: TextEmbedder,
        *,
        model: str,
        logprobs: bool = True,
        max_attempts: int = 2,
        max_tokens: int = 400,
        name: str | None = None,
    ) -> None:
        check_positive(max_attempts=max_attempts, max_tokens=max_tokens)
        self._client = client
        self._reference = ReferenceJudge(embedder)
        self.model = model
        self.logprobs = logprobs
        self.max_attempts = max_attempts
        self.max_tokens = max_tokens
        self._name = name or f"answer-first:{model}"
        # The own answer per prompt: greedy, so asking again would only repeat it (the study
        # judges one prompt once per mode).
        self._answers: dict[str, str] = {}

    @property
    def name(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return f"AnswerFirstJudge(model={self.model!r}, logprobs={self.logprobs})"

    def answer(self, prompt: str) -> str | None:
        """The model's own answer to ``prompt`` (a rating as its expectation); None if none."""
        if prompt in self._answers:
            return self._answers[prompt]
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": self.max_tokens,
            "temperature": 0,
        }
        if self.logprobs:
            kwargs["logprobs"] = True
            kwargs["top_logprobs"] = 10
        text = first_readable(self._client, kwargs, self.max_attempts, expected_rating)
        if text is not None:
            self._answers[prompt] = text
        return text

    def judge(self, query: JudgeQuery) -> Judgement:
        own = self.answer(query.prompt)
        if own is None:
            return failed_judgement(query, self.name, "the judge gave no answer of its own")
        judged = self._reference.judge(query.model_copy(update={"truth": own}))
        return judged.model_copy(update={"judge": self.name})
