"""A judge that scores each answer on its own against the task, reading the model's odds.

:class:`LLMJudge` and :class:`~experiments._pairwise_judge.PairwiseJudge` show a model several
answers at once, and a small model then answers by position. :class:`ScoreJudge` shows one
answer at a time, so there is no position to prefer:

- **one answer per request**: the task prompt, then the answer, then "rate it from 1 to 9";
  the task comes first so a server's prompt cache reuses it for every answer to the same task
  (llama.cpp's server keeps the longest shared prefix);
- **the expected score, not one sampled digit**: with ``logprobs=True`` the request asks for the
  answer token's ``top_logprobs`` and the score is the expectation over the digits among them,
  renormalised; a server that returns none falls back to the sampled digit. One digit, 1 to 9,
  because most tokenizers split "10" into two tokens;
- **ties**: answers whose scores are equal (to six decimals) share their rank, so two identical
  answers always tie.

Each answer is judged alone, so the judgement has no reversed presentation
(``reversal_pairs`` is 0): its order-independence holds by construction, not by measurement.
An answer the model gave no readable score for fails the judgement (counted, never guessed).
"""

from __future__ import annotations

from typing import Any

from ._judge import (
    Judgement,
    JudgeQuery,
    failed_judgement,
    scored_judgement,
    split_candidates,
    truncate_text,
)
from ._odds import check_positive, choice_field, first_readable, rating_distribution

__all__ = ["ScoreJudge", "expected_score", "score_prompt"]

_DIGITS = tuple(str(d) for d in range(1, 10))
# Scores are rounded before ranking: expectations differing in the last bits are a tie.
_SCORE_DIGITS = 6


def score_prompt(prompt: str, answer: str, *, max_chars: int) -> str:
    """One response to one task, and the question how good it is (the task first: see above)."""
    return (
        "A character in a simulated town was given the following task prompt:\n\n"
        f"{prompt}\n\n"
        f"Their response: {truncate_text(answer, max_chars)}\n\n"
        "How well does the response answer the prompt, and how plausible is it for that "
        "character? Rate it from 1 (wrong, empty or implausible) to 9 (exactly right). "
        "Answer with one digit."
    )


def expected_score(choice: Any) -> float | None:
    """The score 1–9 of one completion choice; None when unreadable.

    The expectation over the digits among the first answer token's ``top_logprobs`` when the
    choice carries them, else the sampled text's first digit.
    """
    odds = rating_distribution(choice, 1, 9)
    if odds:
        return sum(d * p for d, p in odds.items())
    message = choice_field(choice, "message")
    content = choice_field(message, "content") if message is not None else None
    text = str(content or "").strip().strip('"')
    return float(text[0]) if text and text[0] in _DIGITS else None


class ScoreJudge:
    """Ranks candidates by scoring each alone (see the module docstring).

    ``client`` is any OpenAI-compatible client. ``max_attempts`` asks per answer before it is
    given up (API errors and unreadable answers alike).
    """

    def __init__(
        self,
        client: Any,
        *,
        model: str,
        logprobs: bool = True,
        max_attempts: int = 2,
        temperature: float | None = None,
        max_chars: int = 1200,
        name: str | None = None,
    ) -> None:
        check_positive(max_attempts=max_attempts, max_chars=max_chars)
        self._client = client
        self.model = model
        self.logprobs = logprobs
        self.max_attempts = max_attempts
        self.temperature = temperature
        self.max_chars = max_chars
        self._name = name or f"score:{model}"

    @property
    def name(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return f"ScoreJudge(model={self.model!r}, logprobs={self.logprobs})"

    def score(self, prompt: str, answer: str) -> float | None:
        """The score 1–9 of ``answer`` to ``prompt``; None when no attempt was readable."""
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [
                {
                    "role": "user",
                    "content": score_prompt(prompt, answer, max_chars=self.max_chars),
                }
            ],
            # One digit is the whole answer; a token spare for a leading space or quote.
            "max_tokens": 2,
        }
        if self.logprobs:
            kwargs["logprobs"] = True
            kwargs["top_logprobs"] = 10
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        return first_readable(self._client, kwargs, self.max_attempts, expected_score)

    def judge(self, query: JudgeQuery) -> Judgement:
        scores: dict[str, float] = {}
        for c in split_candidates(query)[0]:
            s = self.score(query.prompt, c.text or "")
            if s is None:
                return failed_judgement(query, self.name, f"no readable score for {c.label!r}")
            scores[c.label] = round(s, _SCORE_DIGITS)
        return scored_judgement(query, self.name, scores)
