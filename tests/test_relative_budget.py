"""The wrong-hit budget relative to the model's own variability: the excess bound, streams with a
known self-disagreement, the deterministic case, pooling across a template's tables, twins and
variety."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from llmcache import CacheConfig, CachedLLM, CacheOptions, Mode, SemanticCache
from llmcache._audit import rate_sequence
from llmcache._budget import (
    N_BINS,
    PROVE_ALPHA,
    STRICT_THRESHOLD,
    TWIN_MIN,
    Labels,
    decide,
    excess_interval,
    explore_probability,
    paired_excess_interval,
    pairs_wanted,
    wilson_interval,
)
from llmcache.testing import FakeOpenAI, HashEmbedder

Z_ONE_SIDED = 1.6449


# -- the bound ------------------------------------------------------------------------------------


def test_the_paired_excess_interval() -> None:
    # A second answer never wrong earns no credit: the served rate's own interval.
    assert paired_excess_interval(0, 3, 0, 37) == wilson_interval(3, 40)
    assert paired_excess_interval(0, 0, 0, 0) == (-1.0, 1.0)
    # Hard queries both get wrong: the paired interval is narrower than the unpaired one
    # over the same rates, and holds the difference.
    both, served_only, second_only, neither = 30, 6, 4, 160
    n = both + served_only + second_only + neither
    low, high = paired_excess_interval(both, served_only, second_only, neither)
    diff = (served_only - second_only) / n
    assert low < diff < high
    u_low, u_high = excess_interval(both + served_only, n, both + second_only, n)
    assert u_low < low and high < u_high
    # Opposite answers (one right exactly where the other is wrong) widen it instead.
    w_low, w_high = paired_excess_interval(0, 36, 34, 130)
    assert w_high - w_low > u_high - u_low
    assert w_low >= -1.0 and w_high <= 1.0


def test_without_pairs_the_excess_interval_is_the_wrong_rates_own() -> None:
    assert excess_interval(3, 40, 0, 0) == wilson_interval(3, 40)
    # Pairs that never disagree give no credit either: a deterministic model's interval.
    assert excess_interval(3, 40, 0, 25) == wilson_interval(3, 40)
    # Once the model has disagreed with itself, its rate's uncertainty widens both ends.
    low, high = excess_interval(3, 40, 1, 25)
    assert low < wilson_interval(3, 40)[0] - 0.04 and high < wilson_interval(3, 40)[1]
    assert excess_interval(0, 0, 5, 10) == (-1.0, 1.0)


def test_the_excess_interval_covers_the_true_difference_as_often_as_it_claims() -> None:
    # One-sided 95%: the upper end lies under the true difference at most ~5% of the time.
    rng = random.Random(3)
    for p1, p0, n1, n0 in [(0.45, 0.40, 200, 200), (0.2, 0.15, 80, 300), (0.6, 0.5, 500, 100)]:
        misses = 0
        trials = 600
        for _ in range(trials):
            wrong = sum(rng.random() < p1 for _ in range(n1))
            differ = sum(rng.random() < p0 for _ in range(n0))
            high = excess_interval(wrong, n1, differ, n0, Z_ONE_SIDED)[1]
            misses += high < p1 - p0
        assert misses / trials <= 0.07, (p1, p0, misses)


# -- streams with a known self-disagreement ------------------------------------------------------


def _relative_stream(
    seed: int, budget: float, disagree: float, worst: float, power: float, n: int
) -> tuple[int, int]:
    """Lookups whose best cosine is uniform in [0.6, 1), whose nearest entry's answer is not
    acceptable with probability ``disagree + worst * ((1 - cos) / 0.4) ** power`` (the model's
    own disagreement plus an excess that grows as prompts drift apart), labelled as the cache
    labels them; a quarter of the misses are asked twice while pairs are wanted (a pair differs
    with probability ``disagree``). Returns the served hits and how many were not acceptable."""
    rng = random.Random(seed)
    labels = Labels()
    hits = wrong = 0
    for _ in range(n):
        decision = decide(labels, budget)
        cosine = rng.uniform(0.6, 1.0)
        bad = rng.random() < disagree + worst * ((1.0 - cosine) / 0.4) ** power
        if cosine >= decision.threshold and rng.random() >= explore_probability(
            labels.explored, proven=decision.proven
        ):
            hits += 1
            wrong += bad
            continue
        if cosine >= decision.threshold:
            labels.explored += 1
        elif pairs_wanted(labels, labels.above(STRICT_THRESHOLD)[0]) and rng.random() < 0.25:
            labels.add_pair(rng.random() >= disagree)
        labels.add(cosine, not bad)
    return hits, wrong


@settings(max_examples=10, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**31),
    budget=st.sampled_from([0.05, 0.1]),
    disagree=st.floats(0.05, 0.45),
    worst=st.floats(0.2, 0.6),
    power=st.floats(1.0, 3.0),
)
def test_the_observed_excess_stays_within_the_budget(
    seed: int, budget: float, disagree: float, worst: float, power: float
) -> None:
    hits, wrong = _relative_stream(seed, budget, disagree, worst, power, n=4000)
    # Every hit counts, the first included. The excess observed: the served answers' wrong
    # rate over the model's known own rate; within δ up to the interval of what was seen.
    low, _ = wilson_interval(wrong, hits)
    assert low - disagree <= budget, (hits, wrong)


def test_a_model_that_disagrees_with_itself_still_earns_hits() -> None:
    # 30% wrong at 30% self-disagreement: an absolute budget of 0.1 could never serve; the
    # excess can, once the pairs bound the model's own rate from below.
    rng = random.Random(5)
    labels = Labels()
    for _ in range(3000):
        labels.add(rng.uniform(0.97, 1.0), rng.random() >= 0.3)
    assert not decide(labels, 0.1).proven
    labels.pairs_same, labels.pairs_differ = 1400, 600
    assert decide(labels, 0.1).proven


def test_the_absolute_rule_serves_nothing_on_the_same_stream() -> None:
    # The same stream without pairs: no credit for the model's variability, so no threshold
    # is ever proven under 0.1 (the wrong rate never goes under 0.3).
    rng = random.Random(5)
    labels = Labels()
    for _ in range(4000):
        cosine = rng.uniform(0.6, 1.0)
        labels.add(cosine, rng.random() >= 0.3 + 0.4 * ((1.0 - cosine) / 0.4) ** 3)
    assert not decide(labels, 0.1).proven


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**31),
    budget=st.sampled_from([0.01, 0.02, 0.05, 0.1]),
    pairs=st.integers(0, 200),
)
def test_a_deterministic_model_gets_exactly_the_plain_wrong_hit_budget(
    seed: int, budget: float, pairs: int
) -> None:
    # Self-disagreement 0 (no pairs, or pairs that all agree): the threshold is the one the
    # plain rule gives, the lowest labelled edge whose wrong rate's confidence sequence (at
    # the proving guard's level, split over the edges and the two rates) lies within δ.
    rng = random.Random(seed)
    labels = Labels()
    for _ in range(rng.randint(0, 3000)):
        cosine = rng.uniform(0.5, 1.0)
        labels.add(cosine, rng.random() >= 0.5 * ((1.0 - cosine) / 0.5) ** 2)
    labels.pairs_same = pairs
    plain = None
    n = wrong = 0
    for index in range(N_BINS - 1, -1, -1):
        here = labels.ok[index] + labels.bad[index]
        n, wrong = n + here, wrong + labels.bad[index]
        if here and rate_sequence(wrong, n, PROVE_ALPHA / N_BINS / 2)[1] <= budget:
            plain = round(0.5 + index * 0.005, 6)
    decision = decide(labels, budget)
    assert (decision.threshold if decision.proven else None) == plain


# -- pooling --------------------------------------------------------------------------------------


def _labels(rng: random.Random, n: int, disagree: float, excess: float) -> Labels:
    labels = Labels()
    for _ in range(n):
        labels.add(rng.uniform(0.97, 1.0), rng.random() >= disagree + excess)
    return labels


def _pool(tables: list[Labels], pairs: tuple[int, int]) -> Labels:
    pool = Labels()
    for table in tables:
        pool.ok = [a + b for a, b in zip(pool.ok, table.ok, strict=True)]
        pool.bad = [a + b for a, b in zip(pool.bad, table.bad, strict=True)]
    pool.pairs_same, pool.pairs_differ = pairs
    return pool


def test_a_template_pools_its_evidence_and_holds_back_its_bad_table() -> None:
    rng = random.Random(11)
    # Seven agents' tables of one template whose near answers are as good as the model's own
    # second answers (20% disagreement), and one whose are far worse.
    good = [_labels(rng, 200, 0.2, 0.0) for _ in range(7)]
    bad = _labels(rng, 200, 0.2, 0.45)
    pool = _pool([*good, bad], pairs=(1600, 400))
    for table in good:
        alone = decide(table, 0.15, pairs=pool)
        pooled = decide(table, 0.15, pool)
        assert pooled.proven and pooled.threshold <= 0.975
        assert not alone.proven or alone.threshold >= pooled.threshold
    # The bad table's own labels show it over budget: the pool does not open it.
    held = decide(bad, 0.15, pool)
    assert not held.proven
    assert held.threshold > 1.0 - 1e-5  # exact repeats at most, or closed
    # A newcomer with no labels of its own borrows the pool's proof at once.
    assert decide(Labels(), 0.15, pool).source == "pool"
    # And pooling is what opens most of them: alone, most are not proven yet.
    assert sum(decide(t, 0.15, pairs=pool).proven for t in good) <= 3


def _agent_client(tmp_path: Path, answer: Any, **config: Any) -> CachedLLM:
    cache = SemanticCache(
        tmp_path / "c",
        embedder=HashEmbedder(dim=64),
        config=CacheConfig(
            **{"twin_rate": 0.0, "explore_seed": 3, "serve_identical": False, **config}
        ),
    )
    return CachedLLM(FakeOpenAI(answer), cache=cache)


def _ask(client: CachedLLM, agent: str, words: str, **options: Any) -> tuple[str, Any]:
    response, info = client.chat.completions.create_with_info(
        model="m",
        messages=[{"role": "user", "content": f"Rate the importance of: {words}"}],
        cache=CacheOptions(category="importance", agent=agent, keywords=[words], **options),
    )
    return response.choices[0].message.content, info


def _first_hit_after(client: CachedLLM, agent: str) -> int:
    _ask(client, agent, "tree idle", mode=Mode.COLLECT)
    for n in range(200):
        if _ask(client, agent, "tree idle")[1].outcome == "hit":
            return n
    return 200


def test_a_second_agent_serves_at_once_on_its_templates_pooled_evidence(tmp_path: Path) -> None:
    pooled = _agent_client(tmp_path / "pooled", lambda request: "3", wrong_hit_budget=0.2)
    alone = _agent_client(
        tmp_path / "alone", lambda request: "3", wrong_hit_budget=0.2, pool_evidence=False
    )
    # Liam's table proves the template's threshold; Mary's table then needs (almost) none of
    # its own labels, where without pooling it would need as many as Liam's.
    assert _first_hit_after(pooled, "Liam") == _first_hit_after(alone, "Liam") >= 10
    assert _first_hit_after(pooled, "Mary") <= 1 < _first_hit_after(alone, "Mary")
    stats = {t.agent: t for t in pooled.cache.stats().tables}
    assert set(stats) == {"Liam", "Mary"}  # the pool is evidence, not a table
    assert stats["Mary"].threshold_source == "pool"
    assert stats["Mary"].pool_labels >= stats["Liam"].labels


def test_pooled_answers_never_cross_tables(tmp_path: Path) -> None:
    client = _agent_client(tmp_path, lambda request: "3", wrong_hit_budget=0.2, variety=False)
    _first_hit_after(client, "Liam")
    # Mary shares Liam's evidence but not his answers: her first ask is a miss.
    _, info = _ask(client, "Mary", "tree idle")
    assert info.outcome == "miss" and info.similarity is None


# -- twins ----------------------------------------------------------------------------------------

# Prompts far apart (no two share a word), so that every one is a plain miss.
_WORDS = [f"w{n}a w{n}b w{n}c" for n in range(60)]


def test_a_sampled_share_of_misses_is_asked_twice_and_measures_the_model(tmp_path: Path) -> None:
    answers = iter(["3", "7"] * 200)
    client = _agent_client(
        tmp_path, lambda request: next(answers), wrong_hit_budget=0.05, twin_rate=1.0
    )
    infos = [_ask(client, "Liam", _WORDS[n])[1] for n in range(TWIN_MIN + 5)]
    twins = [i for i in infos if i.twin]
    assert len(twins) >= TWIN_MIN
    assert all(i.pair is False for i in twins)  # 3 then 7: the model disagreed with itself
    assert all(i.twin_tokens > 0 and i.twin_usd >= 0 for i in twins)
    assert all(i.usage.total_tokens > i.twin_tokens for i in twins)  # inside the call's spend
    stats = client.cache.stats().tables[0]
    assert stats.twins == len(twins) and stats.self_disagreement == 1.0
    assert stats.self_disagreement_ci is not None and stats.self_disagreement_ci[0] > 0.8
    # Both answers of a twinned miss are stored: two entries for that prompt.
    (partition,) = client.cache.partitions()
    assert len(client.cache.entries(partition.key)) == len(infos) + len(twins)


def test_a_seeded_miss_is_twinned_with_another_seed(tmp_path: Path) -> None:
    # A seeded model repeats itself at one seed: the twin asked at the answer's own seed would
    # measure no variability at all. It is asked at the next seed after the accepted answer's.
    fake = FakeOpenAI(lambda request: str(request["seed"] % 10))
    cache = SemanticCache(
        tmp_path / "c",
        embedder=HashEmbedder(dim=64),
        config=CacheConfig(
            wrong_hit_budget=0.05, twin_rate=1.0, explore_seed=3, serve_identical=False
        ),
    )
    client = CachedLLM(fake, cache=cache)
    _, info = client.chat.completions.create_with_info(
        model="m",
        messages=[{"role": "user", "content": "Rate the importance of: tree idle"}],
        seed=40,
        cache=CacheOptions(category="importance", agent="Liam", keywords=["tree idle"]),
    )
    assert info.twin and info.pair is False
    assert [c["seed"] for c in fake.calls] == [40, 41]


def test_an_explored_hit_is_twinned_unless_it_already_made_a_pair(tmp_path: Path) -> None:
    client = _agent_client(tmp_path, lambda request: "3", wrong_hit_budget=0.05, twin_rate=1.0)
    _ask(client, "Liam", "tree idle")
    # The same keywords in other words: a would-be hit, explored, whose cached answer was for
    # another prompt. Its comparison is a label, not a pair, so it is asked twice.
    _, info = client.chat.completions.create_with_info(
        model="m",
        messages=[{"role": "user", "content": "How important is this: tree idle"}],
        cache=CacheOptions(category="importance", agent="Liam", keywords=["tree idle"]),
    )
    assert info.explored and info.label is True and info.twin and info.pair is True
    # The very same prompt again: explored, and its comparison is already a pair.
    _, info = _ask(client, "Liam", "tree idle")
    assert info.explored and info.pair is True and not info.twin


def test_twins_stop_once_pairs_that_never_disagree_are_enough(tmp_path: Path) -> None:
    client = _agent_client(tmp_path, lambda request: "3", wrong_hit_budget=0.05, twin_rate=1.0)
    infos = [_ask(client, "Liam", _WORDS[n])[1] for n in range(TWIN_MIN + 10)]
    assert sum(i.twin for i in infos) == TWIN_MIN  # a deterministic model needs no more
    assert client.cache.stats().tables[0].self_disagreement == 0.0


def test_no_twin_without_a_budget_or_at_rate_zero(tmp_path: Path) -> None:
    plain = _agent_client(tmp_path / "a", lambda request: "3", twin_rate=1.0)
    assert not any(_ask(plain, "Liam", f"m {n}")[1].twin for n in range(5))
    off = _agent_client(tmp_path / "b", lambda request: "3", wrong_hit_budget=0.05)
    assert not any(_ask(off, "Liam", f"m {n}")[1].twin for n in range(5))


def test_a_failing_second_answer_never_fails_the_call(tmp_path: Path) -> None:
    calls = {"n": 0}

    def flaky(request: dict[str, Any]) -> str:
        calls["n"] += 1
        if calls["n"] % 2 == 0:
            raise ConnectionError("the upstream went away")
        return "3"

    client = _agent_client(tmp_path, flaky, wrong_hit_budget=0.05, twin_rate=1.0)
    content, info = _ask(client, "Liam", "tree idle")
    assert (content, info.outcome, info.twin, info.pair) == ("3", "miss", True, None)
    (partition,) = client.cache.partitions()
    assert len(client.cache.entries(partition.key)) == 1  # the paid answer is stored


# -- variety --------------------------------------------------------------------------------------


def _two_answers(tmp_path: Path, **config: Any) -> CachedLLM:
    answers = iter(["3", "7", "3", "7"])
    client = _agent_client(tmp_path, lambda request: next(answers), **config)
    for temperature in (None, None, 0, 0):
        _serve(client, temperature, mode=Mode.COLLECT)
    return client


def _serve(client: CachedLLM, temperature: float | None, **options: Any) -> tuple[str, Any]:
    extra = {} if temperature is None else {"temperature": temperature}
    response, info = client.chat.completions.create_with_info(
        model="m",
        messages=[{"role": "user", "content": "Rate the importance of: tree idle"}],
        cache=CacheOptions(category="importance", agent="Liam", keywords=["tree idle"], **options),
        **extra,
    )
    return response.choices[0].message.content, info


def test_a_hit_draws_from_near_identical_answers_when_the_request_samples(tmp_path: Path) -> None:
    client = _two_answers(tmp_path)
    served = [_serve(client, None, mode=Mode.SERVE) for _ in range(40)]
    assert {content for content, _ in served} == {"3", "7"}
    assert all(info.choices == 2 for _, info in served)
    assert sum(t.varied for t in client.cache.stats().tables) == 40


def test_a_deterministic_request_or_variety_off_always_serves_the_nearest(tmp_path: Path) -> None:
    # temperature=0 keys its own table, which holds the same two answers: the nearest it is.
    client = _two_answers(tmp_path / "a")
    greedy = [_serve(client, 0, mode=Mode.SERVE) for _ in range(20)]
    assert len({content for content, _ in greedy}) == 1
    assert all(info.choices == 1 for _, info in greedy)
    off = _two_answers(tmp_path / "b", variety=False)
    assert len({_serve(off, None, mode=Mode.SERVE)[0] for _ in range(20)}) == 1


def test_variety_draws_are_seeded(tmp_path: Path) -> None:
    first = _two_answers(tmp_path / "a")
    second = _two_answers(tmp_path / "b")
    a = [_serve(first, None, mode=Mode.SERVE)[0] for _ in range(20)]
    b = [_serve(second, None, mode=Mode.SERVE)[0] for _ in range(20)]
    assert a == b
