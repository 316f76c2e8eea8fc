"""Damaged entries of the embedded store: each becomes a counted miss and is evicted; never a raw
exception, never a wrong answer.

The damage is done to the real files: bytes flipped in ``cache.db``, rows edited with SQL (the
JSON functions of SQLite), value files truncated and deleted.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
from fault_tools import (
    answer_for,
    ask,
    entry_rows,
    fill,
    flip_bytes,
    messages,
    open_client,
    run_sql,
    table_key,
    value_offsets,
)

from llmcache._ledger import stats_key
from llmcache._store import DiskStore
from llmcache._types import CacheEntry


def fresh_answer(keywords: list[str]) -> str:
    """What the fake LLM answers when the question is asked again (see fault_tools)."""
    return answer_for({"messages": messages(keywords)})


def _set_bytes(cache_dir: Path, key: str, raw: bytes) -> None:
    """Store ``raw`` as the TEXT value of a row, whatever it holds (SQLite does not check)."""
    run_sql(cache_dir, "UPDATE Cache SET value = CAST(? AS TEXT) WHERE key = ?", (raw, key))


def _value(cache_dir: Path, key: str) -> str:
    ((value,),) = run_sql(cache_dir, "SELECT value FROM Cache WHERE key = ?", (key,))
    return str(value)


def _check_all(cache_dir: Path, made: list[tuple[list[str], str]]) -> tuple[int, int, int]:
    """Ask every stored question again: an answer is the stored one (hit) or a fresh one (miss).

    Returns (hits, misses, corrupt counted). A wrong answer or an exception fails the test.
    """
    client, _ = open_client(cache_dir)
    hits = misses = 0
    for keywords, answer in made:
        content, info = ask(client, keywords)
        if info.outcome == "hit":
            assert content == answer  # never another question's answer, never a damaged one
            hits += 1
        else:
            assert info.outcome == "miss"
            assert content == fresh_answer(keywords)  # asked again, not served from damage
            misses += 1
    corrupt = client.cache.stats().total.corrupt
    client.close()
    return hits, misses, corrupt


# -- fault 1: bytes that are not UTF-8 ----------------------------------------------------------


def test_bytes_flipped_in_the_sqlite_file_are_a_counted_miss(tmp_path: Path) -> None:
    made = fill(tmp_path / "c", 6)
    offsets = value_offsets(tmp_path / "c")
    damaged = sorted(offsets)[:3]
    # 0xFF never occurs in UTF-8: one such byte in the middle of each of three rows.
    flip_bytes(
        tmp_path / "c" / "store" / "cache.db",
        [offsets[k][0] + offsets[k][1] // 2 for k in damaged],
    )
    client, _ = open_client(tmp_path / "c")
    outcomes = []
    for keywords, answer in made:
        content, info = ask(client, keywords)
        outcomes.append(info.outcome)
        assert content == (answer if info.outcome == "hit" else fresh_answer(keywords))
    assert outcomes == ["miss"] * 3 + ["hit"] * 3
    stats = client.cache.stats().total
    assert stats.corrupt == 3 and stats.misses == 6 + 3  # 6 when the cache was filled
    # Evicted: the damaged rows are gone, the new answers replaced them, the count is right.
    keys = {k for k, _ in entry_rows(tmp_path / "c")}
    assert not keys & set(damaged)
    assert client.cache.backend.count(table_key(client)) == 6
    assert [ask(client, k)[1].outcome for k, _ in made] == ["hit"] * 6
    client.close()


def test_a_value_cut_inside_a_multibyte_character_is_a_counted_miss(tmp_path: Path) -> None:
    made = fill(tmp_path / "c", 2)
    key = entry_rows(tmp_path / "c")[0][0]
    raw = _value(tmp_path / "c", key).encode("utf-8")
    cut = raw.index("✓".encode()) + 1  # one byte into a three-byte character
    _set_bytes(tmp_path / "c", key, raw[:cut])
    client, _ = open_client(tmp_path / "c")
    _, info = ask(client, made[0][0])
    assert (info.outcome, info.corrupt_dropped) == ("miss", 1)
    assert ask(client, made[1][0])[1].outcome == "hit"
    client.close()


def test_a_truncated_value_file_is_a_counted_miss(tmp_path: Path) -> None:
    made = fill(tmp_path / "c", 2, big=1)
    (_, filename), _ = entry_rows(tmp_path / "c")
    assert filename is not None  # the big answer lives in a file of its own
    path = tmp_path / "c" / "store" / filename
    raw = path.read_bytes()
    path.write_bytes(raw[: raw.index("é".encode()) + 1])  # cut inside a two-byte character
    client, _ = open_client(tmp_path / "c")
    content, info = ask(client, made[0][0])
    assert (info.outcome, info.corrupt_dropped) == ("miss", 1) and content
    assert ask(client, made[1][0])[1].outcome == "hit"
    client.close()


def test_an_index_rebuild_drops_and_counts_undecodable_entries(tmp_path: Path) -> None:
    made = fill(tmp_path / "c", 42)
    rows = entry_rows(tmp_path / "c")
    for key, _ in rows[::9]:  # 5 damaged entries
        _set_bytes(tmp_path / "c", key, b'{"id": \xff\xfe')
    shutil.rmtree(tmp_path / "c" / "index")  # the next lookup rebuilds the index from the store
    hits, misses, corrupt = _check_all(tmp_path / "c", made)
    assert (hits, misses) == (37, 5)
    assert corrupt == 5  # counted by the store as the rebuild dropped them
    with DiskStore(tmp_path / "c") as store:
        (partition,) = store.partitions()
        assert store.count(partition.key) == 42  # 37 + 5 answered again
        assert store.read_stats()[stats_key(partition)]["corrupt"] == 5


def test_one_random_byte_changed_in_every_entry_never_serves_a_wrong_answer(
    tmp_path: Path,
) -> None:
    n = 150
    made = fill(tmp_path / "c", n, seed=7)
    offsets = value_offsets(tmp_path / "c")
    rng = random.Random(16)
    db = tmp_path / "c" / "store" / "cache.db"
    data = bytearray(db.read_bytes())
    for offset, length in offsets.values():
        # One bit of one byte: mostly still UTF-8 and often still valid JSON, so this is the
        # checksum's test as much as the decoder's.
        data[offset + rng.randrange(length)] ^= 1 << rng.randrange(8)
    db.write_bytes(bytes(data))
    hits, misses, corrupt = _check_all(tmp_path / "c", made)
    assert hits + misses == n
    assert corrupt == misses  # every entry not served intact was detected, counted, evicted
    assert misses > n // 2  # most changes are detected; the rest touched nothing served
    print(
        f"\n[faults] {n} entries with one bit changed: {misses} detected as damaged "
        f"(counted misses, evicted), {hits} served intact, 0 wrong answers"
    )


# -- fault 2: a completion that no longer validates --------------------------------------------


def test_a_stored_completion_that_no_longer_validates_is_a_counted_miss(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    made = fill(tmp_path / "c", 2)
    key = entry_rows(tmp_path / "c")[0][0]
    # An entry without a checksum (as an older version wrote them) whose message role changed.
    run_sql(
        tmp_path / "c",
        "UPDATE Cache SET value = json_remove(json_set(value, "
        "'$.completion.choices[0].message.role', 'robot'), '$.checksum') WHERE key = ?",
        (key,),
    )
    client, _ = open_client(tmp_path / "c")
    with caplog.at_level(logging.WARNING, logger="llmcache"):
        content, info = ask(client, made[0][0])
    assert (info.outcome, info.corrupt_dropped) == ("miss", 1) and content
    assert "no longer a valid ChatCompletion" in caplog.text
    assert key not in {k for k, _ in entry_rows(tmp_path / "c")}  # evicted
    assert ask(client, made[0][0])[1].outcome == "hit"  # the fresh answer serves from now on
    client.close()


def test_a_sealed_entry_with_an_unservable_completion_is_a_counted_miss(tmp_path: Path) -> None:
    # Written (checksum and all) by a version whose SDK stored another completion shape.
    made = fill(tmp_path / "c", 1)
    client, _ = open_client(tmp_path / "c")
    pkey = table_key(client)
    (entry,) = client.cache.entries(pkey)
    odd = entry.model_copy(update={"completion": {"choices": [{"message": "not a message"}]}})
    client.cache.backend.evict(pkey, entry.id)
    client.cache.put(odd)
    content, info = ask(client, made[0][0])
    assert (info.outcome, info.corrupt_dropped) == ("miss", 1) and content
    assert client.cache.backend.count(pkey) == 1  # the odd one evicted, the new one stored
    client.close()


# -- fault 3: malformed bookkeeping records -----------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [b"not a number", b"-3", b"2.5", b"\xff\xfe"],
    ids=["text", "negative", "fraction", "not-utf8"],
)
def test_malformed_bookkeeping_records_are_rebuilt(tmp_path: Path, value: bytes) -> None:
    made = fill(tmp_path / "c", 5)
    with DiskStore(tmp_path / "c") as store:
        (partition,) = store.partitions()
        store.evict(partition.key, 2)
    pkey = partition.key
    for key in (f"seq:{pkey}", f"n:{pkey}", f"p:{pkey}", "partitions", "stats:keys"):
        run_sql(
            tmp_path / "c",
            "UPDATE Cache SET value = CAST(? AS TEXT), mode = 1 WHERE key = ?",
            (value, key),
        )
    client, _ = open_client(tmp_path / "c")
    assert [ask(client, k)[1].outcome for k, _ in made] == ["hit", "miss", "hit", "hit", "hit"]
    backend = client.cache.backend
    # Rebuilt from the entries present: ids go on after the highest one, the count is exact.
    _, info = ask(client, ["a", "new", "question"])
    assert info.entry_id == 7  # 1..5 existed, 6 was the re-asked question
    assert backend.count(pkey) == 6
    assert [p.key for p in client.cache.partitions()] == [pkey]
    stats = client.cache.stats()
    assert stats.total.lookups == 11  # counters recorded before and after the damage
    client.close()


# -- fault 4: an answer edited inside valid JSON ---------------------------------------------


def test_an_answer_edited_inside_valid_json_is_a_counted_miss(tmp_path: Path) -> None:
    made = fill(tmp_path / "c", 2)
    key = entry_rows(tmp_path / "c")[0][0]
    run_sql(
        tmp_path / "c",
        "UPDATE Cache SET value = json_set(value, '$.content', 'a planted answer',"
        " '$.completion.choices[0].message.content', 'a planted answer') WHERE key = ?",
        (key,),
    )
    client, _ = open_client(tmp_path / "c")
    content, info = ask(client, made[0][0])
    assert content != "a planted answer"
    assert (info.outcome, info.corrupt_dropped) == ("miss", 1)
    assert client.cache.stats().total.corrupt == 1
    client.close()


def test_entries_written_without_a_checksum_still_load(tmp_path: Path) -> None:
    made = fill(tmp_path / "c", 2)
    run_sql(tmp_path / "c", "UPDATE Cache SET value = json_remove(value, '$.checksum')"
            " WHERE key LIKE 'e:%'")  # fmt: skip
    assert all(
        "checksum" not in json.loads(_value(tmp_path / "c", k))
        for k, _ in entry_rows(tmp_path / "c")
    )
    client, _ = open_client(tmp_path / "c")
    for keywords, answer in made:
        content, info = ask(client, keywords)
        assert (info.outcome, content) == ("hit", answer)  # unverifiable, but valid
    client.close()


def test_every_stored_entry_carries_a_checksum_of_its_answer(tmp_path: Path) -> None:
    fill(tmp_path / "c", 1)
    ((key, _),) = entry_rows(tmp_path / "c")
    data = json.loads(_value(tmp_path / "c", key))
    assert data["checksum"].startswith("v1:")
    assert CacheEntry.checksum_problem(data) is None
    data["content"] = data["content"] + "!"
    assert CacheEntry.checksum_problem(data) == "its content does not match its checksum"


# -- fault 8: deleted value files --------------------------------------------------------------


def test_a_deleted_value_file_is_a_counted_miss_and_the_count_is_corrected(
    tmp_path: Path,
) -> None:
    made = fill(tmp_path / "c", 3, big=2)
    files = [f for _, f in entry_rows(tmp_path / "c") if f is not None]
    assert len(files) == 2
    (tmp_path / "c" / "store" / files[0]).unlink()
    client, _ = open_client(tmp_path / "c")
    pkey = table_key(client)
    content, info = ask(client, made[0][0])
    assert (info.outcome, info.corrupt_dropped) == ("miss", 1) and content
    assert client.cache.backend.count(pkey) == 3  # 3 - the lost one + its fresh answer
    assert len(client.cache.entries(pkey)) == 3
    client.close()


def test_a_deleted_value_file_met_by_an_index_rebuild_is_counted_and_evicted(
    tmp_path: Path,
) -> None:
    fill(tmp_path / "c", 3, big=2)
    files = [f for _, f in entry_rows(tmp_path / "c") if f is not None]
    (tmp_path / "c" / "store" / files[1]).unlink()
    shutil.rmtree(tmp_path / "c" / "index")
    client, _ = open_client(tmp_path / "c")
    pkey = table_key(client)
    assert client.cache.backend.count(pkey) == 3  # the store does not know yet
    ask(client, ["anything", "at", "all"])  # a lookup: the rebuild meets the missing file
    assert client.cache.backend.count(pkey) == 3  # 2 left + the new question's answer
    assert len(client.cache.entries(pkey)) == 3
    total = client.cache.stats().total
    assert total.corrupt == 1
    client.close()


def test_iterate_counts_what_it_drops_once_per_entry(tmp_path: Path) -> None:
    fill(tmp_path / "c", 4)
    rows = entry_rows(tmp_path / "c")
    _set_bytes(tmp_path / "c", rows[1][0], b"\xff")
    with DiskStore(tmp_path / "c") as a, DiskStore(tmp_path / "c") as b:
        (partition,) = a.partitions()
        # Two processes (here: two stores) meet the same damaged entry: counted once.
        assert len(list(a.iterate(partition.key))) == 3
        assert len(list(b.iterate(partition.key))) == 3
        counters = a.read_stats()[stats_key(partition)]
        assert counters["corrupt"] == 1
        assert a.count(partition.key) == 3


def test_an_entry_with_a_vector_of_another_dimension_is_dropped_by_a_rebuild(
    tmp_path: Path,
) -> None:
    made = fill(tmp_path / "c", 3)
    with DiskStore(tmp_path / "c") as store:
        (partition,) = store.partitions()
        (entry, *_) = store.iterate(partition.key)
        # Written by something else, sealed and all, but with a vector of 8 numbers.
        odd = entry.model_copy(
            update={"vector_b64": CacheEntry.encode_vector(np.ones(8, dtype=np.float32))}
        )
        store.put(odd)
        assert store.count(partition.key) == 4
    shutil.rmtree(tmp_path / "c" / "index")
    hits, misses, corrupt = _check_all(tmp_path / "c", made)
    assert (hits, misses, corrupt) == (3, 0, 1)
    with DiskStore(tmp_path / "c") as store:
        assert store.count(partition.key) == 3


@pytest.mark.parametrize("first", ["put", "evict"])
def test_a_damaged_count_met_first_by_a_write_is_recounted_exactly(
    tmp_path: Path, first: str
) -> None:
    fill(tmp_path / "c", 4)
    with DiskStore(tmp_path / "c") as store:
        (partition,) = store.partitions()
        (entry, *_) = store.iterate(partition.key)
    run_sql(tmp_path / "c", "UPDATE Cache SET value = 'x' WHERE key = ?", (f"n:{partition.key}",))
    with DiskStore(tmp_path / "c") as store:
        if first == "put":
            store.put(entry)
            assert store.count(partition.key) == 5
        else:
            store.evict(partition.key, entry.id)
            assert store.count(partition.key) == 3


def test_only_the_best_candidates_are_read_and_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Reading an entry costs more than the search, and rebuilding a response to check it more
    # again: a lookup reads candidates until none left can beat the best, and checks the best,
    # then the next only when the best is damaged (only the first is ever served).
    fill(tmp_path / "c", 3)
    client, _ = open_client(tmp_path / "c")
    cache = client.cache
    (partition,) = cache.partitions()
    entries = sorted(cache.entries(partition.key), key=lambda e: e.id)
    query = entries[0].vector()
    checked: list[int] = []
    read: list[int] = []
    get = cache.backend.get

    def counting_get(pkey: str, entry_id: int) -> CacheEntry | None:
        read.append(entry_id)
        return get(pkey, entry_id)

    monkeypatch.setattr(cache.backend, "get", counting_get)

    def passes(entry: CacheEntry) -> str | None:
        checked.append(entry.id)
        return None

    found, dropped = cache.lookup(partition, query, check=passes)
    assert dropped == 0 and found[0].entry.id == entries[0].id
    assert checked == [entries[0].id] and read == [entries[0].id]  # one read, one check

    checked.clear()

    def best_is_damaged(entry: CacheEntry) -> str | None:
        checked.append(entry.id)
        return "damaged" if entry.id == entries[0].id else None

    found, dropped = cache.lookup(partition, query, check=best_is_damaged)
    assert dropped == 1 and entries[0].id not in {c.entry.id for c in found}
    assert len(checked) == 2 and checked[1] == found[0].entry.id
    assert cache.backend.count(partition.key) == 2  # the damaged one evicted
    client.close()
