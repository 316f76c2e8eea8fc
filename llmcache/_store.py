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
    limits              Limits JSON: the bounds recorded by the last cache opened with some

Beside diskcache's own table, the same SQLite file holds ``llmcache_times``: one row per entry
with the time it was stored, the time it was last hit (on the cache's clock) and its size in
bytes, indexed by last hit. It is what bounds the cache: the least recently hit entries are
found by that index, not by reading entries. Its rows are written and deleted in the same
transaction as their entries; a directory made before it existed gets it on first open,
filled from the entries present (stored and hit "now").

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
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import diskcache
from pydantic import ValidationError

from ._config import Limits
from ._errors import CorruptEntryError, StoreError
from ._ledger import merge_counters, stats_key
from ._manifest import Manifest
from ._types import CacheEntry, Partition, checksum_problem

__all__ = ["DiskStore"]

logger = logging.getLogger(__name__)

_MANIFEST = "manifest"
_PARTITIONS = "partitions"
_STATS_KEYS = "stats:keys"
_STORE_ID = "store_id"
_LIMITS = "limits"

_CREATE_TIMES = [
    """CREATE TABLE IF NOT EXISTS llmcache_times (
        pkey TEXT NOT NULL,
        id INTEGER NOT NULL,
        stored_at REAL NOT NULL,
        last_hit REAL NOT NULL,
        bytes INTEGER NOT NULL,
        PRIMARY KEY (pkey, id)
    )""",
    "CREATE INDEX IF NOT EXISTS llmcache_times_hit ON llmcache_times (last_hit, pkey, id)",
    "CREATE INDEX IF NOT EXISTS llmcache_times_table_hit ON llmcache_times (pkey, last_hit, id)",
    "CREATE INDEX IF NOT EXISTS llmcache_times_stored ON llmcache_times (stored_at)",
]


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
        self._ensure_times()

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

    # -- entry times (bounds) ----------------------------------------------------------------

    def _ensure_times(self) -> None:
        """Create ``llmcache_times`` if this directory predates it, filled from the entries."""
        sql = self._cache._sql  # diskcache's statement runner, on the same connection
        try:
            if sql(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'llmcache_times'"
            ).fetchone():
                return
            with self._cache.transact():
                if sql(  # another process may have made it while we waited for the lock
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'llmcache_times'"
                ).fetchone():
                    return
                for statement in _CREATE_TIMES:
                    sql(statement)
                lo, hi = _key_range("e:")
                rows = sql(
                    "SELECT CAST(key AS BLOB), max(coalesce(size, 0),"
                    " coalesce(length(CAST(value AS BLOB)), 0))"
                    " FROM Cache WHERE raw = 1 AND key >= ? AND key < ?",
                    (lo, hi),
                ).fetchall()
                now = time.time()
                for raw_key, size in rows:
                    pkey, _, suffix = bytes(raw_key).decode("utf-8", "replace")[2:].rpartition(":")
                    if suffix.isdigit():
                        sql(
                            "INSERT OR IGNORE INTO llmcache_times VALUES (?, ?, ?, ?, ?)",
                            (pkey, int(suffix), now, now, int(size)),
                        )
        except (diskcache.Timeout, sqlite3.Error) as exc:
            raise StoreError(f"cannot prepare the cache store in {self._path}: {exc}") from exc

    def touch(self, partition_key: str, entry_id: int, now: float) -> None:
        """Record a hit: one small UPDATE of an indexed row, a transaction of its own."""
        try:
            self._cache._sql(
                "UPDATE llmcache_times SET last_hit = max(last_hit, ?) WHERE pkey = ? AND id = ?",
                (float(now), partition_key, entry_id),
            )
        except sqlite3.Error as exc:
            raise StoreError(f"could not record a hit in {self._path}: {exc}") from exc

    def _evict_counted(self, victims: list[tuple[str, int]], counter: str) -> int:
        """Delete entries and count them per table; call inside a transaction."""
        per_table: dict[str, int] = {}
        for pkey, entry_id in victims:
            if self._delete(pkey, entry_id):
                per_table[pkey] = per_table.get(pkey, 0) + 1
            else:  # a times row whose entry is gone (damage): not an eviction to count
                self._cache._sql(
                    "DELETE FROM llmcache_times WHERE pkey = ? AND id = ?", (pkey, entry_id)
                )
        for pkey, n in per_table.items():
            self.add_stats(self._stats_key(pkey), {counter: float(n)})
        return sum(per_table.values())

    def expire(
        self, partition_key: str, entry_ids: list[int], now: float, ttl_seconds: float
    ) -> list[int]:
        """Evict those of ``entry_ids`` stored ``ttl_seconds`` or more before ``now``."""
        if not entry_ids:
            return []
        marks = ",".join("?" * len(entry_ids))
        query = (
            f"SELECT id FROM llmcache_times WHERE pkey = ? AND id IN ({marks}) AND stored_at <= ?"
        )
        params = (partition_key, *entry_ids, float(now) - ttl_seconds)
        try:
            # A read first: a lookup takes the write lock only when something has expired.
            if not self._cache._sql(query, params).fetchone():
                return []
            with self._cache.transact():
                gone = [int(i) for (i,) in self._cache._sql(query, params).fetchall()]
                self._evict_counted([(partition_key, i) for i in gone], "expired")
        except (diskcache.Timeout, sqlite3.Error) as exc:
            raise StoreError(f"could not expire entries in {self._path}: {exc}") from exc
        return gone

    def enforce(
        self,
        limits: Limits,
        now: float,
        *,
        partition_key: str | None = None,
        budget: int | None = None,
    ) -> tuple[dict[str, int], list[tuple[str, int]]]:
        """Evict expired entries, then the least recently hit until the bounds hold.

        One write transaction: processes enforcing at once take turns, and each sees the
        counts the previous one left, so together they evict exactly the excess. Returns the
        counts and the ``(table, id)`` pairs evicted (for the in-memory indexes).
        """
        sql = self._cache._sql
        cap = -1 if budget is None else budget  # SQLite: LIMIT -1 is no limit
        gone: list[tuple[str, int]] = []
        counts = {"expired": 0, "evicted": 0}

        def pairs(rows: list[tuple[Any, ...]]) -> list[tuple[str, int]]:
            return [(str(p), int(i)) for p, i in rows]

        try:
            with self._cache.transact():
                if limits.ttl_seconds is not None:
                    victims = pairs(
                        sql(
                            "SELECT pkey, id FROM llmcache_times WHERE stored_at <= ?"
                            " ORDER BY stored_at, id LIMIT ?",
                            (float(now) - limits.ttl_seconds, cap),
                        ).fetchall()
                    )
                    counts["expired"] += self._evict_counted(victims, "expired")
                    gone += victims
                victims = []
                if limits.max_entries_per_table is not None:
                    if partition_key is not None:
                        tables = [partition_key]
                    else:
                        tables = [
                            str(p)
                            for (p,) in sql(
                                "SELECT pkey FROM llmcache_times GROUP BY pkey HAVING count(*) > ?",
                                (limits.max_entries_per_table,),
                            ).fetchall()
                        ]
                    for pkey in tables:
                        (n,) = sql(
                            "SELECT count(*) FROM llmcache_times WHERE pkey = ?", (pkey,)
                        ).fetchone()
                        excess = int(n) - limits.max_entries_per_table
                        if excess > 0:
                            victims += pairs(
                                sql(
                                    "SELECT pkey, id FROM llmcache_times WHERE pkey = ?"
                                    " ORDER BY last_hit, id LIMIT ?",
                                    (pkey, excess if budget is None else min(excess, budget)),
                                ).fetchall()
                            )
                    counts["evicted"] += self._evict_counted(victims, "evicted")
                    gone += victims
                if limits.max_entries is not None:
                    (n,) = sql("SELECT count(*) FROM llmcache_times").fetchone()
                    excess = int(n) - limits.max_entries
                    if excess > 0:
                        victims = pairs(
                            sql(
                                "SELECT pkey, id FROM llmcache_times ORDER BY last_hit, id LIMIT ?",
                                (excess if budget is None else min(excess, budget),),
                            ).fetchall()
                        )
                        counts["evicted"] += self._evict_counted(victims, "evicted")
                        gone += victims
                if limits.max_bytes is not None:
                    (total,) = sql("SELECT total(bytes) FROM llmcache_times").fetchone()
                    excess = int(total) - limits.max_bytes
                    victims = []
                    if excess > 0:
                        cursor = sql(
                            "SELECT pkey, id, bytes FROM llmcache_times ORDER BY last_hit, id"
                        )
                        for pkey, entry_id, size in cursor:
                            if excess <= 0 or (budget is not None and len(victims) >= budget):
                                break
                            victims.append((str(pkey), int(entry_id)))
                            excess -= int(size)
                        cursor.close()
                        counts["evicted"] += self._evict_counted(victims, "evicted")
                        gone += victims
        except (diskcache.Timeout, sqlite3.Error) as exc:
            raise StoreError(f"could not evict entries in {self._path}: {exc}") from exc
        return counts, gone

    def usage(self) -> tuple[int, int]:
        try:
            n, total = self._cache._sql(
                "SELECT count(*), total(bytes) FROM llmcache_times"
            ).fetchone()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read the size of {self._path}: {exc}") from exc
        return int(n), int(total)

    def read_limits(self) -> Limits | None:
        try:
            text = self._read(_LIMITS)
            return None if text is None else Limits.model_validate_json(text)
        except (CorruptEntryError, ValidationError, ValueError, TypeError):
            # Limits are a setting, not an answer: a damaged record is dropped, not fatal.
            logger.warning("ignoring the damaged limits record of %s", self._path)
            return None

    def write_limits(self, limits: Limits) -> None:
        try:
            self._cache.set(_LIMITS, limits.model_dump_json())
        except (diskcache.Timeout, sqlite3.Error) as exc:
            raise StoreError(f"could not record the limits of {self._path}: {exc}") from exc

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

    def put(self, entry: CacheEntry, *, now: float | None = None) -> int:
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
                text = stored.model_dump_json()
                self._cache.set(_entry_key(pkey, entry_id), text)
                at = time.time() if now is None else float(now)
                self._cache._sql(
                    "INSERT OR REPLACE INTO llmcache_times VALUES (?, ?, ?, ?, ?)",
                    (pkey, entry_id, at, at, len(text.encode("utf-8", "surrogatepass"))),
                )
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
        self._cache._sql(
            "DELETE FROM llmcache_times WHERE pkey = ? AND id = ?", (partition_key, entry_id)
        )
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
                merge_counters(counters, delta)
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
