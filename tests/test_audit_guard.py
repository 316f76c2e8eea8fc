"""The audit guard: serve from the first hit, audit a share, tighten what the audits show over
δ, by bounds that hold however often they are looked at."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from llmcache import CacheConfig, CachedLLM, CacheOptions, CategoryPolicy, Mode, SemanticCache
from llmcache._audit import audit_probability, excess_sequence, rate_sequence
from llmcache._budget import NO_HIT_THRESHOLD, Labels, audit_state, wilson_interval
from llmcache.testing import FakeOpenAI, HashEmbedder, scripted

MSGS = [{"role": "user", "content": "Rate the importance of: tree idle"}]


def _wrong_rate(cosine: float, bad_below: float, bad: float, good: float) -> float:
    return bad if cosine < bad_below else good


def _audited_stream(
    seed: int, budget: float, start: float, bad_below: float, bad: float, good: float, n: int
) -> dict[str, Any]:
    """A table under the audit guard on a stream of would-be hits whose best cosine is
    uniform in [start - 0.05, 1) and whose nearest entry is wrong with probability ``bad``
    under ``bad_below`` and ``good`` above it: what it served, how many were wrong, how many
    audits it paid before it tightened, and where it ended. The model is deterministic
    (no pairs), so the excess is the plain wrong-hit rate."""
    rng = random.Random(seed)
    labels = Labels()
    state = audit_state(labels, budget, start, samples=False)
    served = wrong = served_after = wrong_after = 0
    audits_to_tighten: int | None = None
    for _ in range(n):
        cosine = rng.uniform(start - 0.05, 1.0)
        is_wrong = rng.random() < _wrong_rate(cosine, bad_below, bad, good)
        if cosine < state.threshold:
            labels.add(cosine, not is_wrong)  # a miss labels its nearest entry for free
        elif rng.random() < audit_probability(labels.audits):
            labels.audits += 1
            labels.add(cosine, not is_wrong)
        else:
            served += 1
            wrong += is_wrong
            if audits_to_tighten is not None:
                served_after += 1
                wrong_after += is_wrong
            continue
        before = state.threshold
        state = audit_state(labels, budget, start, samples=False)
        if state.tightened:
            labels.shown_over = start  # as the book keeps it: caught stays caught
        if state.threshold > before and audits_to_tighten is None:
            audits_to_tighten = labels.audits
    return {
        "served": served,
        "wrong": wrong,
        "audits": labels.audits,
        "audits_to_tighten": audits_to_tighten,
        "threshold": state.threshold,
        "served_after": served_after,
        "wrong_after": wrong_after,
    }


def test_a_good_table_serves_from_its_first_would_be_hit_and_stays_open() -> None:
    out = _audited_stream(1, 0.05, 0.9, bad_below=0.0, bad=0.0, good=0.01, n=3000)
    assert out["threshold"] == 0.9 and out["audits_to_tighten"] is None
    # Audits are few once settled: START / (1 + audits) decays to the floor.
    assert out["served"] > 0.9 * 3000 * (1 - 0.05 / 0.15)  # the misses under 0.9 aside
    assert out["audits"] < 0.1 * 3000


@pytest.mark.parametrize("bad", [0.3, 0.5, 0.8])
def test_a_bad_table_tightens_within_a_bounded_number_of_audits(bad: float) -> None:
    # Under 0.95 its nearest entries are wrong 30-80% of the time, above it 1%: it must move
    # up from its start after (in the median over seeds) at most 60 audits, to where its
    # evidence keeps it within δ, and what it serves from then on is within δ.
    runs = [
        _audited_stream(seed, 0.05, 0.9, bad_below=0.95, bad=bad, good=0.01, n=2500)
        for seed in range(5)
    ]
    tightened = sorted(r["audits_to_tighten"] or 10**9 for r in runs)
    assert tightened[2] <= 60, runs
    for r in runs:
        if r["audits_to_tighten"] is not None:
            assert r["threshold"] >= 0.95, r
            assert r["wrong_after"] <= 0.05 * max(1, r["served_after"]) + 3, r


def test_a_table_wrong_everywhere_closes() -> None:
    out = _audited_stream(3, 0.05, 0.9, bad_below=2.0, bad=0.7, good=0.7, n=4000)
    assert out["threshold"] == NO_HIT_THRESHOLD


def test_the_rate_sequence_covers_the_true_rate_at_every_look_as_often_as_it_claims() -> None:
    # Re-tested after every outcome, over 300 outcomes: a bound valid only at one look would
    # miss the true rate in far more than 5% of streams (the proving guard's did).
    rng = random.Random(11)
    for rate in (0.02, 0.1, 0.3):
        missed = 0
        for _ in range(200):
            ones = 0
            for n in range(1, 301):
                ones += rng.random() < rate
                low, high = rate_sequence(ones, n, 0.05)
                if not low <= rate <= high:
                    missed += 1
                    break
        assert missed <= 0.05 * 200 + 4, (rate, missed)  # 5% and a binomial margin


def test_a_fixed_look_wilson_bound_misses_far_more_often_under_repeated_looks() -> None:
    # What the sequence is for: the same streams, looked at after every outcome with the
    # 95% Wilson interval, leave it far more often.
    rng = random.Random(11)
    missed = 0
    for _ in range(200):
        ones = 0
        for n in range(1, 301):
            ones += rng.random() < 0.1
            low, high = wilson_interval(ones, n)
            if not low <= 0.1 <= high:
                missed += 1
                break
    assert missed > 0.2 * 200


def test_a_sampling_models_excess_is_not_shown_over_before_its_pairs_bound_its_variability() -> (
    None
):
    # Deterministic: the wrong rate alone decides.
    assert excess_sequence(5, 100, 0, 0, 0.05, samples=False) == rate_sequence(5, 100, 0.05)
    # Sampling, no pairs yet: 60 wrong of 100 may all be the model's own variability.
    assert excess_sequence(60, 100, 0, 0, 0.05)[0] < 0.0
    # With pairs that show the model agreeing with itself, the same labels show it over.
    assert excess_sequence(60, 100, 0, 100, 0.05)[0] > 0.05
    low, high = excess_sequence(30, 100, 25, 100, 0.05)
    assert low < 0.05 < high  # 30% against the model's own 25%
    assert excess_sequence(0, 0, 1, 2, 0.05) == (-1.0, 1.0)


def _client(tmp_path: Path, responder: Any, **config: Any) -> CachedLLM:
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


def test_the_audit_guard_serves_from_the_first_hit_and_audits_apart_from_exploring(
    tmp_path: Path,
) -> None:
    client = _client(tmp_path, scripted(["3"] * 40), guard="audit", explore_seed=2)
    _ask(client, ["tree idle"], mode=Mode.COLLECT)
    infos = [_ask(client, ["tree idle"])[1] for _ in range(30)]
    # The first would-be hits are audited (START / (1 + audits) is 1 for the first two), then
    # most are served at the table's own threshold.
    assert all(i.audited and i.outcome == "miss" for i in infos[:2])
    assert not any(i.explored for i in infos)
    assert sum(i.outcome == "hit" for i in infos) >= 15
    assert sum(i.audited for i in infos) < 15
    assert all(i.guard == "audit" and i.wrong_hit_budget == 0.05 for i in infos)
    assert infos[0].audit_tokens > 0 and infos[0].label is True
    stats = client.cache.stats().tables[0]
    assert stats.guard == "audit" and stats.audits == sum(i.audited for i in infos)
    assert stats.audit_usd == pytest.approx(sum(i.audit_usd for i in infos))
    assert stats.threshold_in_force == 0.9 and stats.threshold_source == "start"
    assert "audit" in client.cache.stats().render()


def test_the_audit_guard_tightens_a_table_whose_audits_disagree(tmp_path: Path) -> None:
    # The LLM answers each prompt one way, but "tree idle" and "tree idle!" (near-identical,
    # cosine over 0.9) another: the model never disagrees with itself, yet a cached answer of
    # the one is wrong for the other. The audits show it, and the table stops serving across.
    def answer(request: dict[str, Any]) -> str:
        return "7" if request["messages"][0]["content"].endswith("!") else "3"

    client = _client(tmp_path, answer, guard="audit", explore_seed=1)
    infos = []
    for n in range(80):
        words = "tree idle" if n % 2 else "tree idle!"
        # temperature=0: a deterministic request, whose model never disagrees with itself, so
        # the audits' wrong rate alone decides (a sampling one needs pairs first: see above).
        response, info = client.chat.completions.create_with_info(
            model="m",
            temperature=0,
            messages=[{"role": "user", "content": f"Rate the importance of: {words}"}],
            cache=CacheOptions(category="importance", agent="Liam", keywords=[words]),
        )
        infos.append((words, response.choices[0].message.content, info))
    stats = client.cache.stats().tables[0]
    assert stats.threshold_in_force is not None and stats.threshold_in_force > 0.9
    assert stats.threshold_source == "tightened" or stats.closed
    assert stats.excess_ci is not None and stats.excess_ci[0] > 0.05
    # Once tightened, nothing served is another prompt's answer.
    late = infos[-20:]
    assert all(content == ("7" if words.endswith("!") else "3") for words, content, _ in late)


def test_guards_resolve_category_over_cache_and_a_budget_alone_is_the_proving_guard() -> None:
    options = CacheOptions(category="importance", keywords=["x"])
    assert CacheConfig().resolve(options).guard == "off"
    assert CacheConfig(wrong_hit_budget=0.02).resolve(options).guard == "prove"
    audit = CacheConfig(guard="audit").resolve(options)
    assert (audit.guard, audit.wrong_hit_budget) == ("audit", 0.05)
    per_category = CacheConfig(
        wrong_hit_budget=0.02, categories={"importance": CategoryPolicy(guard="off")}
    ).resolve(options)
    assert (per_category.guard, per_category.wrong_hit_budget) == ("off", None)
    assert CacheConfig(guard="audit", threshold=0.85).guard_for("x") == ("audit", 0.05, 0.85)
