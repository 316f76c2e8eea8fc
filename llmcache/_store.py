"""The default entry store: a diskcache directory holding JSON text.

Layout of the keys (all values are JSON text or plain integers, never pickles)::

    manifest            Manifest JSON: the embedder the directory was built with
    store_id            a random id made with the store (index files record it)
    partitions          JSON list of the partition keys that have ever held an entry
    stats:keys          JSON list of the partition keys that have counters
    p:{pkey}            Partition JSON
    seq:{pkey}          the last id assigned in the partition (int)
    n:{pkey}            how many entries the partition holds now (int)
    s:{pkey}            counters JSON, e.g. {"lookups": 12.0, "max_sim": 0.97}
    e:{pkey}:{id:012d}  CacheEntry JSON

diskcache is SQLite underneath, so one ``transact()`` is one SQLite write transaction: an
entry, its id and the counters commit together or not at all, and every process that opens
the same directory sees them in commit order.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import diskcache
from pydantic import ValidationError

from ._errors import CorruptEntryError, StoreError
from ._protocols import Manifest
from ._types import CacheEntry, Partition

__all__ = ["DiskStore"]

logger = logging.getLogger(__name__)

_MANIFEST = "manifest"
_PARTITIONS = "partitions"
_STATS_KEYS = "stats:keys"
_STORE_ID = "store_id"


class _TextOnlyDisk(diskcache.Disk):  # type: ignore[misc]  # diskcache has no type stubs
    """diskcache's serialiser, refusing pickle both ways.

    diskcache pickles any value that is not str/bytes/int/float, and unpickles whatever a
    stored row says is a pickle; unpickling a file someone else can write runs their code.
    Refusing here makes "JSON text only" a property of the directory, not a convention.
    """

    def put(self, key: Any) -> Any:
        if type(key) is not str:
            raise TypeError(f"llmcache keys are strings, not {type(key)}")
        return super().put(key)

    def get(self, key: Any, raw: bool) -> Any:
        if not raw:
            raise StoreError("refusing to unpickle a key in the cache directory")
        return super().get(key, raw)

    def store(self, value: Any, read: bool, key: Any = diskcache.core.UNKNOWN) -> Any:
        if read or type(value) not in (str, int, float):
            raise TypeError(f"llmcache stores JSON text and integers only, not {type(value)}")
        return super().store(value, read, key=key)

    def fetch(self, mode: int, filename: str | None, value: Any, read: bool) -> Any:
        if mode == diskcache.core.MODE_PICKLE:
            raise StoreError("refusing to unpickle a value in the cache directory")
        return super().fetch(mode, filename, value, read)


def _entry_key(partition_key: str, entry_id: int) -> str:
    # Zero-padded so that keys sort in id order for anyone browsing the database.
    return f"e:{partition_key}:{entry_id:012d}"


def _merge_counter(name: str, old: float | None, new: float) -> float:
    if old is None:
        return new
    if name.startswith("max_"):
        return max(old, new)
    if name.startswith("min_"):
        return min(old, new)
    return old + new


class DiskStore:
    """Entries, counters and the manifest of one cache directory (``path/"store"``).

    Safe to share between threads and between processes that open the same directory.
    ``path/"manifest.json"`` is a human-readable copy of the manifest; the copy inside the
    database is the one that is checked.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = Path(path)
        self._path.mkdir(parents=True, exist_ok=True)
        try:
            self._cache = diskcache.Cache(
                str(self._path / "store"),
                disk=_TextOnlyDisk,
                # diskcache is a cache: by default it culls the oldest items past 1 GB. Here it
                # is the store of record, so nothing may disappear behind our back.
                eviction_policy="none",
                cull_limit=0,
                size_limit=2**62,
                statistics=False,
                tag_index=False,
            )
        except Exception as exc:
            raise StoreError(f"cannot open the cache store in {self._path}: {exc}") from exc
        self._store_id: str | None = None

    @property
    def path(self) -> Path:
        return self._path

    @property
    def cache(self) -> diskcache.Cache:
        """The underlying ``diskcache.Cache`` (for tests and maintenance)."""
        return self._cache

    # -- helpers ------------------------------------------------------------------------------

    def _json_list(self, key: str) -> list[str]:
        text = self._cache.get(key)
        if text is None:
            return []
        try:
            value = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise StoreError(f"the store's {key!r} record is corrupt") from exc
        return [str(v) for v in value]

    def _append_to_list(self, key: str, item: str) -> None:
        """Add ``item`` to a JSON list; call inside a transaction."""
        items = self._json_list(key)
        if item not in items:
            items.append(item)
            self._cache.set(key, json.dumps(items))

    def _int(self, key: str) -> int:
        value = self._cache.get(key, 0)
        return int(value)

    # -- manifest -----------------------------------------------------------------------------

    def read_manifest(self) -> Manifest | None:
        text = self._cache.get(_MANIFEST)
        if text is None:
            return None
        try:
            return Manifest.model_validate_json(text)
        except (ValidationError, ValueError, TypeError) as exc:
            raise StoreError(f"the manifest of {self._path} is corrupt: {exc}") from exc

    def write_manifest(self, manifest: Manifest) -> None:
        text = manifest.model_dump_json()
        try:
            self._cache.set(_MANIFEST, text)
        except diskcache.Timeout as exc:
            raise StoreError(f"timed out writing the manifest of {self._path}") from exc
        self._write_manifest_mirror(manifest)

    def init_manifest(self, manifest: Manifest) -> Manifest:
        """Record ``manifest`` unless the directory has one; return the one it has.

        Atomic, so two processes opening a new directory with different embedders cannot both
        believe they won.
        """
        try:
            with self._cache.transact():
                existing = self.read_manifest()
                if existing is None:
                    self._cache.set(_MANIFEST, manifest.model_dump_json())
        except diskcache.Timeout as exc:
            raise StoreError(f"timed out writing the manifest of {self._path}") from exc
        if existing is not None:
            return existing
        self._write_manifest_mirror(manifest)
        return manifest

    @property
    def store_id(self) -> str:
        """A random identity made when the store was created.

        Derived files (index files) record it, so that files left over from a deleted and
        recreated store are never mistaken for this one's, even when the ids line up.
        """
        if self._store_id is None:
            with self._cache.transact():
                value = self._cache.get(_STORE_ID)
                if value is None:
                    value = uuid.uuid4().hex
                    self._cache.set(_STORE_ID, value)
            self._store_id = str(value)
        return self._store_id

    def _write_manifest_mirror(self, manifest: Manifest) -> None:
        mirror = self._path / "manifest.json"
        tmp = mirror.with_name(f".manifest.{uuid.uuid4().hex}.tmp")
        try:
            tmp.write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
            os.replace(tmp, mirror)
        except OSError:
            # Only a convenience copy for humans; the database holds the real one.
            logger.warning("could not write %s", mirror, exc_info=True)
        finally:
            tmp.unlink(missing_ok=True)

    # -- entries ------------------------------------------------------------------------------

    def put(self, entry: CacheEntry) -> int:
        partition = entry.partition
        pkey = partition.key
        try:
            with self._cache.transact():
                # Inside one write transaction: no other writer can take the same id, and a
                # reader that sees seq:{pkey} = n also sees entry n (ids commit in order).
                entry_id = self._int(f"seq:{pkey}") + 1
                stored = entry.model_copy(update={"id": entry_id})
                self._cache.set(_entry_key(pkey, entry_id), stored.model_dump_json())
                self._cache.set(f"seq:{pkey}", entry_id)
                self._cache.set(f"n:{pkey}", self._int(f"n:{pkey}") + 1)
                if f"p:{pkey}" not in self._cache:
                    self._cache.set(f"p:{pkey}", partition.model_dump_json())
                    self._append_to_list(_PARTITIONS, pkey)
        except diskcache.Timeout as exc:
            raise StoreError(f"timed out storing an entry in {self._path}") from exc
        return entry_id

    def get(self, partition_key: str, entry_id: int) -> CacheEntry | None:
        try:
            text = self._cache.get(_entry_key(partition_key, entry_id))
        except StoreError as exc:
            raise CorruptEntryError(f"entry {partition_key}/{entry_id}: {exc}") from exc
        if text is None:
            return None
        if not isinstance(text, str):
            raise CorruptEntryError(f"entry {partition_key}/{entry_id} is not JSON text")
        try:
            entry = CacheEntry.model_validate_json(text)
        except (ValidationError, ValueError) as exc:
            raise CorruptEntryError(f"entry {partition_key}/{entry_id} is corrupt: {exc}") from exc
        if entry.id != entry_id or entry.partition.key != partition_key:
            raise CorruptEntryError(
                f"entry {partition_key}/{entry_id} holds {entry.partition.key}/{entry.id}"
            )
        return entry

    def contains(self, partition_key: str, entry_id: int) -> bool:
        """Whether the entry is stored (without decoding it)."""
        return _entry_key(partition_key, entry_id) in self._cache

    def iterate(self, partition_key: str, after_id: int = 0) -> Iterator[CacheEntry]:
        last = self.last_id(partition_key)
        for entry_id in range(max(after_id, 0) + 1, last + 1):
            try:
                entry = self.get(partition_key, entry_id)
            except CorruptEntryError:
                logger.warning("skipping corrupt entry %s/%d", partition_key, entry_id)
                continue
            if entry is not None:  # None: evicted
                yield entry

    def evict(self, partition_key: str, entry_id: int) -> None:
        try:
            with self._cache.transact():
                if self._cache.delete(_entry_key(partition_key, entry_id)):
                    count = self._int(f"n:{partition_key}")
                    self._cache.set(f"n:{partition_key}", max(count - 1, 0))
        except diskcache.Timeout as exc:
            raise StoreError(f"timed out evicting an entry in {self._path}") from exc

    def partitions(self) -> list[Partition]:
        out: list[Partition] = []
        for pkey in self._json_list(_PARTITIONS):
            text = self._cache.get(f"p:{pkey}")
            if text is None:
                continue
            try:
                out.append(Partition.model_validate_json(text))
            except (ValidationError, ValueError) as exc:
                logger.warning("skipping corrupt partition record %s: %s", pkey, exc)
        return out

    def count(self, partition_key: str) -> int:
        return self._int(f"n:{partition_key}")

    def last_id(self, partition_key: str) -> int:
        return self._int(f"seq:{partition_key}")

    # -- counters -----------------------------------------------------------------------------

    def _read_counters(self, partition_key: str) -> dict[str, float]:
        text = self._cache.get(f"s:{partition_key}")
        if text is None:
            return {}
        try:
            raw = json.loads(text)
            return {str(k): float(v) for k, v in raw.items()}
        except (TypeError, ValueError, AttributeError):
            # Counters are statistics, not answers: losing them must not break the cache.
            logger.warning("resetting corrupt counters of %s", partition_key)
            return {}

    def add_stats(self, partition_key: str, delta: dict[str, float]) -> None:
        if not delta:
            return
        try:
            with self._cache.transact():
                counters = self._read_counters(partition_key)
                is_new = f"s:{partition_key}" not in self._cache
                for name, value in delta.items():
                    counters[name] = _merge_counter(name, counters.get(name), float(value))
                self._cache.set(f"s:{partition_key}", json.dumps(counters, sort_keys=True))
                if is_new:
                    self._append_to_list(_STATS_KEYS, partition_key)
        except diskcache.Timeout as exc:
            raise StoreError(f"timed out adding counters in {self._path}") from exc

    def read_stats(self) -> dict[str, dict[str, float]]:
        return {pkey: self._read_counters(pkey) for pkey in self._json_list(_STATS_KEYS)}

    def close(self) -> None:
        self._cache.close()

    def __enter__(self) -> DiskStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
