"""CacheBackend behaviour. Storage-agnostic tests use the ``make_backend`` fixture (so other
backends can be parametrised in); tests that reopen a directory use LocalBackend directly."""

from __future__ import annotations

import json
import logging
import multiprocessing
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from llmcache._errors import CorruptEntryError, EmbedderMismatchError
from llmcache._index import AutoIndex, ExactIndex, HnswIndex
from llmcache._local_backend import LocalBackend
from llmcache._protocols import CacheBackend, VectorIndex
from llmcache._store import DiskStore
from llmcache._types import CacheEntry, EmbedMode, Partition, Usage

BackendFactory = Callable[[], CacheBackend]

DIM = 16
EMBEDDER = "test-embedder-v1"


def unit(seed: int, dim: int = DIM) -> NDArray[np.float32]:
    v = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return (v / np.linalg.norm(v)).astype(np.float32)


def make_entry(
    partition: Partition,
    vector: NDArray[np.float32],
    text: str = "a b",
    embedder_id: str = EMBEDDER,
) -> CacheEntry:
    return CacheEntry(
        partition=partition,
        embed_text=text,
        embed_mode=EmbedMode.KEYWORD,
        embedder_id=embedder_id,
        vector_b64=CacheEntry.encode_vector(vector),
        keywords=tuple(text.split()),
        messages=[{"role": "user", "content": text}],
        content=f"answer to {text}",
        completion={"id": "cmpl", "choices": [{"message": {"content": text}}]},
        usage=Usage(prompt_tokens=7, completion_tokens=3),
    )


P = Partition(category="importance", agent="Liam Oliver", params_hash="h", model="m")
Q = Partition(category="importance", agent="Ada Lee", params_hash="h", model="m")


def opened(factory: BackendFactory) -> CacheBackend:
    backend = factory()
    backend.check_embedder(EMBEDDER, DIM)
    return backend


# -- storage-agnostic behaviour ---------------------------------------------------------------


def test_add_search_get_evict_round_trip(make_backend: BackendFactory) -> None:
    backend = opened(make_backend)
    assert backend.search(P, unit(0), 3) == []  # an unknown table is empty, not an error
    ids = [backend.add(make_entry(P, unit(i), f"text {i}")) for i in range(5)]
    assert ids == sorted(ids) and len(set(ids)) == 5
    results = backend.search(P, unit(2), 3)
    assert len(results) == 3
    assert results[0][0] == ids[2]
    assert results[0][1] == pytest.approx(1.0, abs=1e-5)
    assert [s for _, s in results] == sorted((s for _, s in results), reverse=True)
    entry = backend.get(P.key, ids[2])
    assert entry is not None
    assert entry.id == ids[2] and entry.embed_text == "text 2" and entry.partition == P
    np.testing.assert_allclose(entry.vector(), unit(2), atol=1e-7)
    assert backend.count(P.key) == 5
    assert [e.id for e in backend.iterate(P.key)] == ids
    assert [p.key for p in backend.partitions()] == [P.key]

    backend.evict(P.key, ids[2])
    assert backend.get(P.key, ids[2]) is None
    assert ids[2] not in {i for i, _ in backend.search(P, unit(2), 5)}
    assert backend.count(P.key) == 4
    assert len(backend.search(P, unit(2), 10)) == 4  # k capped at what is left
    assert backend.search(Q, unit(2), 3) == []
    assert backend.search(P, unit(2), 0) == []


def test_stats_are_added_and_read_back(make_backend: BackendFactory) -> None:
    backend = opened(make_backend)
    backend.add_stats(P.key, {"lookups": 2, "max_sim": 0.5, "min_sim": 0.5})
    backend.add_stats(P.key, {"lookups": 1, "max_sim": 0.9, "min_sim": 0.1})
    backend.add_stats(Q.key, {"lookups": 1})
    stats = backend.read_stats()
    assert stats[P.key] == {"lookups": 3.0, "max_sim": 0.9, "min_sim": 0.1}
    assert stats[Q.key] == {"lookups": 1.0}


def test_embedder_check_is_idempotent_and_refuses_another(make_backend: BackendFactory) -> None:
    backend = opened(make_backend)
    backend.check_embedder(EMBEDDER, DIM)  # same embedder again: fine
    with pytest.raises(EmbedderMismatchError):
        backend.check_embedder("another-embedder", DIM)
    with pytest.raises(EmbedderMismatchError):
        backend.check_embedder(EMBEDDER, DIM * 2)
    with pytest.raises(EmbedderMismatchError):
        backend.add(make_entry(P, unit(0), embedder_id="another-embedder"))


