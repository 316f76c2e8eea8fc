"""A judge that compares two answers at a time, in both orders, reading the model's odds.

:class:`LLMJudge` asks a model to rank all candidates at once; a small model then tends to
answer by position. :class:`PairwiseJudge` removes what a protocol can remove:

- **both orders, combined**: each pair is shown as (A, B) and as (B, A); the preference for a
  candidate is the mean of the two, so a judge that always says "A" ends in a tie, not a verdict
  (``both_orders=False`` asks one seeded order only);
- **the model's odds, not one sampled token**: with ``logprobs=True`` the request asks for the
  answer token's ``top_logprobs`` (OpenAI's chat completions and llama.cpp's server both give
  them) and the preference is ``P(A) / (P(A) + P(B))`` over the letters among them; a server that
  returns none falls back to the one sampled letter (1, 0, or ½ for a tie);
- **ties allowed** (``ties=True``): the model may answer "T" when both are equally good, which
  counts half to each side (its odds too).

A candidate's score is its summed preference over every pair it is in; the ranks follow the
scores (equal scores tie). Each pair seen in both orders adds to the judgement's single-order
reversal check (``reversal_pairs`` / ``reversal_same``): the two orders prefer the same candidate,
a tie in either counting half. A pair the model gave no valid answer for in either order fails
the judgement (counted, never guessed).
"""

from __future__ import annotations

import itertools
import random
from typing import Any

from ._judge import (
    Judgement,
    JudgeQuery,
    failed_judgement,
    scored_judgement,
    split_candidates,
    truncate_text,
)
from ._odds import check_positive, choice_field, first_readable, top_odds

__all__ = ["PairwiseJudge", "pair_prompt", "preference"]

_LETTERS = ("A", "B", "T")
# Scores are rounded before ranking: sums of float odds differing in the last bits are a tie.
_SCORE_DIGITS = 6


def pair_prompt(prompt: str, first: str, second: str, *, ties: bool, max_chars: int) -> str:
    """Two responses to one task, and the question which one answers it better."""
    choices = (
        'Answer with one letter: "A", "B", or "T" if they are equally good.'
        if ties
        else 'Answer with one letter: "A" or "B".'
    )
    return (
        "A character in a simulated town was given the following task prompt:\n\n"
        f"{prompt}\n\n"
        f"Response A: {truncate_text(first, max_chars)}\n\n"
        f"Response B: {truncate_text(second, max_chars)}\n\n"
        "Which response answers the prompt better and more plausibly for that character? " + choices
    )


def _first_token(choice: Any) -> Any:
    logprobs = choice_field(choice, "logprobs")
    tokens = choice_field(logprobs, "content") if logprobs is not None else None
    return tokens[0] if tokens else None


def preference(choice: Any, *, ties: bool) -> float | None:
    """P(the first response is better) from one completion choice; None when unreadable.

    From the first answer token's ``top_logprobs`` when the choice carries them (the letters'
    probabilities renormalised among themselves, "T" counting half), else from the sampled
    text's first letter.
    """
    letters = _LETTERS if ties else _LETTERS[:2]
    tokens = _first_token(choice)
    if tokens is not None:
        top = top_odds(tokens)
        odds = {letter: top.get(letter, 0.0) + top.get(letter.lower(), 0.0) for letter in letters}
        total = sum(odds.values())
        if total > 0:
            return (odds["A"] + odds.get("T", 0.0) / 2) / total
    message = choice_field(choice, "message")
    content = choice_field(message, "content") if message is not None else None
    text = str(content or "").strip().strip('"').upper()
    if not text:
        return None
    return {"A": 1.0, "B": 0.0, "T": 0.5 if ties else None}.get(text[0])


class PairwiseJudge:
    """Ranks candidates by comparing them two at a time (see the module docstring).

    ``client`` is any OpenAI-compatible client. ``max_attempts`` asks of one order before it is
    given up (API errors and unreadable answers alike). With both orders, a pair needs at
    least one readable order; with one order, that order.
    """

    def __init__(
        self,
        client: Any,
        *,
        model: str,
        both_orders: bool = True,
        logprobs: bool = True,
        ties: bool = True,
        seed: int = 0,
        max_attempts: int = 2,
        temperature: float | None = None,
        max_chars: int = 1200,
        name: str | None = None,
    ) -> None:
        check_positive(max_attempts=max_attempts, max_chars=max_chars)
        self._client = client
        self.model = model
        self.both_orders = both_orders
        self.logprobs = logprobs
        self.ties = ties
        self.seed = seed
        self.max_attempts = max_attempts
        self.temperature = temperature
        self.max_chars = max_chars
        self._name = name or f"pairwise:{model}"

    @property
    def name(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return (
            f"PairwiseJudge(model={self.model!r}, both_orders={self.both_orders}, "
            f"logprobs={self.logprobs}, ties={self.ties})"
        )

    def _ask(self, prompt: str, first: str, second: str) -> float | None:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [
                {
                    "role": "user",
                    "content": pair_prompt(
                        prompt, first, second, ties=self.ties, max_chars=self.max_chars
                    ),
                }
            ],
            # One letter is the whole answer; a few tokens spare a leading space or quote.
            "max_tokens": 2,
        }
        if self.logprobs:
            kwargs["logprobs"] = True
            kwargs["top_logprobs"] = 5
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        return first_readable(
            self._client, kwargs, self.max_attempts, lambda c: preference(c, ties=self.ties)
        )

    def presentation_orders(self, query: JudgeQuery, x: str, y: str) -> list[tuple[str, str]]:
        """The (A, B) orders the pair ``x``, ``y`` is shown in (seeded per query and pair)."""
        rng = random.Random(f"{self.seed}:{query.query_id}:{x}:{y}")
        first = (x, y) if rng.random() < 0.5 else (y, x)
        return [first, (first[1], first[0])] if self.both_orders else [first]

    def judge(self, query: JudgeQuery) -> Judgement:
        present, _ = split_candidates(query)
        texts = {c.label: c.text or "" for c in present}
        scores = dict.fromkeys(texts, 0.0)
        reversal_pairs, reversal_same = 0, 0.0
        for x, y in itertools.combinations(texts, 2):
            prefs: list[float] = []  # P(x better), one per readable order
            for a, b in self.presentation_orders(query, x, y):
                p = self._ask(query.prompt, texts[a], texts[b])
                if p is not None:
                    prefs.append(p if a == x else 1.0 - p)
            if not prefs:
                return failed_judgement(
                    query, self.name, f"no readable preference between {x!r} and {y!r}"
                )
            if len(prefs) == 2:
                reversal_pairs += 1
                reversal_same += _same_side(prefs[0], prefs[1])
            p = sum(prefs) / len(prefs)
            scores[x] += p
            scores[y] += 1.0 - p
        return scored_judgement(
            query,
            self.name,
            {k: round(v, _SCORE_DIGITS) for k, v in scores.items()},
            agreement=reversal_same / reversal_pairs if reversal_pairs else None,
            reversal_pairs=reversal_pairs,
            reversal_same=reversal_same,
        )


def _same_side(p: float, q: float) -> float:
    """1 when both orders prefer the same candidate, 0 when they differ, ½ if either ties."""
    if p == 0.5 or q == 0.5:
        return 0.5
    return 1.0 if (p > 0.5) == (q > 0.5) else 0.0
