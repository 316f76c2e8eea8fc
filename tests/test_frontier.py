"""A wider frontier than one threshold (docs/frontier.md): where a text's leading words decide
its answer and the cosine cannot see it, ``tune`` learns that they must match, and the cache
serves the lenient region while it refuses the strict one.

Each synthetic stream is one agent's day of a template. A memory is a subject of two words and
six more words; each memory is asked several times (the very same prompt). Half the variants
keep the subject and change two of the other words: their true rating is the memory's (a
neighbour whose answer fits, the *lenient* region). The other half change the subject and
keep the six words: another rating (the *strict* region, "Rajiv Patel is conversing about ..."
against "conversing about ..."). Both kinds share six of their eight words with the memory, so
under the test embedder their cosines come from one distribution: no threshold can tell them
apart, and the leading words can.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from pydantic import ValidationError
from rating_support import rating_call

from llmcache import (
    CacheConfig,
    CachedLLM,
    CacheOptions,
    CallInfo,
    CategoryPolicy,
    EmbedMode,
    SemanticCache,
)
from llmcache.errors import ConfigurationError
from llmcache.replay import ReplayCall, replay, tune
from llmcache.testing import FakeOpenAI, HashEmbedder

LEADING_WORDS = "(leading words)"  # what CallInfo.exact_refused names

# Words without digits: the opposites gate refuses texts that differ by a number.
VOCABULARY = [a + b for a in "bdfgklmnprst" for b in ("ar", "el", "ix", "on", "uz")]
SUBJECTS = [a + b for a in "BDFGHJKLMNPRSTVWZ" for b in ("ane", "obi", "ute", "ira", "elo")]
THRESHOLDS = [0.5, 0.6, 0.7, 0.8, 0.9, 0.999]


def _stream(seed: int, memories: int = 120) -> tuple[list[ReplayCall], list[str]]:
    """About 600 calls, and each call's kind: ``memory``, ``lenient`` or ``strict``."""
    rng = random.Random(seed)
    made: list[tuple[list[str], int, str]] = []
    for _ in range(memories):
        if made and rng.random() < 0.5:
            words, truth, _ = rng.choice([m for m in made if m[2] == "memory"])
            words = list(words)
            if rng.random() < 0.5:
                for i in rng.sample(range(2, 8), 2):
                    words[i] = rng.choice(VOCABULARY)
                made.append((words, truth, "lenient"))
            else:
                words[:2] = rng.sample(SUBJECTS, 2)
                made.append((words, 1 + (truth + 4) % 10, "strict"))
        else:
            made.append(
                (
                    rng.sample(SUBJECTS, 2) + rng.sample(VOCABULARY, 6),
                    rng.randrange(1, 11),
                    "memory",
                )
            )
    asks = [i for i in range(memories) for _ in range(rng.randrange(2, 8))]
    rng.shuffle(asks)
    calls, kinds = [], []
    for t, i in enumerate(asks):
        words, truth, kind = made[i]
        text = " ".join(words)
        calls.append(rating_call(text, truth, float(t)))
        kinds.append(kind)
    return calls, kinds


def _served_near(
    config: CacheConfig, calls: list[ReplayCall], kinds: list[str]
) -> dict[str, float]:
    """Per kind of variant, the share of its calls served a near neighbour's answer (not an
    answer stored for its very prompt)."""
    report = replay(calls, config, embedder=HashEmbedder(dim=256))
    served: dict[str, list[bool]] = {"lenient": [], "strict": []}
    for result, kind in zip(report.results, kinds, strict=True):
        if kind in served:
            served[kind].append(result.served is not None and not result.identical)
    return {kind: sum(v) / len(v) for kind, v in served.items()}


def test_tune_learns_the_leading_words_that_a_single_threshold_cannot_see() -> None:
    for seed in range(3):
        recorded, _ = _stream(seed)
        result = tune(
            recorded,
            delta=0.05,
            thresholds=THRESHOLDS,
            embeds=(EmbedMode.KEYWORD,),
            embedder=HashEmbedder(dim=256),
        )
        setting = result.choices["rate"].setting
        assert setting is not None, result.choices["rate"].why
        assert setting.lead_words == 2, setting.describe()
        # On a day it never saw: the lenient region is served, the strict one refused.
        unseen, kinds = _stream(100 + seed)
        shares = _served_near(result.config, unseen, kinds)
        assert shares["lenient"] >= 0.4, shares
        assert shares["strict"] <= 0.02, shares


def test_no_single_threshold_serves_the_lenient_region_and_refuses_the_strict_one() -> None:
    calls, kinds = _stream(7)
    for threshold in THRESHOLDS:
        shares = _served_near(CacheConfig(threshold=threshold), calls, kinds)
        assert shares["lenient"] < 0.4 or shares["strict"] > 0.02, (threshold, shares)
    shares = _served_near(CacheConfig(threshold=0.6, lead_words=2), calls, kinds)
    assert shares["lenient"] >= 0.4 and shares["strict"] <= 0.02, shares


def test_a_call_says_the_leading_words_refused_its_neighbour_and_a_repeat_is_served(
    tmp_path: Path,
) -> None:
    cache = SemanticCache(tmp_path / "cache", embedder=HashEmbedder()).with_config(
        threshold=0.5, lead_words=2
    )
    llm = CachedLLM(FakeOpenAI(lambda kwargs: kwargs["messages"][-1]["content"]), cache=cache)

    def ask(text: str) -> CallInfo:
        _, info = llm.chat.completions.create_with_info(
            model="m",
            messages=[{"role": "user", "content": f"Rate: {text}"}],
            cache=CacheOptions(category="rate", agent="Ada", keywords=[text]),
        )
        return info

    own = "conversing about Abigail Chen and Rajiv Patel discussing their projects"
    assert ask(own).outcome == "miss"
    # The same conversation told by another subject: close, and refused by its first words.
    other = ask(
        "Abigail Chen is conversing about Abigail Chen and Rajiv Patel discussing their projects"
    )
    assert other.outcome == "miss" and other.exact_refused == LEADING_WORDS
    # The same subject, another wording: served.
    assert ask("conversing about Abigail Chen and Rajiv Patel discussing projects").outcome == "hit"
    # The very same prompt: served.
    assert ask(own).outcome == "hit"
    (table,) = [t for t in cache.stats().tables if t.category == "rate"]
    assert table.exact_refused == {LEADING_WORDS: 1}
    assert "refused by leading words" in cache.stats().render()
    cache.close()


def test_leading_words_survive_a_configuration_file_and_bad_values_are_refused(
    tmp_path: Path,
) -> None:
    config = CacheConfig(categories={"rate": CategoryPolicy(threshold=0.88, lead_words=2)})
    again = CacheConfig.from_file(config.to_file(tmp_path / "tuned.json"))
    assert again.categories["rate"].lead_words == 2
    assert again.resolve(CacheOptions(category="rate")).lead_words == 2
    assert again.resolve(CacheOptions(category="other")).lead_words == 0
    for bad in (-1, 17):
        with pytest.raises(ValidationError):
            CacheConfig(lead_words=bad)
    (tmp_path / "bad.json").write_text('{"lead_words": "two"}')
    with pytest.raises(ConfigurationError):
        CacheConfig.from_file(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="lead_words"):
        tune(_stream(0)[0], lead_words=(0, 99), embedder=HashEmbedder(dim=64))
