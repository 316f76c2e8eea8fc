"""LocalBackend: a cache directory = a DiskStore (the record) + one vector index per partition.

Index files are derived data. Under ``path/"index"`` each partition has a sidecar
``{pkey}.json`` naming its index file ``{pkey}.{token}.idx`` and what that file holds (embedder,
dimension, count, highest id, the sha256 of each file). A sidecar that disagrees with the store,
a file whose checksum differs (truncated, bytes flipped), or a file that will not load means the
index is rebuilt from the store; deleting the ``index`` directory is always safe. The checksum is
checked before a file reaches hnswlib, whose loader trusts the sizes written in the file.

Several processes may share one directory. Ids are committed in order by the store, so each
process keeps its indexes current by "catching up": before a search it compares the store's
last id of the partition with the last id it has indexed, and indexes the difference.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._config import Limits
from ._errors import StoreError
from ._index import AutoIndex
from ._manifest import EmbedderRecord, Manifest
from ._protocols import VectorIndex
from ._store import DiskStore
from ._types import CacheEntry, Partition

__all__ = ["LocalBackend"]

logger = logging.getLogger(__name__)

IndexFactory = Callable[[int], VectorIndex]

_ORPHAN_AGE_S = 3600.0
_BATCH = 2048  # vectors per index.add during a rebuild: big enough for hnswlib's thread pool


def _default_index(dim: int) -> VectorIndex:
    return AutoIndex(dim)


@dataclass
class _PartitionIndex:
    index: VectorIndex
    indexed_upto: int = 0  # every id <= this has been offered to the index
    unsaved: int = 0  # ids indexed since the index file was last written
    saved_kind: str = ""  # what kind of index the file holds (AutoIndex changes kind)
    lock: threading.RLock = field(default_factory=threading.RLock)

    def needs_saving(self) -> bool:
        return self.unsaved > 0 or self.index.kind != self.saved_kind


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class LocalBackend:
    """The embedded default backend: entries in a diskcache directory, vectors in hnswlib.

    ``index_factory(dim)`` makes the index of each partition (default: :class:`AutoIndex`,
    exact for small tables and HNSW for large ones). ``save_every`` writes a partition's index
    file after that many new vectors, so a process that dies without :meth:`close` leaves
    little to re-index; ``None`` saves only on close.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        index_factory: IndexFactory | None = None,
        save_every: int | None = 50_000,
    ) -> None:
        self._path = Path(path)
        self._index_dir = self._path / "index"
        self._store = DiskStore(self._path)
        self._index_factory: IndexFactory = index_factory or _default_index
        self._save_every = save_every
        self._lock = threading.RLock()
        self._indexes: dict[str, _PartitionIndex] = {}
        self._closed = False
        self._embedder = EmbedderRecord(
            where=str(self._path),
            remedy="use a fresh cache directory (or delete this one to rebuild the cache with "
            "the new embedder)",
            read=self._store.read_manifest,
            # Atomic: if another process recorded a manifest first, that one is the directory's.
            record=self._store.init_manifest,
            manifest=self._store.read_manifest(),
        )

    @property
    def path(self) -> Path:
        return self._path

    @property
    def store(self) -> DiskStore:
        """The directory's entry store (LocalBackend's own part, not a seam: for inspection)."""
        return self._store

    # -- embedder -----------------------------------------------------------------------------

    def check_embedder(self, embedder_id: str, dim: int) -> None:
        self._embedder.check(embedder_id, dim)

    def read_manifest(self) -> Manifest | None:
        """The embedder this directory was built with (``None`` before one is recorded)."""
        return self._store.read_manifest()

    def _dim_for(self, vector_dim: int, embedder_id: str | None) -> int:
        """The directory's dimension; records the manifest if nobody has yet."""
        dim = self._embedder.dim_for(vector_dim, embedder_id)
        # None: a search before anything was stored, with nothing to check against.
        return vector_dim if dim is None else dim

    # -- index files --------------------------------------------------------------------------

    def _sidecar_path(self, pkey: str) -> Path:
        return self._index_dir / f"{pkey}.json"

    def _read_sidecar(self, pkey: str) -> dict[str, Any] | None:
        try:
            value = json.loads(self._sidecar_path(pkey).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            logger.warning("ignoring unreadable index sidecar of %s", pkey, exc_info=True)
            return None
        return value if isinstance(value, dict) else None

    def _load_index(self, pkey: str, dim: int) -> _PartitionIndex | None:
        """The saved index of a partition, if its sidecar agrees with the store."""
        sidecar = self._read_sidecar(pkey)
        if sidecar is None:
            return None
        manifest = self._embedder.manifest
        last_id = self._store.last_id(pkey)
        file_name = sidecar.get("file")
        saved_upto = sidecar.get("last_id")
        if (
            manifest is None
            or sidecar.get("store_id") != self._store.store_id
            or sidecar.get("embedder_id") != manifest.embedder_id
            or sidecar.get("dim") != dim
            or not isinstance(file_name, str)
            or "/" in file_name
            or "\\" in file_name
            or not isinstance(saved_upto, int)
            # A sidecar ahead of the store belongs to a store that has since been replaced.
            or saved_upto > last_id
        ):
            logger.info("index of partition %s is stale; rebuilding it", pkey)
            return None
        if not self._files_intact(pkey, file_name, sidecar.get("sha256")):
            return None
        index = self._index_factory(dim)
        try:
            index.load(self._index_dir / file_name)
        except (StoreError, OSError, ValueError, RuntimeError):
            logger.warning("index of partition %s would not load; rebuilding it", pkey)
            return None
        if len(index) != sidecar.get("count"):
            logger.warning("index of partition %s does not match its sidecar; rebuilding", pkey)
            return None
        return _PartitionIndex(index=index, indexed_upto=saved_upto, saved_kind=index.kind)

    def _files_intact(self, pkey: str, file_name: str, digests: object) -> bool:
        """Whether the index files match the checksums their sidecar recorded.

        Sidecars written before checksums were recorded have none: those files are loaded
        unchecked, as before (the loaders still refuse what they cannot parse).
        """
        if digests is None:
            return True
        try:
            if not isinstance(digests, dict) or file_name not in digests:
                raise ValueError("the sidecar's checksums are malformed")
            for name, expected in digests.items():
                if not str(name).startswith(file_name) or "/" in str(name) or "\\" in str(name):
                    raise ValueError(f"the sidecar names a foreign file {name!r}")
                if _file_digest(self._index_dir / str(name)) != expected:
                    raise ValueError(f"{name} does not match its checksum")
        except (OSError, ValueError) as exc:
            logger.warning("index of partition %s is damaged (%s); rebuilding it", pkey, exc)
            return False
        return True

    def _save_index(self, pkey: str, state: _PartitionIndex) -> None:
        """Write the index file, then point the sidecar at it (so the pair is never torn)."""
        manifest = self._embedder.manifest
        if manifest is None:
            return
        self._index_dir.mkdir(parents=True, exist_ok=True)
        old = self._read_sidecar(pkey)
        # A fresh file name per save: another process saving the same partition at the same
        # time cannot overwrite the file our sidecar points to.
        file_name = f"{pkey}.{uuid.uuid4().hex[:12]}.idx"
        with state.lock:
            state.index.save(self._index_dir / file_name)
            # Every file the save wrote (hnswlib writes a .meta.json beside its graph).
            digests = {
                path.name: _file_digest(path)
                for path in sorted(self._index_dir.glob(f"{file_name}*"))
            }
            sidecar = {
                "store_id": self._store.store_id,
                "embedder_id": manifest.embedder_id,
                "dim": state.index.dim,
                "count": len(state.index),
                "last_id": state.indexed_upto,
                "file": file_name,
                "sha256": digests,
            }
            state.unsaved = 0
            state.saved_kind = state.index.kind
        tmp = self._index_dir / f".{pkey}.{uuid.uuid4().hex}.tmp"
        tmp.write_text(json.dumps(sidecar), encoding="utf-8")
        os.replace(tmp, self._sidecar_path(pkey))
        self._remove_old_files(pkey, file_name, old.get("file") if old else None)

    def _remove_old_files(self, pkey: str, current: str, previous: object) -> None:
        """Delete the index file the sidecar used to name, and orphans of crashed or raced saves.

        A file of another process's save in progress is young, so only old orphans go; if a
        referenced file is ever deleted anyway, the next open just rebuilds that index.
        """
        cutoff = time.time() - _ORPHAN_AGE_S
        for candidate in self._index_dir.glob(f"{pkey}.*.idx*"):
            if candidate.name.startswith(current):
                continue
            try:
                is_previous = isinstance(previous, str) and candidate.name.startswith(previous)
                if is_previous or candidate.stat().st_mtime < cutoff:
                    candidate.unlink(missing_ok=True)
            except OSError:
                logger.debug("could not remove %s", candidate, exc_info=True)

    # -- per-partition index ------------------------------------------------------------------

    def _state(self, pkey: str, dim: int) -> _PartitionIndex:
        state = self._indexes.get(pkey)
        if state is not None:
            return state
        with self._lock:
            state = self._indexes.get(pkey)
            if state is None:
                if self._closed:
                    raise StoreError("the backend is closed")
                state = self._load_index(pkey, dim)
                if state is None:
                    # saved_kind "" marks it unsaved: a rebuilt index is worth saving.
                    state = _PartitionIndex(index=self._index_factory(dim))
                self._indexes[pkey] = state
        return state

    def _catch_up(self, pkey: str, state: _PartitionIndex, last_id: int | None = None) -> None:
        """Index the entries stored (by anyone) since this index last looked."""
        with state.lock:
            last = self._store.last_id(pkey) if last_id is None else last_id
            if last <= state.indexed_upto:
                return
            dim = state.index.dim
            ids: list[int] = []
            vectors: list[NDArray[np.float32]] = []
            upto = state.indexed_upto
            # iterate drops (evicts and counts) entries it cannot decode; an entry whose vector
            # is unusable is dropped the same way here, never skipped silently.
            for entry in self._store.iterate(pkey, after_id=state.indexed_upto):
                upto = entry.id
                try:
                    vector = entry.vector()
                except ValueError as exc:  # base64 or length damage (binascii.Error included)
                    self._store.drop_corrupt(pkey, entry.id, f"its vector is unreadable: {exc}")
                    continue
                if vector.shape != (dim,) or not np.all(np.isfinite(vector)):
                    self._store.drop_corrupt(
                        pkey,
                        entry.id,
                        f"its vector (shape {vector.shape}) is not {dim} finite numbers",
                    )
                    continue
                ids.append(entry.id)
                vectors.append(vector)
                if len(ids) >= _BATCH:
                    self._flush(state, ids, vectors, upto)
                    ids, vectors = [], []
            # iterate skips evicted and corrupt ids, so the last entry it yields may be below
            # `last`; every id up to `last` was committed before iterate started and so has
            # been seen, and need not be looked at again.
            self._flush(state, ids, vectors, max(upto, last))

    def _flush(
        self,
        state: _PartitionIndex,
        ids: list[int],
        vectors: list[NDArray[np.float32]],
        upto: int,
    ) -> None:
        if ids:
            state.index.add(ids, np.stack(vectors))
            state.unsaved += len(ids)
        state.indexed_upto = max(state.indexed_upto, upto)

    def _maybe_autosave(self, pkey: str, state: _PartitionIndex) -> None:
        if self._save_every is not None and state.unsaved >= self._save_every:
            try:
                self._save_index(pkey, state)
            except (OSError, StoreError, RuntimeError):
                logger.warning("could not save the index of partition %s", pkey, exc_info=True)

    # -- CacheBackend -------------------------------------------------------------------------

    def add(self, entry: CacheEntry, *, now: float | None = None) -> int:
        vector = entry.vector()
        dim = self._dim_for(len(vector), entry.embedder_id)
        pkey = entry.partition.key
        entry_id = self._store.put(entry, now=now)
        state = self._state(pkey, dim)
        with state.lock:
            if state.indexed_upto == entry_id - 1:
                # The common case: nobody else wrote in between, so skip re-reading the store.
                state.index.add([entry_id], vector.reshape(1, -1))
                state.indexed_upto = entry_id
                state.unsaved += 1
            else:
                self._catch_up(pkey, state)
        self._maybe_autosave(pkey, state)
        return entry_id

    def search(
        self, partition: Partition, vector: NDArray[np.float32], k: int
    ) -> list[tuple[int, float]]:
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        if k <= 0:
            return []
        pkey = partition.key
        dim = self._dim_for(query.shape[0], None)
        # Count first, then the last id: an entry evicted by another process then shows up as
        # the caught-up index holding more vectors than the store holds entries.
        stored = self._store.count(pkey)
        last = self._store.last_id(pkey)
        state = self._indexes.get(pkey)
        if state is None:
            if last == 0:
                return []  # an empty table: no index needed yet
            state = self._state(pkey, dim)
        self._catch_up(pkey, state, last)
        results = state.index.search(query, k)
        if len(state.index) > stored:
            results = self._drop_evicted(pkey, state, query, k, results)
        self._maybe_autosave(pkey, state)
        return results

    def _drop_evicted(
        self,
        pkey: str,
        state: _PartitionIndex,
        query: NDArray[np.float32],
        k: int,
        results: list[tuple[int, float]],
    ) -> list[tuple[int, float]]:
        """Remove results whose entries another process has evicted, and search again.

        Only runs while the index holds more vectors than the store has entries, which only
        evictions by other processes cause; each pass removes at least one stale id.
        """
        for _ in range(8):
            gone = [i for i, _ in results if not self._store.contains(pkey, i)]
            if not gone:
                return results
            with state.lock:
                for entry_id in gone:
                    state.index.remove(entry_id)
                state.unsaved += len(gone)
            results = state.index.search(query, k)
        return [(i, s) for i, s in results if self._store.contains(pkey, i)]

    def get(self, partition_key: str, entry_id: int) -> CacheEntry | None:
        return self._store.get(partition_key, entry_id)

    def evict(self, partition_key: str, entry_id: int) -> None:
        state = self._indexes.get(partition_key)
        if state is None:
            self._store.evict(partition_key, entry_id)
            return
        # Under the partition lock, so a concurrent catch-up cannot re-add what we remove.
        with state.lock:
            self._store.evict(partition_key, entry_id)
            state.index.remove(entry_id)
            state.unsaved += 1

    # -- bounds (BoundedBackend) ------------------------------------------------------------

    def _forget(self, gone: Sequence[tuple[str, int]]) -> None:
        """Remove evicted ids from this process's indexes (others notice by the counts)."""
        for pkey, entry_id in gone:
            state = self._indexes.get(pkey)
            if state is not None:
                with state.lock:
                    state.index.remove(entry_id)
                    state.unsaved += 1

    def touch(self, partition_key: str, entry_id: int, now: float) -> None:
        self._store.touch(partition_key, entry_id, now)

    def expire(
        self, partition_key: str, entry_ids: Sequence[int], now: float, ttl_seconds: float
    ) -> list[int]:
        gone = self._store.expire(partition_key, list(entry_ids), now, ttl_seconds)
        self._forget([(partition_key, i) for i in gone])
        return gone

    def enforce(
        self,
        limits: Limits,
        now: float,
        *,
        partition_key: str | None = None,
        budget: int | None = None,
    ) -> dict[str, int]:
        counts, gone = self._store.enforce(limits, now, partition_key=partition_key, budget=budget)
        self._forget(gone)
        return counts

    def usage(self) -> tuple[int, int]:
        return self._store.usage()

    def read_limits(self) -> Limits | None:
        return self._store.read_limits()

    def write_limits(self, limits: Limits) -> None:
        self._store.write_limits(limits)

    def partitions(self) -> list[Partition]:
        return self._store.partitions()

    def count(self, partition_key: str) -> int:
        return self._store.count(partition_key)

    def iterate(self, partition_key: str) -> Iterator[CacheEntry]:
        return self._store.iterate(partition_key)

    def add_many(self, entries: Sequence[CacheEntry]) -> list[int]:
        """Add entries one by one (each is its own transaction; a failure stops the batch)."""
        return [self.add(entry) for entry in entries]

    def add_stats(self, partition_key: str, delta: dict[str, float]) -> None:
        self._store.add_stats(partition_key, delta)

    def read_stats(self) -> dict[str, dict[str, float]]:
        return self._store.read_stats()

    def save(self) -> None:
        """Write every changed index file now (``close`` does this too)."""
        with self._lock:
            states = list(self._indexes.items())
        for pkey, state in states:
            if state.needs_saving():
                try:
                    self._save_index(pkey, state)
                except (OSError, StoreError, RuntimeError):
                    # Index files are derived data: the next open rebuilds what is missing.
                    logger.warning("could not save the index of %s", pkey, exc_info=True)

    def wait_for_indexes(self, timeout: float | None = None) -> bool:
        """Wait until no table's index is being rebuilt in the background (a table that
        outgrew exact search moves to HNSW in a thread); ``True`` when none is."""
        with self._lock:
            states = list(self._indexes.values())
        done = True
        for state in states:
            done = state.index.wait(timeout) and done
        return done

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self.save()
            self._closed = True
            for state in self._indexes.values():
                # Stops a background HNSW build (AutoIndex); the file saved above is complete.
                state.index.close()
            self._indexes.clear()
        self._store.close()

    def __enter__(self) -> LocalBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LocalBackend({str(self._path)!r})"