def test_threads_adding_and_searching_together(make_backend: BackendFactory) -> None:
    backend = opened(make_backend)
    errors: list[BaseException] = []
    added: list[list[int]] = [[], [], []]

    def writer(w: int) -> None:
        try:
            for i in range(40):
                added[w].append(backend.add(make_entry(P, unit(1000 * w + i), f"w{w} {i}")))
        except BaseException as exc:
            errors.append(exc)

    def reader() -> None:
        try:
            for i in range(80):
                for entry_id, _ in backend.search(P, unit(i), 3):
                    entry = backend.get(P.key, entry_id)
                    assert entry is not None and entry.partition == P
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    all_ids = sorted(i for ids in added for i in ids)
    assert all_ids == sorted(set(all_ids)) and len(all_ids) == 120
    for w in range(3):
        for i in (0, 39):
            best = backend.search(P, unit(1000 * w + i), 1)
            assert best[0][0] == added[w][i]


PARTS = [
    Partition(category=c, agent=a, params_hash=h)
    for c in ("importance", "plan")
    for a in ("", "Liam", "Ada")
    for h in ("h0", "h1")
]


@settings(
    max_examples=40,
    deadline=None,
    # A fresh backend per example comes from the factory, so sharing the fixture is safe.
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    entries=st.lists(
        st.tuples(st.integers(0, len(PARTS) - 1), st.integers(0, 30)), min_size=0, max_size=40
    ),
    queries=st.lists(
        st.tuples(st.integers(0, len(PARTS) - 1), st.integers(0, 30), st.integers(1, 6)),
        min_size=1,
        max_size=12,
    ),
)
def test_no_search_returns_an_entry_of_another_partition(
    make_backend: BackendFactory,
    entries: list[tuple[int, int]],
    queries: list[tuple[int, int, int]],
) -> None:
    backend = opened(make_backend)
    # The same vectors go into several partitions (seeds repeat), and ids repeat across
    # partitions (each starts at 1): a leak would be easy to produce and is checked by pair.
    stored: dict[int, dict[int, NDArray[np.float32]]] = {i: {} for i in range(len(PARTS))}
    for part, seed in entries:
        entry_id = backend.add(make_entry(PARTS[part], unit(seed)))
        stored[part][entry_id] = unit(seed)
    for part, seed, k in queries:
        partition = PARTS[part]
        query = unit(seed)
        results = backend.search(partition, query, k)
        assert len(results) <= min(k, len(stored[part]))
        if stored[part]:
            assert results, "a non-empty table returned nothing"
        for entry_id, cosine in results:
            assert entry_id in stored[part]
            entry = backend.get(partition.key, entry_id)
            assert entry is not None
            assert entry.partition == partition
            assert cosine == pytest.approx(float(stored[part][entry_id] @ query), abs=1e-4)
        if any(np.allclose(v, query) for v in stored[part].values()):
            assert results[0][1] == pytest.approx(1.0, abs=1e-4)


# -- LocalBackend: directories reopened, index files, several processes ------------------------


def local(path: Path, **kwargs: Any) -> LocalBackend:
    backend = LocalBackend(path, **kwargs)
    backend.check_embedder(EMBEDDER, DIM)
    return backend


def test_reopening_with_another_embedder_says_what_to_do(tmp_path: Path) -> None:
    with local(tmp_path) as backend:
        backend.add(make_entry(P, unit(0)))
    reopened = LocalBackend(tmp_path)
    try:
        with pytest.raises(EmbedderMismatchError) as info:
            reopened.check_embedder("other-model", 384)
        message = str(info.value)
        assert EMBEDDER in message and "other-model" in message
        assert "same embedder" in message
        assert "fresh" in message and "delete" in message
        reopened.check_embedder(EMBEDDER, DIM)  # the right embedder still opens it
        assert reopened.count(P.key) == 1
    finally:
        reopened.close()
    assert json.loads((tmp_path / "manifest.json").read_text())["embedder_id"] == EMBEDDER


class CountingFactory:
    """An index factory that counts vectors added, to tell a loaded index from a rebuilt one."""

    def __init__(self, make: Callable[[int], Any]) -> None:
        self.make = make
        self.added = 0

    def __call__(self, dim: int) -> Any:
        index = self.make(dim)
        original_add = index.add

        def add(ids: Any, vectors: Any) -> None:
            self.added += len(ids)
            original_add(ids, vectors)

        index.add = add
        return index


INDEX_KINDS: dict[str, Callable[[int], Any]] = {
    "auto-small": lambda d: AutoIndex(d, exact_limit=10, initial_capacity=8),
    "hnsw": lambda d: HnswIndex(d, initial_capacity=8),
    "exact": ExactIndex,
}


