"""DiskStore specifics: JSON text on disk, corrupt entries, ids, counters, several processes."""

from __future__ import annotations

import json
import logging
import multiprocessing
import sqlite3
from pathlib import Path

import diskcache
import numpy as np
import pytest

from llmcache._errors import CorruptEntryError, StoreError
from llmcache._ledger import Ledger, stats_key
from llmcache._manifest import Manifest
from llmcache._store import DiskStore
from llmcache._types import CacheEntry, CallInfo, EmbedMode, Partition, Similarity, Usage

DIM = 8


def make_entry(
    partition: Partition, text: str = "a b c", seed: int = 0, content: str = "answer"
) -> CacheEntry:
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(DIM).astype(np.float32)
    v /= np.linalg.norm(v)
    return CacheEntry(
        partition=partition,
        embed_text=text,
        embed_mode=EmbedMode.KEYWORD,
        embedder_id="test-embedder",
        vector_b64=CacheEntry.encode_vector(v),
        keywords=tuple(text.split()),
        messages=[{"role": "user", "content": text}],
        content=content,
        completion={"id": "c1", "choices": [{"message": {"content": content}}]},
        usage=Usage(prompt_tokens=10, completion_tokens=2),
    )


P1 = Partition(category="importance", agent="Liam Oliver", params_hash="h1", model="m")
P2 = Partition(category="importance", agent="Ada", params_hash="h1", model="m")


@pytest.fixture
def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    s = DiskStore(tmp_path)
    yield s
    s.close()


def raw_row(tmp_path: Path, key: str) -> tuple[int, object, str | None]:
    """The Cache-table row diskcache wrote for a key: (mode, value, filename)."""
    with sqlite3.connect(tmp_path / "store" / "cache.db") as db:
        row = db.execute("SELECT mode, value, filename FROM Cache WHERE key = ?", (key,)).fetchone()
    assert row is not None, key
    return row[0], row[1], row[2]


def test_entries_are_json_text_on_disk_not_pickle(store: DiskStore, tmp_path: Path) -> None:
    small = store.put(make_entry(P1, "small one"))
    big = store.put(make_entry(P1, "big one", content="x" * 100_000))  # diskcache's file path
    mode, value, _ = raw_row(tmp_path, f"e:{P1.key}:{small:012d}")
    assert mode == diskcache.core.MODE_RAW
    assert isinstance(value, str)
    assert json.loads(value)["embed_text"] == "small one"
    mode, value, filename = raw_row(tmp_path, f"e:{P1.key}:{big:012d}")
    assert mode == diskcache.core.MODE_TEXT
    assert filename is not None
    text = (tmp_path / "store" / filename).read_text(encoding="utf-8")
    assert json.loads(text)["content"] == "x" * 100_000
    with sqlite3.connect(tmp_path / "store" / "cache.db") as db:
        modes = {m for (m,) in db.execute("SELECT DISTINCT mode FROM Cache")}
    assert diskcache.core.MODE_PICKLE not in modes
    entry = store.get(P1.key, small)
    assert entry is not None and entry.id == small and entry.embed_text == "small one"


