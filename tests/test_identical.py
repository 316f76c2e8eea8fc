"""Identical prompts under a guard: an answer stored for the very same prompt of a table is the
model's own answer to it, served without a threshold, exploration or audit (serve_identical)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from llmcache import CacheConfig, CachedLLM, CacheOptions, CategoryPolicy, Mode, SemanticCache
from llmcache.testing import FakeOpenAI, HashEmbedder, scripted


def _client(tmp_path: Path, responder: Any, **config: Any) -> CachedLLM:
    cache = SemanticCache(
        tmp_path / "c",
        embedder=HashEmbedder(dim=64),
        config=CacheConfig(**{"twin_rate": 0.0, **config}),
    )
    return CachedLLM(FakeOpenAI(responder), cache=cache)


def _ask(client: CachedLLM, prompt: str, keywords: list[str], **options: Any) -> tuple[str, Any]:
    response, info = client.chat.completions.create_with_info(
        model="m",
        messages=[{"role": "user", "content": prompt}],
        cache=CacheOptions(category="importance", agent="Liam", keywords=keywords, **options),
    )
    return response.choices[0].message.content, info


@pytest.mark.parametrize("guard", ["prove", "audit"])
def test_a_guard_serves_the_very_same_prompt_at_once_without_asking(
    tmp_path: Path, guard: str
) -> None:
    llm = scripted(["3", "9", "9", "9"])
    client = _client(tmp_path, llm, wrong_hit_budget=0.02, guard=guard, variety=False)
    first, info = _ask(client, "Rate: tree idle", ["tree idle"])
    assert (first, info.outcome) == ("3", "miss")
    served, info = _ask(client, "Rate: tree idle", ["tree idle"])
    # No labels prove anything yet, and nothing was audited: the repeat is served all the same,
    # as the model's own answer to this prompt, and the LLM is not asked.
    assert (served, info.outcome, info.identical) == ("3", "hit", True)
    assert not info.explored and not info.audited
    assert client.cache.stats().tables[0].identical == 1


def test_the_same_keywords_in_another_prompt_are_not_identical(tmp_path: Path) -> None:
    # Keyword mode embeds "tree idle" in both, at a cosine of 1, but the prompts differ: the
    # proving guard has no proof for that candidate, so it explores it instead of serving.
    client = _client(tmp_path, scripted(["3", "3"]), wrong_hit_budget=0.02)
    _ask(client, "Monday. Rate: tree idle", ["tree idle"])
    _, info = _ask(client, "Tuesday. Rate: tree idle", ["tree idle"])
    assert (info.outcome, info.identical, info.explored) == ("miss", False, True)


def test_without_a_guard_or_when_turned_off_repeats_are_served_as_before(tmp_path: Path) -> None:
    # The static threshold serves the repeat as it always did (flagged as identical), and a
    # neighbour at its threshold is not identical.
    static = _client(tmp_path / "static", scripted(["3", "4"]), threshold=0.3)
    _ask(static, "Rate: tree idle", ["tree idle"])
    _, info = _ask(static, "Rate: tree idle", ["tree idle"])
    assert (info.outcome, info.identical) == ("hit", True)
    _, info = _ask(static, "Rate: tree idle now", ["tree idle now"])
    assert (info.outcome, info.identical) == ("hit", False)
    # serve_identical=False (here per category): the repeat must earn its place as before.
    config = {"categories": {"importance": CategoryPolicy(serve_identical=False)}}
    off = _client(tmp_path / "off", scripted(["3", "3"]), wrong_hit_budget=0.02, **config)
    _ask(off, "Rate: tree idle", ["tree idle"])
    _, info = _ask(off, "Rate: tree idle", ["tree idle"])
    assert (info.outcome, info.identical, info.explored) == ("miss", False, True)


def test_a_threshold_no_cosine_reaches_still_serves_identical_prompts(tmp_path: Path) -> None:
    # A table whose threshold in force no near neighbour reaches (as a guard leaves a table it
    # closed) still answers the very same prompt from what the model said to it.
    client = _client(tmp_path, scripted(["3"]), wrong_hit_budget=0.02, threshold=1.0)
    _ask(client, "Rate: tree idle", ["tree idle"], mode=Mode.COLLECT)
    _, info = _ask(client, "Rate: tree idle", ["tree idle"])
    assert (info.outcome, info.identical) == ("hit", True)