@pytest.mark.parametrize("kind", sorted(INDEX_KINDS))
def test_saved_index_is_loaded_then_caught_up(tmp_path: Path, kind: str) -> None:
    with local(tmp_path, index_factory=INDEX_KINDS[kind]) as backend:
        ids = [backend.add(make_entry(P, unit(i))) for i in range(30)]
        backend.evict(P.key, ids[4])
    sidecar = json.loads((tmp_path / "index" / f"{P.key}.json").read_text())
    assert sidecar["count"] == 29 and sidecar["last_id"] == ids[-1]
    assert sidecar["embedder_id"] == EMBEDDER and sidecar["dim"] == DIM
    # An entry stored by a process that never saved an index (say, it was killed).
    with DiskStore(tmp_path) as store:
        late = store.put(make_entry(P, unit(500)))
    counting = CountingFactory(INDEX_KINDS[kind])
    with local(tmp_path, index_factory=counting) as backend:
        assert backend.search(P, unit(500), 1)[0][0] == late
        assert counting.added == 1  # the file was loaded; only the new entry was indexed
        assert backend.search(P, unit(7), 1)[0][0] == ids[7]
        assert ids[4] not in {i for i, _ in backend.search(P, unit(4), 30)}


class ReshapingIndex:
    """A VectorIndex of a caller's own, with the protocol's methods and nothing else: exact
    search that "reorganises" itself on request, as AutoIndex does in the background."""

    def __init__(self, dim: int) -> None:
        self._inner = ExactIndex(dim)
        self.kind = "flat"
        self.waited = self.closed = 0

    @property
    def dim(self) -> int:
        return self._inner.dim

    def add(self, ids: Any, vectors: NDArray[np.float32]) -> None:
        self._inner.add(ids, vectors)

    def search(self, vector: NDArray[np.float32], k: int) -> list[tuple[int, float]]:
        return self._inner.search(vector, k)

    def remove(self, entry_id: int) -> None:
        self._inner.remove(entry_id)

    def __len__(self) -> int:
        return len(self._inner)

    def save(self, path: Path) -> None:
        self._inner.save(path)
        Path(f"{path}.kind").write_text(self.kind)

    def load(self, path: Path) -> None:
        self._inner.load(path)
        self.kind = Path(f"{path}.kind").read_text()

    def wait(self, timeout: float | None = None) -> bool:
        self.waited += 1
        return True

    def close(self) -> None:
        self.closed += 1


def test_a_vector_index_of_ones_own_plugs_in_through_the_protocol(tmp_path: Path) -> None:
    made: list[ReshapingIndex] = []

    def factory(dim: int) -> ReshapingIndex:
        made.append(ReshapingIndex(dim))
        return made[-1]

    assert isinstance(ReshapingIndex(DIM), VectorIndex)
    with local(tmp_path, index_factory=factory) as backend:
        ids = [backend.add(make_entry(P, unit(i))) for i in range(5)]
        backend.save()
        assert backend.wait_for_indexes() and made[0].waited == 1
        (index_file,) = (tmp_path / "index").glob(f"{P.key}.*.idx")
        made[0].kind = "graph"  # a new form, no new vector: worth saving again
        backend.save()
        assert not index_file.exists()
    assert made[0].closed == 1
    with local(tmp_path, index_factory=factory) as backend:
        assert backend.search(P, unit(3), 1)[0][0] == ids[3]
        assert made[-1].kind == "graph"  # loaded from the file saved in its new form


def test_index_rebuilt_when_files_are_deleted(tmp_path: Path) -> None:
    with local(tmp_path) as backend:
        ids = [backend.add(make_entry(P, unit(i))) for i in range(25)]
    assert list((tmp_path / "index").glob(f"{P.key}.*.idx"))
    for f in (tmp_path / "index").iterdir():
        f.unlink()
    counting = CountingFactory(INDEX_KINDS["auto-small"])
    with local(tmp_path, index_factory=counting) as backend:
        assert backend.search(P, unit(13), 1)[0][0] == ids[13]
        assert counting.added == 25


