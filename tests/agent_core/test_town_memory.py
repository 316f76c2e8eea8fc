"""Retrieval scoring: recency (0.995 per game hour since last access), importance and relevance,
each min-max normalised, weights 1."""

from __future__ import annotations

import numpy as np
import pytest

from agent_core.memory import RECENCY_DECAY, EmbeddingMemo, MemoryStream, normalise
from llmcache.testing import HashEmbedder


def stream() -> MemoryStream:
    return MemoryStream(EmbeddingMemo(HashEmbedder()))


def test_normalise_is_min_max_and_constant_is_neutral() -> None:
    assert normalise(np.array([2.0, 4.0, 3.0])).tolist() == [0.0, 1.0, 0.5]
    assert normalise(np.array([7.0, 7.0])).tolist() == [0.5, 0.5]
    assert normalise(np.array([])).size == 0


def test_recency_decays_by_0995_per_game_hour() -> None:
    s = stream()
    for created in (0, 300, 600):  # 10 h, 5 h and 0 h before "now"
        s.add("observation", "Bench in Victoria Park is Idle", created, importance=4)
    scores = s.scores("Bench in Victoria Park is Idle", now=600)
    # Same text and importance: those two components are constant (0.5 each).
    middle = (RECENCY_DECAY**5 - RECENCY_DECAY**10) / (1 - RECENCY_DECAY**10)
    assert scores == pytest.approx([0.0 + 1.0, middle + 1.0, 1.0 + 1.0])
    assert middle == pytest.approx(0.49373, abs=1e-4)


def test_importance_is_min_max_normalised() -> None:
    s = stream()
    for importance in (1, 5, 10):
        s.add("observation", "Alice Wilson is coding", 60, importance=importance)
    scores = s.scores("Alice Wilson is coding", now=60)
    assert scores == pytest.approx([0.5 + 0.0 + 0.5, 0.5 + 4 / 9 + 0.5, 0.5 + 1.0 + 0.5])


def test_relevance_uses_embedding_cosine() -> None:
    embedder = HashEmbedder()
    s = MemoryStream(EmbeddingMemo(embedder))
    texts = ["Ethan Wilson is cooking dinner", "Tree in Victoria Park is Idle", "Mary paints"]
    for t in texts:
        s.add("observation", t, 0, importance=3)
    query = "cooking dinner for Alice"
    vectors = embedder.embed([*texts, query])
    cosines = vectors[:3] @ vectors[3]
    expected = 0.5 + 0.5 + normalise(cosines.astype(np.float64))
    assert s.scores(query, now=0) == pytest.approx(expected, abs=1e-6)
    assert s.retrieve(query, now=0, k=1)[0].description == texts[0]


def test_scores_sum_the_three_components_with_weight_one() -> None:
    s = stream()
    s.add("observation", "old and trivial: a chair is Idle", 0, importance=1)
    s.add("thought", "Isabella quit her job to fight for the climate", 600, importance=9)
    query = "Isabella quit her job to fight for the climate"
    # Most recent, most important and most relevant: the maximum possible score; the other
    # memory is the minimum of all three.
    assert s.scores(query, now=600) == pytest.approx([0.0, 3.0])
    assert [m.importance for m in s.retrieve(query, now=600, k=2)] == [9, 1]


def test_retrieval_refreshes_last_access_only_of_what_it_returns() -> None:
    s = stream()
    a = s.add("observation", "Liam Oliver is pouring latte art", 0, importance=8)
    b = s.add("observation", "Dustbin in Wilson Family House is Idle", 0, importance=1)
    got = s.retrieve("latte art", now=1200, k=1)
    assert got == [a]
    assert a.last_access == 1200
    assert b.last_access == 0


def test_weights_select_components() -> None:
    s = MemoryStream(EmbeddingMemo(HashEmbedder()), weights=(0.0, 1.0, 0.0))
    s.add("observation", "x", 0, importance=2)
    s.add("observation", "y", 0, importance=7)
    assert [m.importance for m in s.retrieve("x", now=0, k=2)] == [7, 2]


def test_stream_grows_past_its_initial_capacity_and_memoises_embeddings() -> None:
    memo = EmbeddingMemo(HashEmbedder())
    s = MemoryStream(memo)
    for i in range(150):
        s.add("observation", f"event {i % 10}", i, importance=1 + i % 10)
    assert len(s) == 150
    assert s.scores("what happened", now=200).shape == (150,)
    assert len(memo) == 10 + 1  # ten distinct memories and the query
    assert s.recent(3)[-1].id == 149
