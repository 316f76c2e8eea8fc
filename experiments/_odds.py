"""Reading a completion's token odds (``logprobs``), for the judges that use them.

OpenAI's chat completions and llama.cpp's server return, with ``logprobs=True`` and
``top_logprobs=k``, the k likeliest tokens at each position of the answer. The judges read a
verdict from them rather than from the one sampled token: the odds of "A" against "B", the
expected digit of a score, the expected value of a rating. Completions come as the SDK's
objects or as plain dicts (scripted servers in tests); :func:`choice_field` reads either.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from typing import Any, TypeVar

import openai

__all__ = ["check_positive", "choice_field", "first_readable", "rating_distribution", "top_odds"]

T = TypeVar("T")


def choice_field(x: Any, name: str) -> Any:
    """A field of a completion part, from a dict or an SDK object alike (None when absent)."""
    return x.get(name) if isinstance(x, dict) else getattr(x, name, None)


def _tokens(choice: Any) -> list[Any]:
    logprobs = choice_field(choice, "logprobs")
    return list(choice_field(logprobs, "content") or []) if logprobs is not None else []


def top_odds(token: Any) -> dict[str, float]:
    """One answer position's top tokens (stripped of spaces and quotes) and their probabilities,
    summed over tokens that strip to the same text."""
    odds: dict[str, float] = defaultdict(float)
    for top in choice_field(token, "top_logprobs") or []:
        text = str(choice_field(top, "token") or "").strip().strip('"')
        lp = choice_field(top, "logprob")
        if text and isinstance(lp, int | float) and math.isfinite(lp):
            odds[text] += math.exp(lp)
    return dict(odds)


def rating_distribution(choice: Any, low: int = 1, high: int = 10) -> dict[int, float] | None:
    """The distribution of the first integer rating in a choice's answer, from its digit's top
    log-probabilities, over ``low``..``high``; ``None`` when the choice has no odds or no digit.

    Tokenizers that write "10" as "1" then "0" are read as such: the "1" is split by the odds
    of a "0" following it (when the sampled digit was that "1"; otherwise a sampled "1" is
    taken as a 1)."""
    tokens = _tokens(choice)
    for i, token in enumerate(tokens):
        sampled = str(choice_field(token, "token") or "").strip().strip('"')
        if not sampled.isdigit():
            continue
        probs: dict[int, float] = defaultdict(float)
        for text, p in top_odds(token).items():
            if text.isdigit() and low <= int(text) <= high:
                probs[int(text)] += p
        if sampled == "1" and high >= 10 > low and i + 1 < len(tokens) and 1 in probs:
            zero = top_odds(tokens[i + 1]).get("0", 0.0)
            p1 = probs.pop(1)
            probs[1] = p1 * (1 - zero)
            probs[10] += p1 * zero
        total = sum(probs.values())
        return {k: v / total for k, v in sorted(probs.items())} if total > 0 else None
    return None


def check_positive(**values: int) -> None:
    """A judge's count arguments (attempts, characters, tokens) must be at least 1."""
    for name, value in values.items():
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")


def first_readable(
    client: Any, request: dict[str, Any], attempts: int, read: Callable[[Any], T | None]
) -> T | None:
    """Ask ``request`` of ``client``'s chat completions up to ``attempts`` times and return the
    first answer ``read`` makes sense of (``read`` gets the first choice); None when no attempt
    did. API errors count as attempts: a judge records a failure rather than raising."""
    for _ in range(attempts):
        try:
            completion = client.chat.completions.create(**request)
        except openai.APIError:
            continue
        choices = choice_field(completion, "choices") or []
        value = read(choices[0]) if choices else None
        if value is not None:
            return value
    return None
