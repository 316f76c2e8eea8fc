"""One synthetic rating call, as the property tests of tune's promise and of the leading words
replay them: one agent (Ada) rates a memory, the memory is its keywords."""

from __future__ import annotations

from llmcache.replay import ReplayCall


def rating_call(text: str, answer: int, time: float) -> ReplayCall:
    """Ada's call rating ``text``, recorded as answered ``answer`` at ``time``."""
    return ReplayCall(
        category="rate",
        agent="Ada",
        messages=[{"role": "user", "content": f"Rate 1-10: {text}"}],
        keywords=[text],
        answer=str(answer),
        time=time,
    )
