"""The wrong-hit budget: the estimator, exploration, labels, feedback, persistence, stats."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmcache import CacheConfig, CachedLLM, CacheOptions, CategoryPolicy, Mode, SemanticCache
from llmcache._budget import (
    EXACT_THRESHOLD,
    NO_HIT_THRESHOLD,
    STRICT_THRESHOLD,
    Labels,
    explore_probability,
    learned_threshold,
    proven_threshold,
    wilson_interval,
)
from llmcache._ledger import info_stats_key
from llmcache.errors import ConfigurationError
from llmcache.testing import FakeOpenAI, HashEmbedder, scripted
from llmcache.verification import same_answer

MSGS = [{"role": "user", "content": "Rate the importance of: tree idle"}]


def _stream(seed: int, budget: float, worst: float, power: float, n: int) -> tuple[int, int]:
    """A stream of lookups whose best cosine is uniform in [0.6, 1) and whose nearest entry is
    wrong with the known probability ``worst * ((1 - cos) / 0.4) ** power``, labelled as the
    cache labels it: every miss for free, would-be hits when explored (all of them until a
    threshold is proven). Returns the served hits, from the first, and how many were wrong."""
    rng = random.Random(seed)
    labels = Labels()
    threshold = learned_threshold(labels, budget)
    hits = wrong = 0
    for _ in range(n):
        cosine = rng.uniform(0.6, 1.0)
        is_wrong = rng.random() < worst * ((1.0 - cosine) / 0.4) ** power
        proven = proven_threshold(labels, budget) is not None
        if cosine >= threshold and rng.random() >= explore_probability(
            labels.explored, proven=proven
        ):
            hits += 1
            wrong += is_wrong
            continue
        if cosine >= threshold:
            labels.explored += 1
        labels.add(cosine, not is_wrong)
        threshold = learned_threshold(labels, budget)
    return hits, wrong


@settings(max_examples=12, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**31),
    budget=st.sampled_from([0.01, 0.02, 0.05]),
    worst=st.floats(0.3, 0.9),
    power=st.floats(1.0, 3.0),
)
def test_learned_threshold_keeps_the_observed_wrong_rate_within_the_budget(
    seed: int, budget: float, worst: float, power: float
) -> None:
    hits, wrong = _stream(seed, budget, worst, power, n=3000)
    # Every hit counts, the first included: nothing is served before labels prove it. (A
    # stream too noisy to prove any threshold serves none, which keeps the budget too.)
    low, _ = wilson_interval(wrong, hits)
    assert low <= budget, (hits, wrong)


def test_a_stream_whose_near_prompts_agree_earns_its_hits() -> None:
    # The budget serves hits, not only misses, once near prompts prove to agree (a proof
    # valid however often it is re-tested needs some 230 right labels at δ = 0.05, 600 at 0.02).
    for budget in (0.02, 0.05):
        hits, wrong = _stream(1, budget, worst=0.3, power=3.0, n=6000)
        assert hits > 300 and wrong / hits <= budget, (budget, hits, wrong)


def test_a_static_threshold_on_the_same_stream_breaks_the_budget() -> None:
    # The property above can fail: a fixed 0.8 on this stream serves far more wrong hits.
    rng = random.Random(1)
    draws = [rng.uniform(0.6, 1.0) for _ in range(3000)]
    served = [c for c in draws if c >= 0.8]
    wrong = sum(rng.random() < 0.6 * ((1.0 - c) / 0.4) ** 1.5 for c in served)
    assert wilson_interval(wrong, len(served))[0] > 0.02


def test_few_labels_stay_strict_and_clear_wrongs_go_exact() -> None:
    labels = Labels()
    assert learned_threshold(labels, 0.02) == STRICT_THRESHOLD
    for _ in range(20):
        labels.add(0.99, True)
    assert learned_threshold(labels, 0.02) == STRICT_THRESHOLD  # 20 right: not yet proof
    for _ in range(700):
        labels.add(0.91, True)
    assert learned_threshold(labels, 0.02) == pytest.approx(0.91)
    bad = Labels()
    for ok in [False, False, False, True]:
        bad.add(0.99, ok)
    assert learned_threshold(bad, 0.02) == EXACT_THRESHOLD


def test_answers_that_disagree_even_on_identical_prompts_stop_every_hit() -> None:
    # An LLM that samples answers its own prompt differently: even at cosine 1 the cached
    # answer disagrees with a fresh one too often, so serving any hit would break the budget.
    noisy = Labels()
    for ok in [False, False, True, False, False, True]:
        noisy.add(1.0, ok)
    assert learned_threshold(noisy, 0.05) == NO_HIT_THRESHOLD > 1.0
    # Evidence the other way (from later misses) earns the exact repeats back.
    for _ in range(60):
        noisy.add(1.0, True)
    assert learned_threshold(noisy, 0.05) == STRICT_THRESHOLD


def test_labels_above_a_threshold_between_bin_edges_do_not_count_the_bin_below() -> None:
    labels = Labels()
    labels.add(0.9001, False)
    labels.add(0.9049, True)
    assert labels.above(0.9) == (2, 1)
    assert labels.above(0.902) == (0, 0)


def test_same_answer_compares_json_values_then_texts() -> None:
    assert same_answer('{"a": 1, "b": [2]}', '{"b":[2],"a":1}')
    assert not same_answer('{"a": 1}', '{"a": 2}')
    assert same_answer("Go to  the Cafe", "go to the cafe")
    assert not same_answer("cafe", "park")


def _client(tmp_path: Path, responder: Any, **config: Any) -> CachedLLM:
    # No twins unless a test asks: these tests count the LLM's calls (tests/test_relative.py
    # has the twins' own).
    config = {"twin_rate": 0.0, **config}
    cache = SemanticCache(
        tmp_path / "c",
        embedder=HashEmbedder(dim=64),
        config=CacheConfig(**{"serve_identical": False, **config}),
    )
    return CachedLLM(FakeOpenAI(responder), cache=cache)


def _ask(client: CachedLLM, keywords: list[str], **options: Any) -> tuple[str, Any]:
    response, info = client.chat.completions.create_with_info(
        model="m",
        messages=MSGS,
        cache=CacheOptions(category="importance", agent="Liam", keywords=keywords, **options),
    )
    return response.choices[0].message.content, info


def test_a_would_be_hit_is_explored_the_paid_answer_served_and_labelled(tmp_path: Path) -> None:
    client = _client(tmp_path, scripted(["3", "3", "7"]), wrong_hit_budget=0.02)
    _ask(client, ["tree idle"], mode=Mode.COLLECT)
    # Until labels prove a threshold, every would-be hit of a table is explored.
    content, info = _ask(client, ["tree idle"])
    assert (info.outcome, info.explored, info.label, content) == ("miss", True, True, "3")
    assert info.explore_tokens > 0 and info.threshold == STRICT_THRESHOLD
    content, info = _ask(client, ["tree idle"])
    assert (info.explored, info.label, content) == (True, False, "7")  # the paid answer
    stats = client.cache.stats().tables[0]
    assert (stats.labels, stats.labels_wrong, stats.explored) == (2, 1, 2)
    assert stats.explore_tokens == info.explore_tokens * 2


def test_a_seeded_cache_explores_the_same_calls_again(tmp_path: Path) -> None:
    def explored(path: Path, seed: int | None) -> list[bool]:
        client = _client(path, scripted(["3"] * 200), wrong_hit_budget=0.2, explore_seed=seed)
        _ask(client, ["tree idle"], mode=Mode.COLLECT)
        # Once labels prove a threshold (some fifty right ones under δ = 0.2), each would-be
        # hit is a draw.
        out = [_ask(client, ["tree idle"])[1].explored for _ in range(100)]
        client.close()
        return out

    first = explored(tmp_path / "a", seed=7)
    assert first == explored(tmp_path / "b", seed=7)
    assert first[:5] == [True] * 5 and not all(first)
    others = [explored(tmp_path / f"s{seed}", seed=seed) for seed in (1, 2, 3)]
    assert any(o != first for o in others)  # the seed decides, not the stream alone


def test_a_table_whose_near_prompts_disagree_more_than_the_model_stops_hitting(
    tmp_path: Path,
) -> None:
    # The LLM answers each prompt one way, but "tree idle" and "tree idle!" (near-identical,
    # cosine over 0.97) another: a cached answer of the one is wrong for the other although
    # the model never disagrees with itself, so under δ = 0.05 only exact repeats stay.
    def answer(request: dict[str, Any]) -> str:
        return "7" if request["messages"][0]["content"].endswith("!") else "3"

    client = _client(tmp_path, answer, wrong_hit_budget=0.05)
    seen = []
    for n in range(30):
        words = "tree idle" if n % 2 else "tree idle!"
        _, info = _client_ask(client, words)
        seen.append(info)
    assert not any(i.outcome == "hit" for i in seen)
    stats = client.cache.stats().tables[0]
    # Its pairs (labels whose entry answered the very same prompt) show the model agreeing
    # with itself; its labels show near prompts disagreeing: the excess is proven over δ.
    assert stats.self_disagreement == 0.0 and stats.pairs >= 5
    assert stats.excess_ci is not None and stats.excess_ci[0] > 0.05
    assert stats.threshold_in_force in (EXACT_THRESHOLD, NO_HIT_THRESHOLD)


def _client_ask(client: CachedLLM, words: str) -> tuple[str, Any]:
    response, info = client.chat.completions.create_with_info(
        model="m",
        messages=[{"role": "user", "content": f"Rate the importance of: {words}"}],
        cache=CacheOptions(category="importance", agent="Liam", keywords=[words]),
    )
    return response.choices[0].message.content, info


def test_no_hit_is_served_before_labels_prove_a_threshold(tmp_path: Path) -> None:
    # The LLM always answers alike, but a table proves it only with labels: under δ = 0.2 its
    # confidence sequence needs some forty right labels before the first hit is served. Every
    # label lies in the top bin, so the descent from the configured 0.9 stops at once (its
    # bin is empty) and the edges above it are tried instead.
    client = _client(tmp_path, scripted(["3"] * 150), wrong_hit_budget=0.2, explore_seed=1)
    _ask(client, ["tree idle"], mode=Mode.COLLECT)
    infos = [_ask(client, ["tree idle"])[1] for _ in range(80)]
    first_hit = next(n for n, i in enumerate(infos) if i.outcome == "hit")
    assert first_hit >= 40
    assert all(i.explored and i.label is True for i in infos[:first_hit])
    labels = client.cache.budget.labels(info_stats_key(infos[0]))
    assert proven_threshold(labels, 0.2, start=0.9) == pytest.approx(0.995)
    assert explore_probability(100, proven=False) == 1.0 > explore_probability(100)


def test_an_explored_hit_whose_llm_answer_never_validates_serves_the_cached_one(
    tmp_path: Path,
) -> None:
    client = _client(tmp_path, scripted(["3", "12"]), wrong_hit_budget=0.02, max_attempts=2)
    _ask(client, ["tree idle"], mode=Mode.COLLECT)

    def one_to_ten(text: str) -> str:
        if not 1 <= int(text) <= 10:
            raise ValueError("out of range")
        return text

    # The would-be hit is explored; the LLM answers 12, twice: invalid. The cached 3 is served.
    content, info = _ask(client, ["tree idle"], validator=one_to_ten)
    assert (content, info.outcome, info.explored, info.label) == ("3", "hit", True, None)
    assert info.explore_tokens > 0 and info.cost_usd > 0  # the exploration was paid for
    assert client.cache.stats().tables[0].labels == 0  # and taught nothing


def test_a_miss_labels_its_nearest_entry_for_free(tmp_path: Path) -> None:
    fake_answers = scripted(["3", "3"])
    client = _client(tmp_path, fake_answers, wrong_hit_budget=0.02)
    _ask(client, ["tree idle in the park"], mode=Mode.COLLECT)
    calls_before = len(client._client.calls)  # type: ignore[attr-defined]
    _, info = _ask(client, ["tree idle in the garden"])
    assert info.outcome == "miss" and not info.explored
    assert info.similarity is not None and 0.5 <= info.similarity.cosine < STRICT_THRESHOLD
    assert info.label is True  # same answer: the nearest entry would have been right
    assert len(client._client.calls) == calls_before + 1  # type: ignore[attr-defined]


def test_without_a_budget_nothing_is_labelled_or_explored(tmp_path: Path) -> None:
    client = _client(tmp_path, scripted(["3"]))
    _ask(client, ["tree idle"], mode=Mode.COLLECT)
    _, info = _ask(client, ["tree idle"])
    assert (info.outcome, info.explored, info.label) == ("hit", False, None)
    assert "wrong-hit budget" not in client.cache.stats().render()


def test_a_served_answer_that_fails_validation_is_a_wrong_label(tmp_path: Path) -> None:
    client = _client(tmp_path, scripted(["3", "12"]), wrong_hit_budget=0.02)
    _ask(client, ["tree idle"], mode=Mode.COLLECT)

    def only_twelve(text: str) -> str:
        if text != "12":
            raise ValueError("not 12")
        return text

    content, info = _ask(client, ["tree idle"], validator=only_twelve)
    assert (content, info.label, info.explored) == ("12", False, False)


def test_feedback_labels_a_hit_and_moves_the_learned_threshold(tmp_path: Path) -> None:
    client = _client(tmp_path, scripted(["3"]))
    _ask(client, ["tree idle"], mode=Mode.COLLECT)
    _, hit = _ask(client, ["tree idle"])
    assert hit.outcome == "hit"
    client.cache.feedback(hit, ok=False)
    stats = client.cache.stats().tables[0]
    assert (stats.labels, stats.labels_wrong) == (1, 1)
    _, miss = _ask(client, ["alice bakes bread"])
    with pytest.raises(ConfigurationError, match="feedback is for hits"):
        client.cache.feedback(miss, ok=True)
    key = info_stats_key(hit)
    # One wrong label of one at cosine 1.0: even the strict threshold is over budget.
    assert client.cache.budget.threshold(key, 0.05) > 0.99999
    lower = hit.model_copy(
        update={
            "similarity": hit.similarity.model_copy(  # type: ignore[union-attr]
                update={"cosine": 0.92}
            )
        }
    )
    for _ in range(400):
        client.cache.feedback(lower, ok=True)
    assert client.cache.budget.threshold(key, 0.05) == pytest.approx(0.92)


def test_labels_survive_reopening(tmp_path: Path) -> None:
    client = _client(tmp_path, scripted(["3"]), wrong_hit_budget=0.05)
    _ask(client, ["tree idle"], mode=Mode.COLLECT)
    _, info = _ask(client, ["tree idle"])
    key = info_stats_key(info)
    for ok in [True] * 400 + [False]:
        client.cache.budget.add(key, 0.95, ok)
    learned = client.cache.budget.threshold(key, 0.05)
    before = client.cache.budget.labels(key)
    assert learned < STRICT_THRESHOLD
    client.cache.close()
    reopened = SemanticCache(
        tmp_path / "c",
        embedder=HashEmbedder(dim=64),
        config=CacheConfig(wrong_hit_budget=0.05, serve_identical=False),
    )
    try:
        after = reopened.budget.labels(key)
        assert (after.ok, after.bad, after.explored) == (before.ok, before.bad, before.explored)
        assert reopened.budget.threshold(key, 0.05) == learned
    finally:
        reopened.close()


def test_stats_show_the_budget_threshold_and_interval(tmp_path: Path) -> None:
    client = _client(
        tmp_path,
        scripted(["3"]),
        categories={"importance": CategoryPolicy(wrong_hit_budget=0.05)},
    )
    _ask(client, ["tree idle"], mode=Mode.COLLECT)
    _, info = _ask(client, ["tree idle"])
    assert info.wrong_hit_budget == 0.05 and info.explored
    key = info_stats_key(info)
    for ok in [True] * 99 + [False]:
        client.cache.budget.add(key, 0.93, ok)
    table = client.cache.stats().tables[0]
    assert table.wrong_hit_budget == 0.05
    # Read from the configured threshold (0.9), as a call reads it.
    assert table.threshold_in_force == client.cache.budget.threshold(key, 0.05, start=0.9)
    assert table.labels == 101 and table.labels_wrong == 1
    assert table.wrong_rate is not None and table.wrong_rate_ci is not None
    low, high = table.wrong_rate_ci
    assert low <= table.wrong_rate <= high
    assert table.labels_in_force >= 1
    rendered = client.cache.stats().render()
    assert "wrong-hit budget" in rendered and "0.050" in rendered


def test_budgets_resolve_call_over_category_over_cache() -> None:
    config = CacheConfig(
        wrong_hit_budget=0.05, categories={"plan": CategoryPolicy(wrong_hit_budget=0.01)}
    )
    assert config.resolve(CacheOptions(category="other")).wrong_hit_budget == 0.05
    assert config.resolve(CacheOptions(category="plan")).wrong_hit_budget == 0.01
    call = CacheOptions(category="plan", wrong_hit_budget=0.02)
    assert config.resolve(call).wrong_hit_budget == 0.02
    assert CacheConfig().resolve(CacheOptions(category="x")).wrong_hit_budget is None
    with pytest.raises(ValueError):
        CacheOptions(category="x", wrong_hit_budget=1.5)


def test_a_callers_equivalence_decides_the_label(tmp_path: Path) -> None:
    client = _client(tmp_path, scripted(["3", "three"]), wrong_hit_budget=0.02)
    _ask(client, ["tree idle"], mode=Mode.COLLECT)
    words = {"3": "three"}

    def same_number(cached: str, fresh: str) -> bool:
        return words.get(cached, cached) == words.get(fresh, fresh)

    _, info = _ask(client, ["tree idle"], equivalence=same_number)
    assert info.explored and info.label is True


def test_labels_are_kept_in_every_backend(make_backend: Any) -> None:
    # Labels are table counters: what one cache writes, another opened on the same store reads
    # (the directory and the database alike).
    backend = make_backend()
    first = SemanticCache(backend, embedder=HashEmbedder(dim=64))
    key = '["importance", "Liam", "m", "k"]'
    for ok in [True] * 90 + [False] * 2:
        first.budget.add(key, 0.93, ok)
    first.ledger.flush()
    second = SemanticCache(backend, embedder=HashEmbedder(dim=64))
    labels = second.budget.labels(key)
    assert (labels.count, labels.wrong) == (92, 2)
    assert second.budget.threshold(key, 0.2) == pytest.approx(0.93)
    # A table's labels of verified yeses are a stream of their own, kept apart from its labels
    # and stored the same way.
    for ok in [True] * 5 + [False] * 5:
        first.budget.add(key, 0.85, ok, "verified")
    first.ledger.flush()
    third = SemanticCache(backend, embedder=HashEmbedder(dim=64))
    verified = third.budget.labels(key, "verified")
    assert (verified.count, verified.wrong) == (10, 5)
    assert third.budget.labels(key).count == 92
    assert third.budget.threshold(key, 0.2, "verified") == STRICT_THRESHOLD  # not proven
