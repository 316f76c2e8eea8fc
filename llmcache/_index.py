"""Nearest-neighbour indexes over the vectors of one partition, by cosine similarity.

- :class:`HnswIndex` — hnswlib's approximate HNSW graph: sub-millisecond searches at any table
  size, but every insert costs a graph search, and recall is a little below 1.
- :class:`ExactIndex` — numpy brute force: exact, cheap to insert, search time linear in size.
  The reference the tests compare HNSW against.
- :class:`AutoIndex` — exact while the table is small, HNSW once it is large (the default of
  :class:`~llmcache.storage.LocalBackend`; the crossover is measured by
  ``benchmarks/bench_index.py``).

Every index normalises vectors itself, so similarities are true cosines even when a caller's
vectors are slightly off unit length, and every index serialises its operations behind a lock:
hnswlib does not support an ``add`` running concurrently with a ``search``.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import uuid
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hnswlib
import numpy as np
from numpy.typing import NDArray

from ._errors import StoreError

__all__ = ["DEFAULT_EXACT_LIMIT", "AutoIndex", "ExactIndex", "HnswIndex"]

logger = logging.getLogger(__name__)

# Up to this many vectors AutoIndex searches exactly. A brute-force search reads every vector,
# so its time grows with the table, but up to this size it was measured no slower than HNSW
# (docs/performance.md, "exact against HNSW search below the limit"; benchmarks/bench_index.py
# --crossover). Below the limit exact search also costs no recall, no graph memory and no
# insert time, where every HNSW insert is a graph search.
DEFAULT_EXACT_LIMIT = 10_000

# Vectors per add_items call of a background build: a cancelled build stops after the chunk in
# progress, so a chunk must be small.
_BUILD_CHUNK = 256

# Indexes with a background build that may still run; stopped and joined at exit.
_LIVE_BUILDS: weakref.WeakSet[AutoIndex] = weakref.WeakSet()


def _stop_builds_at_exit() -> None:
    for index in list(_LIVE_BUILDS):
        index.close()


atexit.register(_stop_builds_at_exit)

_NPY_MAGIC = b"\x93NUMPY"


def _as_matrix(vectors: NDArray[Any], dim: int) -> NDArray[np.float32]:
    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim == 1:
        array = array.reshape(1, -1)
    if array.ndim != 2 or array.shape[1] != dim:
        raise ValueError(f"expected vectors of dimension {dim}, got shape {np.shape(vectors)}")
    return array


def _as_query(vector: NDArray[Any], dim: int) -> NDArray[np.float32]:
    array = np.asarray(vector, dtype=np.float32)
    if array.shape not in ((dim,), (1, dim)):
        raise ValueError(f"expected one query vector of dimension {dim}, got shape {array.shape}")
    return array.reshape(1, dim)


def _normalise(matrix: NDArray[np.float32]) -> NDArray[np.float32]:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    # A zero vector has no direction; leaving it zero gives it cosine 0 to everything, which
    # is also what hnswlib's cosine space does.
    return np.asarray(matrix / np.maximum(norms, 1e-30), dtype=np.float32)


def _clamp(cosine: float) -> float:
    # float32 rounding can put the cosine of a vector with itself just above 1.
    return min(1.0, max(-1.0, cosine))


def _as_ids(ids: Sequence[int], n: int) -> NDArray[np.int64]:
    array = np.asarray(list(ids), dtype=np.int64).reshape(-1)
    if array.shape[0] != n:
        raise ValueError(f"{array.shape[0]} ids for {n} vectors")
    if array.size and array.min() < 0:
        raise ValueError("ids must be non-negative")
    return array


def _replace_atomically(tmp: Path, final: Path) -> None:
    # os.replace is atomic on POSIX and Windows: a reader sees the old file or the new one.
    os.replace(tmp, final)


def _tmp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")


class ExactIndex:
    """Brute-force cosine search with numpy: exact, and fast enough for small tables.

    Vectors live in one growing float32 matrix; a removal moves the last row into the hole so
    the live rows stay contiguous and a search is a single matrix-vector product.
    """

    def __init__(self, dim: int) -> None:
        if dim <= 0:
            raise ValueError("dim must be positive")
        self._dim = dim
        self._lock = threading.RLock()
        self._vectors: NDArray[np.float32] = np.empty((0, dim), dtype=np.float32)
        self._ids: NDArray[np.int64] = np.empty(0, dtype=np.int64)
        self._n = 0
        self._row_of: dict[int, int] = {}

    kind = "exact"

    @property
    def dim(self) -> int:
        return self._dim

    def __len__(self) -> int:
        return self._n

    def wait(self, timeout: float | None = None) -> bool:
        """Nothing runs in the background: ``True`` at once."""
        return True

    def close(self) -> None:
        """Nothing to stop."""

    def _reserve(self, needed: int) -> None:
        capacity = self._vectors.shape[0]
        if needed <= capacity:
            return
        # Doubling keeps the amortised cost of an append constant.
        new_capacity = max(needed, 2 * capacity, 64)
        vectors = np.empty((new_capacity, self._dim), dtype=np.float32)
        vectors[: self._n] = self._vectors[: self._n]
        ids = np.empty(new_capacity, dtype=np.int64)
        ids[: self._n] = self._ids[: self._n]
        self._vectors, self._ids = vectors, ids

    def add(self, ids: Sequence[int], vectors: NDArray[np.float32]) -> None:
        matrix = _normalise(_as_matrix(vectors, self._dim))
        id_array = _as_ids(ids, matrix.shape[0])
        self._add_rows(id_array, matrix)

    def _add_rows(self, id_array: NDArray[np.int64], matrix: NDArray[np.float32]) -> None:
        with self._lock:
            self._reserve(self._n + len(id_array))
            for entry_id, row in zip(id_array.tolist(), matrix, strict=True):
                existing = self._row_of.get(entry_id)
                if existing is not None:
                    # Same contract as hnswlib: adding a known id replaces its vector.
                    self._vectors[existing] = row
                    continue
                self._vectors[self._n] = row
                self._ids[self._n] = entry_id
                self._row_of[entry_id] = self._n
                self._n += 1

    def search(self, vector: NDArray[np.float32], k: int) -> list[tuple[int, float]]:
        query = _normalise(_as_query(vector, self._dim))[0]
        with self._lock:
            n = self._n
            k = min(int(k), n)
            if k <= 0:
                return []
            scores = self._vectors[:n] @ query
            top = np.argpartition(-scores, k - 1)[:k] if k < n else np.arange(n)
            top_ids = self._ids[top]
        top_scores = scores[top]
        # Ties broken by id so that results are deterministic.
        order = np.lexsort((top_ids, -top_scores))
        return [(int(top_ids[i]), _clamp(float(top_scores[i]))) for i in order]

    def remove(self, entry_id: int) -> None:
        with self._lock:
            row = self._row_of.pop(int(entry_id), None)
            if row is None:
                return
            last = self._n - 1
            if row != last:
                self._vectors[row] = self._vectors[last]
                moved = int(self._ids[last])
                self._ids[row] = moved
                self._row_of[moved] = row
            self._n = last

    def items(self) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
        """Copies of the live ids and their (normalised) vectors."""
        with self._lock:
            return self._ids[: self._n].copy(), self._vectors[: self._n].copy()

    def save(self, path: Path) -> None:
        path = Path(path)
        ids, vectors = self.items()
        # One structured .npy file, loadable without pickle.
        record = np.empty(len(ids), dtype=[("id", "<i8"), ("v", "<f4", (self._dim,))])
        record["id"] = ids
        record["v"] = vectors
        tmp = _tmp_name(path)
        try:
            with open(tmp, "wb") as f:
                np.save(f, record, allow_pickle=False)
            _replace_atomically(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    def load(self, path: Path) -> None:
        try:
            with open(Path(path), "rb") as f:
                record = np.load(f, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise StoreError(f"cannot read exact index {path}: {exc}") from exc
        names = record.dtype.names or ()
        if "id" not in names or "v" not in names or record["v"].shape[1:] != (self._dim,):
            raise StoreError(f"{path} is not an exact index of dimension {self._dim}")
        with self._lock:
            self._vectors = np.empty((0, self._dim), dtype=np.float32)
            self._ids = np.empty(0, dtype=np.int64)
            self._n = 0
            self._row_of = {}
            self._add_rows(
                np.asarray(record["id"], dtype=np.int64),
                _normalise(np.asarray(record["v"], dtype=np.float32)),
            )


class HnswIndex:
    """hnswlib's HNSW graph in cosine space, made safe to share between threads.

    hnswlib reports ``distance = 1 - cosine``; :meth:`search` returns the cosine. Capacity
    doubles before an insert would overflow it; ``k`` is capped at the number of live
    (non-removed) vectors and the search ``ef`` is raised to at least ``k`` (hnswlib fails with
    "contiguous 2D array" otherwise). Removal marks the vector deleted (hnswlib cannot free it).

    :meth:`save` writes hnswlib's own file at ``path`` and a small JSON file next to it
    (``<path>.meta.json``) with the parameters and the removed ids, which hnswlib's file keeps
    but cannot list cheaply; ``ef`` is restored from it on :meth:`load` (hnswlib forgets it).
    """

    def __init__(
        self,
        dim: int,
        *,
        # M=32 rather than hnswlib's usual 16: on random vectors, the hard case for a graph,
        # M=16 missed the neighbour of near-duplicate queries far more often, and a missed
        # neighbour is a needless LLM call. On real embeddings both find it and M=32 still
        # builds within the goal, so the robust choice costs little build time. The figures:
        # docs/performance.md (the HNSW rows; benchmarks/bench_index.py).
        M: int = 32,
        ef_construction: int = 200,
        ef_search: int = 64,
        initial_capacity: int = 1024,
        num_threads: int = -1,
    ) -> None:
        if dim <= 0:
            raise ValueError("dim must be positive")
        self._dim = dim
        self._M = M
        self._ef_construction = ef_construction
        self._ef_search = ef_search
        self._num_threads = num_threads
        self._lock = threading.RLock()
        self._index = self._new_index(max(int(initial_capacity), 16))
        self._deleted: set[int] = set()

    def _new_index(self, capacity: int) -> Any:
        index = hnswlib.Index(space="cosine", dim=self._dim)
        index.init_index(max_elements=capacity, ef_construction=self._ef_construction, M=self._M)
        index.set_ef(self._ef_search)
        return index

    kind = "hnsw"

    @property
    def dim(self) -> int:
        return self._dim

    def wait(self, timeout: float | None = None) -> bool:
        """Nothing runs in the background: ``True`` at once."""
        return True

    def close(self) -> None:
        """Nothing to stop."""

    @property
    def ef_search(self) -> int:
        """The beam width of a search: higher is slower and finds the true neighbour more often."""
        return self._ef_search

    @ef_search.setter
    def ef_search(self, value: int) -> None:
        with self._lock:
            self._ef_search = int(value)
            self._index.set_ef(self._ef_search)

    @property
    def capacity(self) -> int:
        with self._lock:
            return int(self._index.get_max_elements())

    def __len__(self) -> int:
        with self._lock:
            return int(self._index.element_count) - len(self._deleted)

    def add(self, ids: Sequence[int], vectors: NDArray[np.float32]) -> None:
        matrix = _as_matrix(vectors, self._dim)
        id_array = _as_ids(ids, matrix.shape[0])
        if id_array.size == 0:
            return
        with self._lock:
            needed = int(self._index.element_count) + len(id_array)
            capacity = int(self._index.get_max_elements())
            if needed > capacity:
                # hnswlib raises instead of growing; resizing copies the graph, so double.
                self._index.resize_index(max(needed, 2 * capacity))
            # Re-adding a removed id revives it in hnswlib (it unmarks the label).
            self._deleted.difference_update(id_array.tolist())
            # A single vector gains nothing from a thread pool.
            threads = 1 if len(id_array) < 64 else self._num_threads
            self._index.add_items(matrix, id_array, num_threads=threads)

    def search(self, vector: NDArray[np.float32], k: int) -> list[tuple[int, float]]:
        query = _as_query(vector, self._dim)
        with self._lock:
            live = int(self._index.element_count) - len(self._deleted)
            k = min(int(k), live)
            if k <= 0:
                return []
            ef = max(self._ef_search, k)
            self._index.set_ef(ef)
            try:
                labels, distances = self._query(query, k, ef, live)
            finally:
                self._index.set_ef(self._ef_search)
        return [
            (int(label), _clamp(1.0 - float(distance)))
            for label, distance in zip(labels, distances, strict=True)
        ]

    def _query(
        self, query: NDArray[np.float32], k: int, ef: int, live: int
    ) -> tuple[list[int], list[float]]:
        # With deleted vectors in the graph, a greedy search can still come back with fewer than
        # k live results; widen the beam, and as a last resort ask for fewer.
        while True:
            try:
                labels, distances = self._index.knn_query(query, k=k, num_threads=1)
                return labels[0].tolist(), distances[0].tolist()
            except RuntimeError:
                if ef < live:
                    ef = min(live, ef * 4)
                    self._index.set_ef(ef)
                elif k > 1:
                    k -= 1
                else:
                    return [], []

    def remove(self, entry_id: int) -> None:
        entry_id = int(entry_id)
        with self._lock:
            if entry_id in self._deleted:
                return
            try:
                self._index.mark_deleted(entry_id)
            except RuntimeError:
                return  # never added: removing is idempotent
            self._deleted.add(entry_id)

    def _meta_path(self, path: Path) -> Path:
        return path.with_name(path.name + ".meta.json")

    def save(self, path: Path) -> None:
        path = Path(path)
        meta_path = self._meta_path(path)
        tmp, meta_tmp = _tmp_name(path), _tmp_name(meta_path)
        try:
            with self._lock:
                self._index.save_index(str(tmp))
                meta = {
                    "format": "hnswlib",
                    "dim": self._dim,
                    "M": self._M,
                    "ef_construction": self._ef_construction,
                    "ef_search": self._ef_search,
                    "deleted": sorted(self._deleted),
                }
            meta_tmp.write_text(json.dumps(meta), encoding="utf-8")
            _replace_atomically(tmp, path)
            _replace_atomically(meta_tmp, meta_path)
        finally:
            tmp.unlink(missing_ok=True)
            meta_tmp.unlink(missing_ok=True)

    def load(self, path: Path) -> None:
        path = Path(path)
        try:
            meta = json.loads(self._meta_path(path).read_text(encoding="utf-8"))
            if meta.get("format") != "hnswlib" or meta.get("dim") != self._dim:
                raise StoreError(f"{path} is not an hnswlib index of dimension {self._dim}")
            index = hnswlib.Index(space="cosine", dim=self._dim)
            index.load_index(str(path))
            deleted = {int(i) for i in meta.get("deleted", [])}
        except (OSError, ValueError, RuntimeError, TypeError) as exc:
            raise StoreError(f"cannot load hnswlib index {path}: {exc}") from exc
        with self._lock:
            self._index = index
            self._deleted = deleted
            self._M = int(meta.get("M", self._M))
            self._ef_construction = int(meta.get("ef_construction", self._ef_construction))
            self._ef_search = int(meta.get("ef_search", self._ef_search))
            # hnswlib does not store ef in its file; without this a loaded index searches with
            # ef=10 and its recall silently drops.
            self._index.set_ef(self._ef_search)


@dataclass
class _Migration:
    """An exact-to-HNSW switch in progress: the snapshot being built, and what happened since."""

    ids: NDArray[np.int64]
    vectors: NDArray[np.float32]
    # Adds and removals made while the graph was being built, replayed onto it in order.
    ops: list[tuple[str, Any, Any]] = field(default_factory=list)
    cancelled: bool = False
    thread: threading.Thread | None = None


class AutoIndex:
    """Exact search for small tables, HNSW once a table outgrows ``exact_limit`` vectors.

    Most tables of a simulation stay small (thousands of prompts spread over hundreds of
    category x agent tables); for them brute force is exact, inserts are free, memory is just
    the vectors, and rebuilding from the store is instant. A table that grows past the limit
    moves to HNSW, whose search time hardly grows with size.

    The move builds the graph from a snapshot of the exact index *in a background thread*
    (``background=True``), while searches keep using the exact index and adds/removals are
    recorded and replayed onto the graph; then the graph takes over. Building 10k vectors takes
    seconds, which no single ``add`` or ``search`` call should have to wait for; the same holds
    when a large table is re-indexed from the store after its index file was lost.
    ``background=False`` switches synchronously (deterministic, for tests). Once switched, a
    table stays on HNSW even if it shrinks. ``hnsw_options`` go to :class:`HnswIndex`.
    """

    def __init__(
        self,
        dim: int,
        *,
        exact_limit: int = DEFAULT_EXACT_LIMIT,
        background: bool = True,
        **hnsw_options: Any,
    ) -> None:
        self._dim = dim
        self._exact_limit = exact_limit
        self._background = background
        self._hnsw_options = hnsw_options
        self._lock = threading.RLock()
        self._exact = ExactIndex(dim)
        self._hnsw: HnswIndex | None = None
        self._migration: _Migration | None = None

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def inner(self) -> ExactIndex | HnswIndex:
        """The index searches use right now."""
        with self._lock:
            return self._hnsw if self._hnsw is not None else self._exact

    @property
    def kind(self) -> str:
        """The form :meth:`save` writes now: ``exact`` until the switch to ``hnsw`` is done."""
        return self.inner.kind

    @property
    def switching(self) -> bool:
        """Whether a switch to HNSW is being built."""
        return self._migration is not None

    def __len__(self) -> int:
        return len(self.inner)

    def add(self, ids: Sequence[int], vectors: NDArray[np.float32]) -> None:
        with self._lock:
            if self._hnsw is not None:
                self._hnsw.add(ids, vectors)
                return
            id_list = list(ids)
            self._exact.add(id_list, vectors)
            if self._migration is not None:
                self._migration.ops.append(("add", id_list, np.array(vectors, dtype=np.float32)))
            elif len(self._exact) > self._exact_limit:
                self._start_migration()

    def search(self, vector: NDArray[np.float32], k: int) -> list[tuple[int, float]]:
        return self.inner.search(vector, k)

    def remove(self, entry_id: int) -> None:
        with self._lock:
            if self._hnsw is not None:
                self._hnsw.remove(entry_id)
                return
            self._exact.remove(entry_id)
            if self._migration is not None:
                self._migration.ops.append(("remove", int(entry_id), None))

    def _start_migration(self) -> None:
        ids, vectors = self._exact.items()
        migration = _Migration(ids=ids, vectors=vectors)
        self._migration = migration
        logger.info("index of %d vectors is moving from exact search to HNSW", len(ids))
        if not self._background:
            self._migrate(migration)
            return
        migration.thread = threading.Thread(
            target=self._migrate, args=(migration,), name="llmcache-hnsw-build", daemon=True
        )
        _LIVE_BUILDS.add(self)
        migration.thread.start()

    def _migrate(self, migration: _Migration) -> None:
        try:
            options = dict(self._hnsw_options)
            options.setdefault("initial_capacity", 2 * len(migration.ids))
            hnsw = HnswIndex(self._dim, **options)
            # In small chunks, so that close() or load() can stop a build that is no longer
            # wanted within about a second, and join it before the interpreter exits.
            for start in range(0, len(migration.ids), _BUILD_CHUNK):
                if migration.cancelled:
                    return
                stop = start + _BUILD_CHUNK
                hnsw.add(migration.ids[start:stop].tolist(), migration.vectors[start:stop])
            migration.vectors = np.empty((0, self._dim), dtype=np.float32)
            while True:
                with self._lock:
                    if migration.cancelled or self._migration is not migration:
                        return
                    ops, migration.ops = migration.ops, []
                    if not ops:
                        # Caught up, under the lock: nothing can slip in between.
                        self._hnsw = hnsw
                        self._exact = ExactIndex(self._dim)
                        self._migration = None
                        logger.info("index now searches with HNSW (%d vectors)", len(hnsw))
                        return
                # Replayed outside the lock: searches keep using the exact index meanwhile.
                for op, arg, vectors in ops:
                    if op == "add":
                        hnsw.add(arg, vectors)
                    else:
                        hnsw.remove(arg)
        except Exception:
            # The exact index is still complete and correct; the next add past the limit
            # tries again.
            logger.exception("building the HNSW index failed; staying with exact search")
            with self._lock:
                if self._migration is migration:
                    self._migration = None

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for a switch in progress to finish; ``True`` when none is running."""
        migration = self._migration
        if migration is not None and migration.thread is not None:
            migration.thread.join(timeout)
        return self._migration is None

    def close(self) -> None:
        """Stop a background build and wait for its thread (the exact index stays complete).

        The wait matters: a daemon thread killed at interpreter exit while hnswlib's worker
        threads run aborts the process ("terminate called without an active exception").
        """
        with self._lock:
            migration = self._migration
            if migration is not None:
                migration.cancelled = True
                self._migration = None
        thread = migration.thread if migration is not None else None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def save(self, path: Path) -> None:
        with self._lock:
            # During a switch the exact index is the complete one; a later load resumes.
            self.inner.save(path)

    def load(self, path: Path) -> None:
        path = Path(path)
        try:
            with open(path, "rb") as f:
                head = f.read(len(_NPY_MAGIC))
        except OSError as exc:
            raise StoreError(f"cannot read index {path}: {exc}") from exc
        if head == _NPY_MAGIC:
            exact = ExactIndex(self._dim)
            exact.load(path)
            with self._lock:
                self.close()
                self._exact, self._hnsw = exact, None
                if len(exact) > self._exact_limit:
                    self._start_migration()
        else:
            hnsw = HnswIndex(self._dim, **self._hnsw_options)
            hnsw.load(path)
            with self._lock:
                self.close()
                self._exact, self._hnsw = ExactIndex(self._dim), hnsw
