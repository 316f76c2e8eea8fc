"""The vector indexes: HNSW against the exact reference, capacity, persistence, threads."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from llmcache._index import AutoIndex, ExactIndex, HnswIndex
from llmcache._protocols import VectorIndex

DIM = 32


def unit_vectors(n: int, dim: int = DIM, seed: int = 0) -> NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def perturbed(x: NDArray[np.float32], scale: float, seed: int = 1) -> NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    y = x + scale * rng.standard_normal(x.shape).astype(np.float32)
    return (y / np.linalg.norm(y, axis=1, keepdims=True)).astype(np.float32)


MakeIndex = Callable[[int], Any]

KINDS: dict[str, MakeIndex] = {
    "hnsw": lambda dim: HnswIndex(dim, initial_capacity=16),
    "exact": ExactIndex,
    "auto": lambda dim: AutoIndex(dim, exact_limit=50, initial_capacity=16),
}


@pytest.fixture(params=sorted(KINDS))
def make_index(request: pytest.FixtureRequest) -> MakeIndex:
    return KINDS[request.param]


def test_indexes_satisfy_the_protocol(make_index: MakeIndex) -> None:
    assert isinstance(make_index(DIM), VectorIndex)


def test_search_returns_cosines_best_first(make_index: MakeIndex) -> None:
    index = make_index(DIM)
    x = unit_vectors(200)
    index.add(range(1, 201), x)
    query = perturbed(x[:1], 0.05)[0]
    results = index.search(query, 5)
    assert len(results) == 5
    assert results[0][0] == 1
    sims = [s for _, s in results]
    assert sims == sorted(sims, reverse=True)
    expected = x @ query
    for entry_id, sim in results:
        assert sim == pytest.approx(float(expected[entry_id - 1]), abs=1e-5)


def test_hnsw_recall_matches_exact_on_random_data() -> None:
    n, dim = 3000, 64
    x = unit_vectors(n, dim, seed=3)
    hnsw, exact = HnswIndex(dim, initial_capacity=64), ExactIndex(dim)
    ids = list(range(10, 10 + n))
    hnsw.add(ids, x)
    exact.add(ids, x)
    queries = np.vstack([perturbed(x[:100], 0.1, seed=4), unit_vectors(100, dim, seed=5)])
    agree = 0
    for q in queries:
        truth = exact.search(q, 1)[0]
        got = hnsw.search(q, 1)[0]
        agree += got[0] == truth[0]
        # Whatever HNSW returns is a real neighbour with its real cosine.
        assert got[1] == pytest.approx(float(x[got[0] - 10] @ q), abs=1e-5)
    assert agree / len(queries) >= 0.97
    # Recall@10 too: the sets overlap almost completely.
    overlap = [
        len({i for i, _ in hnsw.search(q, 10)} & {i for i, _ in exact.search(q, 10)})
        for q in queries[:50]
    ]
    assert np.mean(overlap) >= 9.5


def test_k_is_capped_at_the_live_count(make_index: MakeIndex) -> None:
    index = make_index(DIM)
    assert index.search(unit_vectors(1)[0], 5) == []
    x = unit_vectors(3)
    index.add([1, 2, 3], x)
    assert len(index.search(x[0], 10)) == 3
    index.remove(2)
    results = index.search(x[0], 10)
    assert sorted(i for i, _ in results) == [1, 3]
    assert index.search(x[0], 0) == []


def test_hnsw_grows_past_its_initial_capacity() -> None:
    index = HnswIndex(DIM, initial_capacity=16)
    x = unit_vectors(500)
    for start in range(0, 500, 7):  # many small adds, each may cross the capacity
        index.add(range(start, min(start + 7, 500)), x[start : start + 7])
    assert len(index) == 500
    assert index.capacity >= 500
    assert index.search(x[321], 1)[0][0] == 321
    index.add(range(500, 2500), unit_vectors(2000, seed=9))  # one add far beyond capacity
    assert len(index) == 2500


def test_hnsw_ef_restored_after_load(tmp_path: Path) -> None:
    index = HnswIndex(DIM, ef_search=123, initial_capacity=16)
    x = unit_vectors(300)
    index.add(range(300), x)
    index.remove(7)
    index.save(tmp_path / "i.idx")
    loaded = HnswIndex(DIM)  # default ef 64: the file's settings must win
    loaded.load(tmp_path / "i.idx")
    assert loaded.ef_search == 123
    assert loaded._index.ef == 123  # what hnswlib will really use
    assert len(loaded) == 299  # the removal survived the round trip
    assert 7 not in {i for i, _ in loaded.search(x[7], 299)}
    assert loaded.search(x[42], 1)[0][0] == 42
    loaded.add([1000], unit_vectors(1, seed=77))  # still growable after load
    assert len(loaded) == 300


def test_save_and_load_round_trip(make_index: MakeIndex, tmp_path: Path) -> None:
    index = make_index(DIM)
    x = unit_vectors(120)
    index.add(range(5, 125), x)
    index.remove(9)
    index.save(tmp_path / "i.idx")
    loaded = make_index(DIM)
    loaded.load(tmp_path / "i.idx")
    assert len(loaded) == 119
    for i in (5, 60, 124):
        [(got_id, got_sim)] = loaded.search(x[i - 5], 1)
        [(want_id, want_sim)] = index.search(x[i - 5], 1)
        assert got_id == want_id == i
        assert got_sim == pytest.approx(want_sim, abs=1e-5)


def test_exact_index_file_is_plain_npy(tmp_path: Path) -> None:
    index = ExactIndex(4)
    index.add([1, 2], np.eye(4, dtype=np.float32)[:2])
    index.save(tmp_path / "e.idx")
    # allow_pickle=False: the file is data, not code.
    record = np.load(tmp_path / "e.idx", allow_pickle=False)
    assert record["id"].tolist() == [1, 2]


def test_remove_is_idempotent_and_ignores_unknown_ids(make_index: MakeIndex) -> None:
    index = make_index(DIM)
    x = unit_vectors(10)
    index.add(range(10), x)
    index.remove(3)
    index.remove(3)
    index.remove(99)
    assert len(index) == 9
    assert 3 not in {i for i, _ in index.search(x[3], 9)}
    index.add([3], x[3:4])  # re-adding revives it
    assert len(index) == 10
    assert index.search(x[3], 1)[0][0] == 3


def test_adding_a_known_id_replaces_its_vector(make_index: MakeIndex) -> None:
    index = make_index(DIM)
    x = unit_vectors(20)
    index.add(range(20), x)
    index.add([0], x[5:6])
    assert len(index) == 20
    assert index.search(x[5], 2)[1][1] == pytest.approx(1.0, abs=1e-5)


def test_wrong_dimension_is_refused(make_index: MakeIndex) -> None:
    index = make_index(DIM)
    with pytest.raises(ValueError):
        index.add([1], unit_vectors(1, DIM + 1))
    with pytest.raises(ValueError):
        index.search(unit_vectors(1, DIM + 1)[0], 1)


def test_auto_index_switches_to_hnsw_and_keeps_everything(tmp_path: Path) -> None:
    index = AutoIndex(DIM, exact_limit=100, background=False, initial_capacity=16)
    x = unit_vectors(300)
    index.add(range(60), x[:60])
    assert isinstance(index.inner, ExactIndex)
    index.remove(0)
    index.add(range(60, 300), x[60:])
    assert isinstance(index.inner, HnswIndex)
    assert len(index) == 299
    assert index.search(x[200], 1)[0][0] == 200
    assert 0 not in {i for i, _ in index.search(x[0], 299)}
    index.save(tmp_path / "a.idx")
    loaded = AutoIndex(DIM)
    loaded.load(tmp_path / "a.idx")
    assert isinstance(loaded.inner, HnswIndex)
    assert len(loaded) == 299


def test_auto_index_builds_in_the_background_and_replays_changes() -> None:
    n = 3000
    x = unit_vectors(n + 400, seed=21)
    index = AutoIndex(DIM, exact_limit=n - 1, initial_capacity=16)
    index.add(range(n), x[:n])  # crosses the limit: the build starts in a thread
    assert index.switching
    # Changes made during the build: searches stay exact, and nothing is lost in the switch.
    for i in range(n, n + 400):
        index.add([i], x[i : i + 1])
        assert index.search(x[i], 1)[0][0] == i
    removed = [5, 17, n + 3, n + 399]
    for i in removed:
        index.remove(i)
    index.add([17], x[17:18])  # removed then re-added
    assert index.wait(timeout=60)
    assert isinstance(index.inner, HnswIndex)
    assert len(index) == n + 400 - len(removed) + 1
    for i in removed:
        if i != 17:
            assert i not in {j for j, _ in index.search(x[i], 10)}
    hits = sum(index.search(x[i], 1)[0][0] == i for i in range(0, n + 400, 17))
    assert hits >= 0.98 * len(range(0, n + 400, 17))


def test_auto_index_resumes_the_switch_after_loading_an_exact_file(tmp_path: Path) -> None:
    x = unit_vectors(300)
    small = AutoIndex(DIM, exact_limit=1000)
    small.add(range(300), x)
    small.save(tmp_path / "a.idx")  # an exact file
    loaded = AutoIndex(DIM, exact_limit=100, initial_capacity=16)
    loaded.load(tmp_path / "a.idx")
    assert loaded.wait(timeout=60)
    assert isinstance(loaded.inner, HnswIndex) and len(loaded) == 300
    closed = AutoIndex(DIM, exact_limit=100, initial_capacity=16)
    closed.load(tmp_path / "a.idx")
    closed.close()  # stops the build; the exact index keeps answering
    assert not closed.switching
    assert closed.search(x[3], 1)[0][0] == 3


def test_concurrent_add_and_search_loses_nothing(make_index: MakeIndex) -> None:
    index = make_index(DIM)
    x = unit_vectors(2000, seed=11)
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer(part: int) -> None:
        try:
            for start in range(part * 1000, (part + 1) * 1000, 10):
                index.add(range(start, start + 10), x[start : start + 10])
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    def reader() -> None:
        rng = np.random.default_rng(0)
        try:
            while not stop.is_set():
                results = index.search(x[rng.integers(2000)], 5)
                assert len(results) <= 5
        except BaseException as exc:
            errors.append(exc)

    writers = [threading.Thread(target=writer, args=(p,)) for p in range(2)]
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in readers + writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    for t in readers:
        t.join()
    assert errors == []
    assert len(index) == 2000
    found = sum(index.search(x[i], 1)[0][0] == i for i in range(0, 2000, 10))
    assert found >= 195  # every vector was indexed (HNSW may miss a rare exact hit)
