"""The proving guard's descent from a table's configured threshold (``decide(start=...)``).

From the configured threshold down, every edge is tested at half the guard's level in a fixed
order, and the threshold is the last edge passed before the first that is not (a failing edge
or an empty bin stops the descent); the edges above it share the other half, used only when the
start itself is not proven. Without a start, every edge is tested at a hundredth of the level.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from llmcache import (
    CacheConfig,
    CachedLLM,
    CacheOptions,
    CallInfo,
    CategoryPolicy,
    Mode,
    SemanticCache,
)
from llmcache._budget import (
    N_BINS,
    STRICT_THRESHOLD,
    Labels,
    decide,
    start_index,
)
from llmcache._ledger import info_stats_key
from llmcache.testing import FakeOpenAI, HashEmbedder, scripted

BUDGET = 0.05


def _edges(low: float, high: float) -> list[float]:
    """The bin edges from ``low`` up to (not including) ``high``, 0.005 apart."""
    return [round(low + i * 0.005, 6) for i in range(round((high - low) / 0.005))]


def _labelled(*bands: tuple[float, float, float], each: int) -> Labels:
    """``each`` labels in every bin of each ``(low, high, wrong share)`` band, that share of
    them wrong (the first ones of a bin, so the share is exact)."""
    labels = Labels()
    for low, high, wrong in bands:
        for edge in _edges(low, high):
            bad = round(each * wrong)
            for i in range(each):
                labels.add(edge + 0.001, i >= bad)
    return labels


def _labels_to_prove(cosines: Iterable[float], start: float | None) -> int:
    """How many right labels, spread over ``cosines`` in turn, a table needs until an edge is
    proven (from ``start``)."""
    labels = Labels()
    ring = list(cosines)
    for n in range(1, 5000):
        labels.add(ring[n % len(ring)], True)
        if decide(labels, BUDGET, start=start).proven:
            return n
    raise AssertionError("never proven")


def test_the_descent_starts_at_the_configured_threshold_rounded_up_to_an_edge() -> None:
    assert start_index(0.9) == 80  # 0.5 + 80 · 0.005
    assert start_index(0.9012) == 81  # never looser than configured
    assert start_index(0.3) == 0  # no label lies under 0.5
    assert start_index(1.0) == N_BINS - 1  # the top edge, 0.995


def test_a_table_proven_at_its_start_serves_there_with_far_fewer_labels() -> None:
    # Right answers spread over 0.9 to 1: proving 0.9 at half the level takes far fewer labels
    # than proving the lowest of all edges at a hundredth of it.
    cosines = [edge + 0.001 for edge in _edges(0.9, 1.0)]
    descent = _labels_to_prove(cosines, start=0.9)
    everywhere = _labels_to_prove(cosines, start=None)
    assert descent <= 0.7 * everywhere, (descent, everywhere)
    labels = Labels()
    for n in range(descent):
        labels.add(cosines[(n + 1) % len(cosines)], True)
    assert decide(labels, BUDGET, start=0.9).threshold == pytest.approx(0.9)
    assert not decide(labels, BUDGET).proven


def test_the_descent_goes_below_the_start_while_every_edge_passes() -> None:
    labels = _labelled((0.8, 1.0, 0.0), each=40)
    decision = decide(labels, BUDGET, start=0.9)
    assert decision.proven and decision.source == "table"
    assert decision.threshold == pytest.approx(0.8)  # the lowest bin with labels


def test_a_start_over_budget_is_not_served_and_the_edges_above_it_are_tried() -> None:
    # Every answer under 0.95 is wrong, every one above right: 0.9 is far over δ, 0.95 within.
    labels = _labelled((0.9, 0.95, 1.0), (0.95, 1.0, 0.0), each=60)
    decision = decide(labels, BUDGET, start=0.9)
    assert decision.proven
    assert decision.threshold == pytest.approx(0.95)
    # And from a start of 0.95 the descent stops there: 0.945 fails.
    assert decide(labels, BUDGET, start=0.95).threshold == pytest.approx(0.95)


def test_a_start_over_budget_with_no_edge_above_it_proven_stays_unproven() -> None:
    labels = _labelled((0.9, 1.0, 0.2), each=20)
    decision = decide(labels, BUDGET, start=0.9)
    assert not decision.proven and decision.threshold >= STRICT_THRESHOLD


def test_a_failing_edge_stops_the_descent_though_lower_ones_would_pass() -> None:
    # One bad bin just under the start, then many right labels under it: from the bottom the
    # bad bin is diluted below δ, but the descent meets it first and stops.
    labels = _labelled((0.9, 1.0, 0.0), (0.895, 0.9, 1.0), (0.6, 0.895, 0.0), each=30)
    assert decide(labels, BUDGET, start=0.9).threshold == pytest.approx(0.9)
    assert decide(labels, BUDGET).threshold < 0.895  # all edges at once: the lowest passes


def test_an_empty_bin_stops_the_descent_it_is_never_skipped() -> None:
    # Labels under 0.85 and from 0.9 up, none between: the descent from 0.9 stops at the empty
    # bin under it, whatever the labels further down say.
    labels = _labelled((0.8, 0.85, 0.0), (0.9, 1.0, 0.0), each=40)
    assert decide(labels, BUDGET, start=0.9).threshold == pytest.approx(0.9)
    assert decide(labels, BUDGET).threshold == pytest.approx(0.8)


def test_a_start_whose_bin_is_empty_is_not_chosen_the_edges_above_it_are() -> None:
    labels = _labelled((0.95, 1.0, 0.0), each=40)
    decision = decide(labels, BUDGET, start=0.9)
    assert decision.proven and decision.threshold == pytest.approx(0.95)


def test_a_pool_proof_serves_a_table_from_its_start_unless_its_own_labels_show_it_over() -> None:
    pool = _labelled((0.9, 1.0, 0.0), each=40)
    decision = decide(Labels(), BUDGET, pool, start=0.9)
    assert decision.proven and decision.source == "pool"
    assert decision.threshold == pytest.approx(0.9)
    bad = _labelled((0.9, 0.92, 1.0), each=10)
    held = decide(bad, BUDGET, pool, start=0.9)
    assert held.threshold > 0.9


def _client(tmp_path: Path, **config: Any) -> CachedLLM:
    # No twins: they would only add pairs, which a deterministic answer never needs.
    cache_config = CacheConfig(wrong_hit_budget=BUDGET, twin_rate=0.0, **config)
    cache = SemanticCache(tmp_path / "c", embedder=HashEmbedder(dim=64), config=cache_config)
    return CachedLLM(FakeOpenAI(scripted(["3"] * 10)), cache=cache)


def _ask(client: CachedLLM, mode: Mode | None = None) -> CallInfo:
    info: CallInfo = client.chat.completions.create_with_info(
        model="m",
        messages=[{"role": "user", "content": "Rate the importance of: tree idle"}],
        cache=CacheOptions(category="importance", agent="Liam", keywords=["tree idle"], mode=mode),
    )[1]
    return info


@pytest.mark.parametrize(
    ("config", "start"),
    [({}, 0.9), ({"categories": {"importance": CategoryPolicy(threshold=0.93)}}, 0.93)],
)
def test_a_call_and_the_stats_read_the_proof_from_the_configured_threshold(
    tmp_path: Path, config: dict[str, Any], start: float
) -> None:
    client = _client(tmp_path, **config)
    _ask(client, Mode.COLLECT)
    key = info_stats_key(_ask(client))
    cosines = [edge + 0.001 for edge in _edges(start, 1.0)]
    needed = _labels_to_prove(cosines, start=start)
    for n in range(needed):
        client.cache.budget.add(key, cosines[(n + 1) % len(cosines)], True)
    # From the configured threshold the labels prove it; over all edges they do not yet.
    assert client.cache.budget.threshold(key, BUDGET, start=start) == pytest.approx(start)
    assert client.cache.budget.threshold(key, BUDGET) == STRICT_THRESHOLD
    info = _ask(client)
    assert info.threshold == pytest.approx(start)
    table = client.cache.stats().tables[0]
    assert table.threshold_in_force == pytest.approx(start)
    assert table.threshold_source == "table"
    client.cache.close()