def test_store_refuses_to_write_or_read_pickles(store: DiskStore, tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        store.cache.set("x", {"not": "text"})
    entry_id = store.put(make_entry(P1))
    # Someone else's diskcache (default settings) pickles a dict into our entry's slot.
    other = diskcache.Cache(str(tmp_path / "store"))
    other.set(f"e:{P1.key}:{entry_id:012d}", {"evil": True})
    other.close()
    with pytest.raises(CorruptEntryError):
        store.get(P1.key, entry_id)


def test_corrupt_entry_raises_and_is_skipped_by_iterate(
    store: DiskStore, caplog: pytest.LogCaptureFixture
) -> None:
    ids = [store.put(make_entry(P1, f"t{i}", seed=i)) for i in range(3)]
    store.cache.set(f"e:{P1.key}:{ids[1]:012d}", '{"id": 2, "partition": ')
    with pytest.raises(CorruptEntryError):
        store.get(P1.key, ids[1])
    # Valid JSON of the wrong shape is corrupt too.
    store.cache.set(f"e:{P1.key}:{ids[2]:012d}", '{"id": 3}')
    with pytest.raises(CorruptEntryError):
        store.get(P1.key, ids[2])
    with caplog.at_level(logging.WARNING, logger="llmcache._store"):
        assert [e.id for e in store.iterate(P1.key)] == [ids[0]]
    assert "corrupt" in caplog.text
    # iterate does not only skip damaged entries: it evicts and counts them (issue 16).
    assert store.get(P1.key, ids[1]) is None and store.get(P1.key, ids[2]) is None
    assert store.read_stats()[stats_key(P1)]["corrupt"] == 2  # the ledger's table counters
    store.evict(P1.key, ids[1])  # evicting again is harmless
    assert store.get(P1.key, ids[1]) is None
    assert store.count(P1.key) == 1


def test_ids_increase_per_partition_and_are_never_reused(store: DiskStore) -> None:
    assert store.last_id(P1.key) == 0
    a = [store.put(make_entry(P1, seed=i)) for i in range(3)]
    b = store.put(make_entry(P2))
    assert a == [1, 2, 3] and b == 1
    store.evict(P1.key, 3)
    store.evict(P1.key, 3)  # evicting twice is harmless and counts once
    assert store.count(P1.key) == 2
    assert store.put(make_entry(P1)) == 4
    assert store.last_id(P1.key) == 4
    assert [e.id for e in store.iterate(P1.key)] == [1, 2, 4]
    assert [e.id for e in store.iterate(P1.key, after_id=1)] == [2, 4]
    assert store.get(P1.key, 99) is None
    assert {p.key for p in store.partitions()} == {P1.key, P2.key}
    assert store.get(P2.key, 1) is not None
    assert store.get(P2.key, 1).partition == P2  # type: ignore[union-attr]


def test_stats_merge_sums_and_extremes(store: DiskStore) -> None:
    store.add_stats(P1.key, {"lookups": 1, "hits": 1, "max_sim": 0.8, "min_sim": 0.8})
    store.add_stats(P1.key, {"lookups": 1, "max_sim": 0.95, "min_sim": 0.5, "usd": 0.25})
    store.add_stats(P1.key, {"max_sim": 0.7, "min_sim": 0.6})
    store.add_stats("empty-table", {"lookups": 3})  # counters without any entry
    store.add_stats(P1.key, {})
    stats = store.read_stats()
    assert stats[P1.key] == {
        "lookups": 2.0,
        "hits": 1.0,
        "max_sim": 0.95,
        "min_sim": 0.5,
        "usd": 0.25,
    }
    assert stats["empty-table"] == {"lookups": 3.0}
    assert all(isinstance(v, float) for v in stats[P1.key].values())


def test_counters_a_failed_flush_kept_merge_by_the_same_rule(store: DiskStore) -> None:
    # Counters meet in three places (the ledger's pending deltas, the store, Postgres); each
    # merges by the one rule: sums, and the extremes of "max_"/"min_" counters.
    class Flaky:
        def __init__(self) -> None:
            self.failures = 1

        def add_stats(self, key: str, delta: dict[str, float]) -> None:
            if self.failures:
                self.failures -= 1
                raise StoreError("the disk is full")
            store.add_stats(key, delta)

        def read_stats(self) -> dict[str, dict[str, float]]:
            return store.read_stats()

    ledger = Ledger(Flaky(), flush_every=1)  # type: ignore[arg-type]

    def call(cosine: float) -> CallInfo:
        return CallInfo(
            outcome="miss", category="importance", agent="Ada", model="m", partition_key=P2.key,
            similarity=Similarity(cosine=cosine), attempts=1, usage=Usage(prompt_tokens=3),
        )  # fmt: skip

    ledger.record(call(0.5))  # its flush fails: the delta is kept
    ledger.record(call(0.9))
    ledger.record(call(-0.2))
    (table,) = ledger.stats().tables
    assert (table.lookups, table.misses, table.attempts, table.tokens_spent) == (3, 3, 3, 9)
    assert (table.similarity_max, table.similarity_min) == (0.9, -0.2)
    assert (table.category, table.agent, table.key) == ("importance", "Ada", P2.key)
    assert list(store.read_stats()) == [stats_key(P2)]


def test_manifest_round_trip_and_readable_mirror(store: DiskStore, tmp_path: Path) -> None:
    assert store.read_manifest() is None
    store.write_manifest(Manifest(embedder_id="minilm-int8", dim=384))
    assert store.read_manifest() == Manifest(embedder_id="minilm-int8", dim=384)
    mirror = json.loads((tmp_path / "manifest.json").read_text(encoding="utf-8"))
    assert mirror["embedder_id"] == "minilm-int8" and mirror["dim"] == 384
    # The mirror is for humans; a broken mirror changes nothing.
    (tmp_path / "manifest.json").write_text("garbage")
    assert store.read_manifest() == Manifest(embedder_id="minilm-int8", dim=384)
    store.cache.set("manifest", "garbage")
    with pytest.raises(StoreError):
        store.read_manifest()


def _append_worker(path: str, worker: int, n: int) -> list[int]:
    store = DiskStore(path)
    try:
        ids = []
        for i in range(n):
            ids.append(store.put(make_entry(P1, f"w{worker} {i}", seed=i)))
            store.add_stats(P1.key, {"puts": 1, "max_worker": worker, "min_worker": worker})
        return ids
    finally:
        store.close()


def test_two_processes_appending_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    n = 150
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        results = pool.starmap(_append_worker, [(str(tmp_path), w, n) for w in (1, 2)])
    for ids in results:
        assert ids == sorted(ids)  # each writer sees its own ids increase
    all_ids = sorted(results[0] + results[1])
    assert all_ids == list(range(1, 2 * n + 1))  # no gaps, no duplicates
    store = DiskStore(tmp_path)
    try:
        assert store.count(P1.key) == 2 * n
        assert store.last_id(P1.key) == 2 * n
        entries = list(store.iterate(P1.key))
        assert [e.id for e in entries] == all_ids
        by_worker = {e.embed_text.split()[0] for e in entries}
        assert by_worker == {"w1", "w2"}
        stats = store.read_stats()[P1.key]
        assert stats == {"puts": 2.0 * n, "max_worker": 2.0, "min_worker": 1.0}
    finally:
        store.close()