@pytest.mark.parametrize(
    "damage", ["wrong-embedder", "ahead-of-store", "garbage-file", "garbage-sidecar", "no-file"]
)
def test_stale_or_broken_index_is_rebuilt(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    with local(tmp_path, index_factory=INDEX_KINDS["hnsw"]) as backend:
        ids = [backend.add(make_entry(P, unit(i))) for i in range(20)]
    sidecar_path = tmp_path / "index" / f"{P.key}.json"
    sidecar = json.loads(sidecar_path.read_text())
    index_file = tmp_path / "index" / sidecar["file"]
    if damage == "wrong-embedder":
        sidecar["embedder_id"] = "something-else"
    elif damage == "ahead-of-store":
        sidecar["last_id"] = 10_000
    elif damage == "garbage-file":
        index_file.write_bytes(b"not an index")
    elif damage == "no-file":
        index_file.unlink()
    if damage == "garbage-sidecar":
        sidecar_path.write_text("{")
    else:
        sidecar_path.write_text(json.dumps(sidecar))
    counting = CountingFactory(INDEX_KINDS["hnsw"])
    with (
        caplog.at_level(logging.INFO, logger="llmcache._local_backend"),
        local(tmp_path, index_factory=counting) as backend,
    ):
        assert backend.search(P, unit(3), 1)[0][0] == ids[3]
        assert counting.added == 20
    # The rebuilt index was saved and is good again.
    fresh = json.loads(sidecar_path.read_text())
    assert fresh["last_id"] == ids[-1] and fresh["embedder_id"] == EMBEDDER


def test_corrupt_entry_passes_through_and_evict_removes_it(tmp_path: Path) -> None:
    with local(tmp_path) as backend:
        ids = [backend.add(make_entry(P, unit(i))) for i in range(3)]
        backend.store.cache.set(f"e:{P.key}:{ids[1]:012d}", "{broken")
        assert backend.search(P, unit(1), 1)[0][0] == ids[1]  # the index still has it
        with pytest.raises(CorruptEntryError):
            backend.get(P.key, ids[1])
        backend.evict(P.key, ids[1])  # what the cache does with a corrupt entry
        assert ids[1] not in {i for i, _ in backend.search(P, unit(1), 3)}
        assert backend.count(P.key) == 2


def test_another_instance_on_the_same_directory_is_caught_up(tmp_path: Path) -> None:
    factory = INDEX_KINDS["auto-small"]
    a, b = local(tmp_path, index_factory=factory), local(tmp_path, index_factory=factory)
    try:
        first = a.add(make_entry(P, unit(1)))
        assert a.search(P, unit(1), 1)[0][0] == first  # a's index exists now
        added_by_b = [b.add(make_entry(P, unit(100 + i))) for i in range(30)]
        assert a.search(P, unit(117), 1)[0][0] == added_by_b[17]
        assert len(a.search(P, unit(117), 100)) == 31
        # An eviction in b: a must not keep offering the evicted id.
        b.evict(P.key, added_by_b[17])
        assert added_by_b[17] not in {i for i, _ in a.search(P, unit(117), 3)}
        assert len(a.search(P, unit(117), 100)) == 30
        mine = a.add(make_entry(P, unit(999)))  # a's own add after b's: ids stay unique
        assert mine == added_by_b[-1] + 1
        assert b.search(P, unit(999), 1)[0][0] == mine
    finally:
        a.close()
        b.close()


def _add_in_child(path: str, seeds: list[int]) -> list[int]:
    backend = LocalBackend(path)
    try:
        backend.check_embedder(EMBEDDER, DIM)
        return [backend.add(make_entry(P, unit(s))) for s in seeds]
    finally:
        backend.close()


def test_entries_added_by_another_process_are_found(tmp_path: Path) -> None:
    with local(tmp_path) as backend:
        mine = backend.add(make_entry(P, unit(1)))
        assert backend.search(P, unit(1), 1)[0][0] == mine
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(1) as pool:
            theirs = pool.apply(_add_in_child, (str(tmp_path), list(range(200, 220))))
        for seed, entry_id in zip(range(200, 220), theirs, strict=True):
            assert backend.search(P, unit(seed), 1)[0][0] == entry_id
        assert backend.count(P.key) == 21


def test_index_files_of_a_deleted_store_are_not_reused(tmp_path: Path) -> None:
    with local(tmp_path) as backend:
        for i in range(20):
            backend.add(make_entry(P, unit(i)))
    # The user deletes the store but not the index files, then the same ids get new vectors.
    shutil.rmtree(tmp_path / "store")
    with local(tmp_path) as backend:
        new_ids = [backend.add(make_entry(P, unit(1000 + i))) for i in range(25)]
    with local(tmp_path) as backend:
        best_id, cosine = backend.search(P, unit(1003), 1)[0]
        assert best_id == new_ids[3] and cosine == pytest.approx(1.0, abs=1e-5)
        assert backend.search(P, unit(3), 1)[0][1] < 0.99  # the old vectors are gone


def test_first_manifest_wins(tmp_path: Path) -> None:
    first, second = LocalBackend(tmp_path), LocalBackend(tmp_path)
    try:
        first.check_embedder("model-a", DIM)
        with pytest.raises(EmbedderMismatchError):
            second.check_embedder("model-b", DIM)
        assert second.read_manifest() is not None
        assert second.read_manifest().embedder_id == "model-a"  # type: ignore[union-attr]
    finally:
        first.close()
        second.close()
