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

Damage is expected, not exceptional: a record that cannot be read (bytes that are not UTF-8,
JSON that does not parse or validate, an entry whose checksum fails, a value file that was
deleted) never escapes as a raw ``sqlite3``/``UnicodeDecodeError``. An entry becomes a
``CorruptEntryError`` (the cache evicts it and counts it); a bookkeeping record (``seq:``,
``n:``, ``partitions``, ``stats:keys``) is rebuilt from the keys that are present; the
manifest becomes a ``StoreError`` saying what is wrong.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import diskcache
from pydantic import ValidationError

from ._errors import CorruptEntryError, StoreError
from ._ledger import stats_key
from ._protocols import Manifest
from ._types import CacheEntry, Partition, checksum_problem

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


def _key_range(prefix: str) -> tuple[str, str]:
    """Bounds of the keys starting with ``prefix`` (which ends in ":"): ``[lo, hi)``."""
    return prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)


def _is_decode_error(exc: sqlite3.Error) -> bool:
    # sqlite3 reports text that is not UTF-8 as an OperationalError, like a locked database;
    # only the message tells damage (evict) from a transient failure (never evict for that).
    return "decode" in str(exc).lower()


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

    def _read(self, key: str, default: Any = None, *, what: str | None = None) -> Any:
        """``cache.get`` that turns damage into ``CorruptEntryError`` and any other failure of
        the database into ``StoreError``: never a raw sqlite3 or decoding error."""
        what = what or repr(key)
        try:
            return self._cache.get(key, default)
        except CorruptEntryError:
            raise
        except UnicodeDecodeError as exc:  # a value file that is not UTF-8
            raise CorruptEntryError(f"{what} is not UTF-8 text (its value file)") from exc
        except StoreError as exc:  # a pickle, refused by _TextOnlyDisk
            raise CorruptEntryError(f"{what}: {exc}") from exc
        except sqlite3.Error as exc:
            if _is_decode_error(exc):
                raise CorruptEntryError(f"{what} is not UTF-8 text") from exc
            raise StoreError(f"cannot read {what} in {self._path}: {exc}") from exc

    def _keys_with_prefix(self, prefix: str) -> list[str]:
        """The keys that start with ``prefix``, read from SQLite directly (for repairs only).

        diskcache has no prefix scan of its own (``iterkeys`` walks every key), so this asks
        its table; keys are read as bytes, so a damaged key cannot stop the scan.
        """
        lo, hi = _key_range(prefix)
        try:
            rows = self._cache._sql(  # diskcache's own statement runner (a stable internal)
                "SELECT CAST(key AS BLOB) FROM Cache WHERE raw = 1 AND key >= ? AND key < ?",
                (lo, hi),
            ).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot list the keys of {self._path}: {exc}") from exc
        return [bytes(key).decode("utf-8", "replace") for (key,) in rows]

    def _json_list(self, key: str) -> list[str]:
        try:
            text = self._read(key)
            if text is None:
                return []
            value = json.loads(text)
            if not isinstance(value, list):
                raise ValueError("not a JSON list")
            return [str(v) for v in value]
        except (CorruptEntryError, TypeError, ValueError) as exc:
            return self._repair_list(key, exc)

    def _repair_list(self, key: str, why: Exception) -> list[str]:
        """Rebuild a damaged ``partitions`` / ``stats:keys`` record from the keys present."""
        prefix = {_PARTITIONS: "p:", _STATS_KEYS: "s:"}.get(key)
        if prefix is None:
            raise StoreError(f"the store's {key!r} record is corrupt: {why}") from why
        items = sorted(k[len(prefix) :] for k in self._keys_with_prefix(prefix))
        logger.warning("rebuilt the damaged %r record of %s (%s)", key, self._path, why)
        try:
            with self._cache.transact():
                self._cache.set(key, json.dumps(items))
        except (diskcache.Timeout, sqlite3.Error):
            logger.warning("could not write the rebuilt %r record", key, exc_info=True)
        return items

    def _append_to_list(self, key: str, item: str) -> None:
        """Add ``item`` to a JSON list; call inside a transaction."""
        items = self._json_list(key)
        if item not in items:
            items.append(item)
            self._cache.set(key, json.dumps(items))

    def _entry_ids(self, partition_key: str) -> list[int]:
        """The ids of the entry records present in a partition (for repairs only)."""
        prefix = f"e:{partition_key}:"
        ids = []
        for key in self._keys_with_prefix(prefix):
            suffix = key[len(prefix) :]
            if suffix.isdigit():
                ids.append(int(suffix))
        return ids

    def _int(self, key: str) -> int:
        """A ``seq:`` / ``n:`` record; a damaged one is recomputed from the entries present."""
        try:
            value = self._read(key, 0)
            if type(value) is int and value >= 0:
                return value
            # Some other writer's type (a float, a numeric text): usable if it is whole.
            number = float(value)
            if not number.is_integer() or number < 0:
                raise ValueError(f"{value!r} is not a count")
            return int(number)
        except (CorruptEntryError, TypeError, ValueError) as exc:
            return self._repair_int(key, exc)

    def _repair_int(self, key: str, why: Exception) -> int:
        kind, _, pkey = key.partition(":")
        if kind not in ("seq", "n"):
            raise StoreError(f"the store's {key!r} record is corrupt: {why}") from why
        ids = self._entry_ids(pkey)
        # seq: the highest id present. Ids of entries evicted above it may be handed out
        # again; a lookup can still never serve the wrong answer through a reused id, because
        # the cache re-scores every candidate by the vector stored in the entry itself.
        value = max(ids, default=0) if kind == "seq" else len(ids)
        logger.warning(
            "rebuilt the damaged %r record of %s as %d (%s)", key, self._path, value, why
        )
        try:
            with self._cache.transact():
                self._cache.set(key, value)
        except (diskcache.Timeout, sqlite3.Error):
            logger.warning("could not write the rebuilt %r record", key, exc_info=True)
        return value

    # -- manifest -----------------------------------------------------------------------------

    def read_manifest(self) -> Manifest | None:
        try:
            text = self._read(_MANIFEST)
            if text is None:
                return None
            return Manifest.model_validate_json(text)
        except (CorruptEntryError, ValidationError, ValueError, TypeError) as exc:
            # One line: the command line prints this message as it is.
            reason = (
                str(exc).splitlines()[0]
                if isinstance(exc, CorruptEntryError)
                else ("it is not the JSON of a manifest")
            )
            raise StoreError(
                f"the manifest of the cache in {self._path} is damaged ({reason}), so it cannot "
                "tell which embedder built its vectors; restore the directory from a copy, or "
                "move it aside and start a fresh cache"
            ) from exc

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
                try:
                    value = self._read(_STORE_ID)
                except CorruptEntryError:
                    value = None  # a new identity: index files only get rebuilt
                if not isinstance(value, str):
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
        # Sealed with a checksum (which does not cover the id) so that damage inside valid
        # JSON is caught on read; before the transaction, to hold the write lock briefly.
        sealed = entry.sealed()
        try:
            with self._cache.transact():
                # Inside one write transaction: no other writer can take the same id, and a
                # reader that sees seq:{pkey} = n also sees entry n (ids commit in order).
                entry_id = self._int(f"seq:{pkey}") + 1
                # Read before the entry is written: a damaged record is recounted from the
                # entries present, which must not include this one yet.
                count = self._int(f"n:{pkey}")
                stored = sealed.model_copy(update={"id": entry_id})
                self._cache.set(_entry_key(pkey, entry_id), stored.model_dump_json())
                self._cache.set(f"seq:{pkey}", entry_id)
                self._cache.set(f"n:{pkey}", count + 1)
                if not self._partition_record_ok(pkey):
                    # Missing (a new table) or damaged: (re)written from the entry's own.
                    self._cache.set(f"p:{pkey}", partition.model_dump_json())
                    self._append_to_list(_PARTITIONS, pkey)
        except (diskcache.Timeout, sqlite3.Error) as exc:
            raise StoreError(f"could not store an entry in {self._path}: {exc}") from exc
        return entry_id

    def get(self, partition_key: str, entry_id: int) -> CacheEntry | None:
        """The entry, ``None`` when absent; ``CorruptEntryError`` when it is damaged in any way
        (undecodable bytes, bad JSON, a failed checksum, its value file gone)."""
        key = _entry_key(partition_key, entry_id)
        where = f"entry {partition_key}/{entry_id}"
        text = self._read(key, what=where)
        if text is None:
            # diskcache answers "absent" when a large value's file is missing; the row says
            # whether the entry was evicted (fine) or lost its file (damage, to be dropped).
            if self._has(key):
                raise CorruptEntryError(f"{where}: its value file is missing")
            return None
        if not isinstance(text, str):
            raise CorruptEntryError(f"{where} is not JSON text")
        try:
            data = json.loads(text)
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            problem = checksum_problem(data)
            if problem is not None:
                raise CorruptEntryError(f"{where}: {problem}")
            entry = CacheEntry.model_validate(data)
        except (ValidationError, ValueError, TypeError) as exc:
            raise CorruptEntryError(f"{where} is corrupt: {exc}") from exc
        if entry.id != entry_id or entry.partition.key != partition_key:
            raise CorruptEntryError(f"{where} holds {entry.partition.key}/{entry.id}")
        return entry

    def _has(self, key: str) -> bool:
        try:
            return key in self._cache
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read {key!r} in {self._path}: {exc}") from exc

    def contains(self, partition_key: str, entry_id: int) -> bool:
        """Whether the entry is stored (without decoding it)."""
        return self._has(_entry_key(partition_key, entry_id))

    def iterate(self, partition_key: str, after_id: int = 0) -> Iterator[CacheEntry]:
        """Entries with ``id > after_id`` in id order. A damaged entry met on the way is
        skipped, evicted and counted (``corrupt`` in the table's counters), so that an index
        rebuild neither fails on it nor leaves it to be met again."""
        last = self.last_id(partition_key)
        for entry_id in range(max(after_id, 0) + 1, last + 1):
            try:
                entry = self.get(partition_key, entry_id)
            except CorruptEntryError as exc:
                self.drop_corrupt(partition_key, entry_id, str(exc))
                continue
            if entry is not None:  # None: evicted
                yield entry

    def _delete(self, partition_key: str, entry_id: int) -> bool:
        """Delete an entry and count it out; call inside a transaction."""
        # Read before the delete: a damaged record is recounted from the entries present,
        # which must still include this one.
        count = self._int(f"n:{partition_key}")
        if not self._cache.delete(_entry_key(partition_key, entry_id)):
            return False
        self._cache.set(f"n:{partition_key}", max(count - 1, 0))
        return True

    def evict(self, partition_key: str, entry_id: int) -> None:
        try:
            with self._cache.transact():
                self._delete(partition_key, entry_id)
        except (diskcache.Timeout, sqlite3.Error) as exc:
            raise StoreError(f"could not evict an entry in {self._path}: {exc}") from exc

    def drop_corrupt(self, partition_key: str, entry_id: int, reason: str) -> bool:
        """Evict a damaged entry and add one to its table's ``corrupt`` counter.

        Counted only by the process that really deleted it, so two processes meeting the same
        damaged entry count it once. Never raises: returns whether the entry was dropped.
        """
        logger.warning("dropping damaged entry %s/%d: %s", partition_key, entry_id, reason)
        try:
            with self._cache.transact():
                if not self._delete(partition_key, entry_id):
                    return False
            self.add_stats(self._stats_key(partition_key), {"corrupt": 1.0})
        except (StoreError, diskcache.Timeout, sqlite3.Error):
            logger.warning(
                "could not drop damaged entry %s/%d", partition_key, entry_id, exc_info=True
            )
            return False
        return True

    def _partition_record_ok(self, partition_key: str) -> bool:
        try:
            text = self._read(f"p:{partition_key}")
            if not isinstance(text, str):
                return False
            Partition.model_validate_json(text)
        except (CorruptEntryError, ValidationError, ValueError):
            return False
        return True

    def _stats_key(self, partition_key: str) -> str:
        """The ledger's counter key of a partition (the partition key alone if unreadable)."""
        try:
            text = self._read(f"p:{partition_key}")
            if isinstance(text, str):
                return stats_key(Partition.model_validate_json(text))
        except (CorruptEntryError, ValidationError, ValueError):
            pass
        return partition_key

    def partitions(self) -> list[Partition]:
        out: list[Partition] = []
        for pkey in self._json_list(_PARTITIONS):
            try:
                text = self._read(f"p:{pkey}")
                if text is None:
                    continue
                out.append(Partition.model_validate_json(text))
            except (CorruptEntryError, ValidationError, ValueError) as exc:
                logger.warning("skipping corrupt partition record %s: %s", pkey, exc)
        return out

    def count(self, partition_key: str) -> int:
        return self._int(f"n:{partition_key}")

    def last_id(self, partition_key: str) -> int:
        return self._int(f"seq:{partition_key}")

    # -- counters -----------------------------------------------------------------------------

    def _read_counters(self, partition_key: str) -> dict[str, float]:
        try:
            text = self._read(f"s:{partition_key}")
            if text is None:
                return {}
            raw = json.loads(text)
            return {str(k): float(v) for k, v in raw.items()}
        except (CorruptEntryError, TypeError, ValueError, AttributeError):
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
