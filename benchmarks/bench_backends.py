"""Embedded backend (diskcache + hnswlib) vs Postgres + pgvector: lookups, inserts, 4 workers.

For each table size N (entries in one partition, random 384-d unit vectors, ~1 kB answers):

- lookup p50/p99: one ``search(k=5)`` plus a ``get`` of the best entry, as a cache hit does;
- insert rate: single ``add`` calls per second into the filled table;
- Postgres twice: exact per-partition scan (the default), then with the partition's own HNSW
  index (``PgBackend.create_ann_index``), with its build time;
- then 4 worker processes hammer one cache at once (80 % lookups, 20 % inserts, over a table
  of ``--hammer-size`` entries): total operations/s and lookup p50/p99 under contention
  (workers run with OPENBLAS_NUM_THREADS=1; set BENCH_WORKER_BLAS_THREADS to change it).

With ``--scale N``, Postgres at scale: N rows in one cache, in partitions of each of
``--scale-sizes`` (about N / len(sizes) rows per size), written interleaved as a town writes
them; lookups near stored entries in partitions of each size (exact search), then the first
partition of each size from ``--scale-ann-min`` up with its own HNSW index (build time, lookups,
recall@1 against the exact best); the size on disk per row; and ``--workers`` processes doing
single-row writes (all writes, then 80 % lookups) on random small partitions of that table.

Postgres runs in a throwaway server (tests/pg_support.py: fsync off, on 127.0.0.1) unless
``--dsn`` names one. Needs the [pg] extra (``pip install -e .[pg]``; scripts/setup.sh installs it).

    .venv/bin/python benchmarks/bench_backends.py                        # 1k and 10k
    .venv/bin/python benchmarks/bench_backends.py --sizes 1000 10000 100000
    .venv/bin/python benchmarks/bench_backends.py --sizes --hammer-size 0 --scale 1000000
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmcache import EmbedMode
from llmcache.storage import CacheBackend, LocalBackend, PgBackend
from llmcache.types import CacheEntry, Partition, Usage

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from bench_models import header_line, machine_info  # a sibling script (benchmarks/ is on the path)
from pg_support import PgTestServer, missing_extra

DIM = 384
EMBEDDER = "bench-random-384"
PART = Partition(category="importance", agent="Liam Oliver", params_hash="h", model="m")
ANSWER = '{"rating": 4, "reason": "' + "a routine morning activity " * 30 + '"}'


def vectors(n: int, seed: int) -> NDArray[np.float32]:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def entry(vector: NDArray[np.float32], i: int, partition: Partition = PART) -> CacheEntry:
    text = f"Liam Oliver Tree in Victoria Park is Idle {i}"
    return CacheEntry(
        partition=partition,
        embed_text=text,
        embed_mode=EmbedMode.KEYWORD,
        embedder_id=EMBEDDER,
        vector_b64=CacheEntry.encode_vector(vector),
        keywords=tuple(text.split()),
        messages=[
            {"role": "system", "content": "Rate importance 1-10."},
            {"role": "user", "content": text},
        ],
        content=ANSWER,
        completion={
            "id": f"c{i}",
            "choices": [{"message": {"role": "assistant", "content": ANSWER}}],
        },
        usage=Usage(prompt_tokens=120, completion_tokens=40),
    )


# -- backends ---------------------------------------------------------------------------------


def open_backend(kind: str, where: str, **options: Any) -> CacheBackend:
    if kind == "pg":
        dsn, schema = where.split("#", 1)
        backend: CacheBackend = PgBackend(dsn, schema=schema, **options)
    else:
        backend = LocalBackend(where)
    backend.check_embedder(EMBEDDER, DIM)
    return backend


def fill(backend: CacheBackend, n: int, seed: int) -> None:
    """Load n entries the fastest way the backend offers (not what is timed)."""
    data = vectors(n, seed)
    for start in range(0, n, 1000):
        batch = [entry(data[i], seed * 10_000_000 + i) for i in range(start, min(n, start + 1000))]
        backend.add_many(batch)


def lookup(
    backend: CacheBackend, query: NDArray[np.float32], partition: Partition = PART
) -> int | None:
    """What a hit does: the nearest entries, then the best one's row. Returns its id."""
    best = backend.search(partition, query, 5)
    if best:
        backend.get(partition.key, best[0][0])
        return best[0][0]
    return None


def percentiles(samples: list[float]) -> tuple[float, float]:
    ms = np.asarray(samples) * 1000.0
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 99))


# -- one table size ---------------------------------------------------------------------------


def _lookups_and_inserts(
    backend: CacheBackend, queries: int, inserts: int, seed: int
) -> dict[str, float]:
    qs = vectors(queries, seed=seed)
    lookup(backend, qs[0])  # warm: index loaded, connection open, plan cached
    times = []
    for q in qs:
        t = time.perf_counter()
        lookup(backend, q)
        times.append(time.perf_counter() - t)
    new = vectors(inserts, seed=seed + 1)
    t = time.perf_counter()
    for i, v in enumerate(new):
        backend.add(entry(v, seed * 1_000_000 + i))
    p50, p99 = percentiles(times)
    return {"p50": p50, "p99": p99, "insert_rate": inserts / (time.perf_counter() - t)}


def measure(kind: str, where: str, size: int, queries: int, inserts: int) -> list[dict[str, Any]]:
    """One row per search path: the backend as opened, and for Postgres also with the
    partition's own HNSW index (``create_ann_index``)."""
    backend = open_backend(kind, where)
    rows = []
    try:
        t0 = time.perf_counter()
        fill(backend, size, seed=1)
        rows.append({"kind": kind, "prep_s": time.perf_counter() - t0})
        rows[-1].update(_lookups_and_inserts(backend, queries, inserts, seed=20))
        if isinstance(backend, PgBackend):
            t0 = time.perf_counter()
            backend.create_ann_index(PART.key)
            rows.append({"kind": f"{kind} + hnsw", "prep_s": time.perf_counter() - t0})
            rows[-1].update(_lookups_and_inserts(backend, queries, inserts, seed=40))
    finally:
        backend.close()
    return rows


# -- four workers at once ---------------------------------------------------------------------


def _hammer(
    kind: str,
    where: str,
    worker: int,
    ops: int,
    barrier: Any,
    out: Any,
    parts: Sequence[Partition] = (PART,),
    write_share: float = 0.2,
) -> None:
    backend = open_backend(kind, where)
    try:
        rng = np.random.default_rng(100 + worker)
        qs = vectors(ops, seed=200 + worker)
        lookup(backend, qs[0], parts[0])
        barrier.wait(timeout=600)
        times: list[float] = []
        start = time.perf_counter()
        for i in range(ops):
            part = parts[int(rng.integers(len(parts)))]
            if rng.random() < write_share:
                backend.add(entry(qs[i], 50_000_000 + worker * 1_000_000 + i, part))
            else:
                t = time.perf_counter()
                lookup(backend, qs[i], part)
                times.append(time.perf_counter() - t)
        out.put((worker, time.perf_counter() - start, times))
    finally:
        backend.close()


def run_workers(
    kind: str,
    where: str,
    workers: int,
    ops: int,
    parts: Sequence[Partition] = (PART,),
    write_share: float = 0.2,
) -> dict[str, Any]:
    """``workers`` processes at once on one cache, each ``ops`` operations on random tables of
    ``parts``: total operations/s and the lookups' p50/p99 (None when all were writes)."""
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(workers), ctx.Queue()
    # One BLAS thread per worker: 4 processes x 2 spinning OpenBLAS threads on 2 cores slow the
    # embedded backend's exact search down several-fold (spawned children read this at start).
    saved = os.environ.get("OPENBLAS_NUM_THREADS")
    os.environ["OPENBLAS_NUM_THREADS"] = os.environ.get("BENCH_WORKER_BLAS_THREADS", "1")
    procs = [
        ctx.Process(
            target=_hammer, args=(kind, where, w, ops, barrier, out, list(parts), write_share)
        )
        for w in range(workers)
    ]
    for p in procs:
        p.start()
    if saved is None:
        del os.environ["OPENBLAS_NUM_THREADS"]
    else:
        os.environ["OPENBLAS_NUM_THREADS"] = saved
    results = [out.get(timeout=1800) for _ in procs]
    for p in procs:
        p.join()
    wall = max(r[1] for r in results)
    times = [t for r in results for t in r[2]]
    p50, p99 = percentiles(times) if times else (None, None)
    return {"ops_s": workers * ops / wall, "p50": p50, "p99": p99}


def hammer(
    kind: str, where: str, size: int, workers: int, ops: int, ann: bool = False
) -> dict[str, Any]:
    backend = open_backend(kind, where)
    try:
        fill(backend, size, seed=5)
        if ann:
            backend.create_ann_index(PART.key)  # type: ignore[attr-defined]
    finally:
        backend.close()
    return run_workers(kind, where, workers, ops)


# -- Postgres at scale: one big table, many partitions -----------------------------------------

SCALE_PROBES = 20  # partitions of each size the lookups ask (all of them when there are fewer)
PROBE_VECTORS = 10  # stored vectors kept per probe partition, to ask near them
# Noise on a stored unit vector that leaves the query at cosine ~0.9 to it (384-d): a near
# paraphrase, what a cache hit looks like; the exact search's best is then its source entry.
NEAR_SIGMA = 0.025


@dataclass(frozen=True)
class AnnOptions:
    """How the scale section builds and searches a partition's own HNSW index."""

    m: int
    ef_construction: int
    ef_search: tuple[int, ...]


class Layout:
    """Partitions of several sizes sharing one table: about ``total / len(sizes)`` rows in
    partitions of each size (at least one partition of each), what is left of ``total`` in
    more partitions of the smallest size."""

    def __init__(self, total: int, sizes: Sequence[int]) -> None:
        self.parts: list[Partition] = []
        self.rows: list[int] = []
        self.probes: dict[int, list[int]] = {}  # size -> indices of its probe partitions
        counts = {size: max(1, total // len(sizes) // size) for size in sizes}
        small = min(sizes)
        counts[small] += max(0, total - sum(n * size for size, n in counts.items())) // small
        for size, count in counts.items():
            first = len(self.parts)
            for j in range(count):
                self.parts.append(
                    Partition(category="importance", agent=f"agent {size}-{j}", params_hash="h")
                )
                self.rows.append(size)
            self.probes[size] = list(range(first, first + min(count, SCALE_PROBES)))

    @property
    def total(self) -> int:
        return sum(self.rows)

    def count(self, size: int) -> int:
        return self.rows.count(size)


def scale_fill(
    backend: CacheBackend, layout: Layout, seed: int
) -> tuple[float, dict[int, list[NDArray[np.float32]]]]:
    """Fill every partition in bulk, interleaved in random order as a town writes its tables,
    so one partition's rows lie scattered over the table, not side by side. Returns the rows/s
    and a few stored vectors of each probe partition."""
    from tqdm import tqdm

    rng = np.random.default_rng(seed)
    owners = np.repeat(np.arange(len(layout.parts), dtype=np.int64), layout.rows)
    rng.shuffle(owners)
    kept: dict[int, list[NDArray[np.float32]]] = {
        i: [] for probes in layout.probes.values() for i in probes
    }
    t0 = time.perf_counter()
    with tqdm(total=len(owners), desc="filling", unit="row", file=sys.stderr) as bar:
        for start in range(0, len(owners), 1000):
            chunk = owners[start : start + 1000]
            data = rng.standard_normal((len(chunk), DIM)).astype(np.float32)
            data /= np.linalg.norm(data, axis=1, keepdims=True)
            batch = []
            for j, owner in enumerate(chunk.tolist()):
                batch.append(entry(data[j], start + j, layout.parts[owner]))
                if owner in kept and len(kept[owner]) < PROBE_VECTORS:
                    kept[owner].append(data[j])
            backend.add_many(batch)
            bar.update(len(chunk))
    return len(owners) / (time.perf_counter() - t0), kept


def near_queries(
    layout: Layout,
    probes: Sequence[int],
    kept: dict[int, list[NDArray[np.float32]]],
    n: int,
    seed: int,
) -> list[tuple[Partition, NDArray[np.float32]]]:
    """``n`` queries near stored entries of the probe partitions, round robin."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        owner = probes[i % len(probes)]
        stored = kept[owner][(i // len(probes)) % len(kept[owner])]
        q = stored + rng.standard_normal(DIM).astype(np.float32) * NEAR_SIGMA
        out.append((layout.parts[owner], q / np.linalg.norm(q)))
    return out


def timed_lookups(
    backend: CacheBackend, queries: Sequence[tuple[Partition, NDArray[np.float32]]]
) -> tuple[float, float, list[int | None]]:
    lookup(backend, queries[0][1], queries[0][0])  # warm: connection open, plan cached
    times, best = [], []
    for part, q in queries:
        t = time.perf_counter()
        best.append(lookup(backend, q, part))
        times.append(time.perf_counter() - t)
    p50, p99 = percentiles(times)
    return p50, p99, best


def table_bytes(where: str) -> int:
    """The entries table's size on disk with its indexes and TOAST (pg only)."""
    import psycopg

    dsn, schema = where.split("#", 1)
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT pg_total_relation_size(to_regclass(%s))", (f"{schema}.entries",)
        ).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def scale(
    where: str,
    layout: Layout,
    queries: int,
    ann_min: int,
    workers: int,
    ops: int,
    ann: AnnOptions,
    with_covering: bool = False,
) -> dict[str, Any]:
    """Fill one Postgres cache with ``layout``; exact lookups per partition size; the first
    probe partition of each size >= ``ann_min`` with its own HNSW index (build time, then
    lookups and recall@1 against the exact search's best at each of ``ann.ef_search``); then
    ``workers`` processes writing at once."""
    backend = open_backend("pg", where)
    rows: list[dict[str, Any]] = []
    try:
        rate, kept = scale_fill(backend, layout, seed=7)
        size_bytes = table_bytes(where)
        for size, probes in layout.probes.items():
            qs = near_queries(layout, probes, kept, queries, seed=size)
            p50, p99, _ = timed_lookups(backend, qs)
            rows.append(
                {
                    "size": size,
                    "tables": f"{len(probes)} of {layout.count(size):,}",
                    "search": "exact",
                    "p50": p50,
                    "p99": p99,
                    "recall": None,
                    "build_s": None,
                }
            )
            if size < ann_min:
                continue
            one = near_queries(layout, probes[:1], kept, queries, seed=size + 1)
            _, _, exact = timed_lookups(backend, one)
            t0 = time.perf_counter()
            backend.create_ann_index(  # type: ignore[attr-defined]
                layout.parts[probes[0]].key, m=ann.m, ef_construction=ann.ef_construction
            )
            build = time.perf_counter() - t0
            for ef in ann.ef_search:
                searcher = open_backend("pg", where, ef_search=ef)
                try:
                    p50, p99, found = timed_lookups(searcher, one)
                finally:
                    searcher.close()
                recall = sum(a == e for a, e in zip(found, exact, strict=True)) / len(exact)
                rows.append(
                    {
                        "size": size,
                        "tables": f"1 of {layout.count(size):,}",
                        "search": f"hnsw, ef_search {ef}",
                        "p50": p50,
                        "p99": p99,
                        "recall": recall,
                        "build_s": build,
                    }
                )
        rows_c, explained = contiguous_control(backend, layout, kept, queries)
        rows.extend(rows_c)
    finally:
        backend.close()
    small = [layout.parts[i] for i, n in enumerate(layout.rows) if n == min(layout.rows)]
    writers = [
        {"share": share, **run_workers("pg", where, workers, ops, small, write_share=share)}
        for share in (1.0, 0.2)
    ]
    covering: dict[str, Any] | None = None
    if with_covering:
        covering = covering_index(where, layout, kept, queries)
        rows.append(covering["row"])
        explained.append(("scattered, covering index", covering["explained"]))
        writers.append(
            {
                "share": 1.0,
                "covering": True,
                **run_workers("pg", where, workers, ops, small, write_share=1.0),
            }
        )
    return {
        "covering": covering,
        "fill_rate": rate,
        "bytes": size_bytes,
        "rows": rows,
        "writers": writers,
        "ann": ann,
        "explained": explained,
    }


def covering_index(
    where: str,
    layout: Layout,
    kept: dict[int, list[NDArray[np.float32]]],
    queries: int,
) -> dict[str, Any]:
    """``PgBackend.create_covering_index`` (an operator's call, not made by default): the
    lookups of the smallest partitions again (the same queries as their exact row), the pages
    one touches, the bytes the index adds and its build time (with its VACUUM)."""
    before = table_bytes(where)
    size = min(layout.rows)
    probes = layout.probes[size]
    backend = open_backend("pg", where)
    try:
        t0 = time.perf_counter()
        backend.create_covering_index()  # type: ignore[attr-defined]
        build = time.perf_counter() - t0
        qs = near_queries(layout, probes, kept, queries, seed=size)
        p50, p99, _ = timed_lookups(backend, qs)
        explained = _analysed(backend, layout.parts[probes[0]], kept[probes[0]][0])
    finally:
        backend.close()
    return {
        "row": {
            "size": size,
            "tables": f"{len(probes)} of {layout.count(size):,}",
            "search": "exact, covering index",
            "p50": p50,
            "p99": p99,
            "recall": None,
            "build_s": build,
        },
        "explained": explained,
        "added_bytes": table_bytes(where) - before,
    }


def _analysed(backend: CacheBackend, partition: Partition, query: NDArray[np.float32]) -> str:
    """The top node's buffer counts and the execution time of one exact lookup."""
    plan = backend.explain_search(partition, query, 5, analyze=True)  # type: ignore[attr-defined]
    lines = [line.strip() for line in plan.splitlines()]
    buffers = next((line for line in lines if line.startswith("Buffers:")), "Buffers: ?")
    timing = next((line for line in lines if line.startswith("Execution Time:")), "")
    return f"{buffers}; {timing}"


def contiguous_control(
    backend: CacheBackend,
    layout: Layout,
    kept: dict[int, list[NDArray[np.float32]]],
    queries: int,
) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """What limits an exact lookup in a small partition: the same lookups in a partition of the
    smallest size written in one batch after the fill (its rows side by side on few pages),
    against the fill's partitions (their rows scattered over the table, one per page), with
    the pages one lookup touches in each."""
    size = min(layout.rows)
    control = Partition(category="importance", agent="contiguous control", params_hash="h")
    data = vectors(size, seed=99)
    for start in range(0, size, 1000):
        stop = min(size, start + 1000)
        backend.add_many([entry(data[i], 10**9 + i, control) for i in range(start, stop)])
    rng = np.random.default_rng(5)
    qs = []
    for i in range(queries):
        q = data[i % PROBE_VECTORS] + rng.standard_normal(DIM).astype(np.float32) * NEAR_SIGMA
        qs.append((control, q / np.linalg.norm(q)))
    p50, p99, _ = timed_lookups(backend, qs)
    row = {
        "size": size,
        "tables": "1 written in one batch",
        "search": "exact, rows side by side",
        "p50": p50,
        "p99": p99,
        "recall": None,
        "build_s": None,
    }
    scattered = layout.parts[layout.probes[size][0]]
    explained = [
        ("scattered", _analysed(backend, scattered, kept[layout.probes[size][0]][0])),
        ("side by side", _analysed(backend, control, data[0])),
    ]
    return [row], explained


def print_scale(layout: Layout, result: dict[str, Any], workers: int) -> None:
    per_row = result["bytes"] / max(1, layout.total)
    print()
    print(
        f"Postgres, {layout.total:,} rows in {len(layout.parts):,} partitions of one table: "
        f"{result['bytes'] / 2**30:.2f} GiB on disk ({per_row:,.0f} bytes per row, indexes "
        f"included), filled at {result['fill_rate']:,.0f} rows/s in batches of 1,000; "
        f"indexed partitions: HNSW m {result['ann'].m}, "
        f"ef_construction {result['ann'].ef_construction}"
    )
    print(
        "| rows per partition | partitions asked | search | lookup p50 ms | lookup p99 ms "
        "| recall@1 | index build s |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in result["rows"]:
        recall = "" if r["recall"] is None else f"{r['recall']:.3f}"
        build = "" if r["build_s"] is None else f"{r['build_s']:.1f}"
        print(
            f"| {r['size']:,} | {r['tables']} | {r['search']} | {r['p50']:.2f} "
            f"| {r['p99']:.2f} | {recall} | {build} |"
        )
    print()
    print(f"One exact lookup in a {min(layout.rows):,}-row partition, EXPLAIN (ANALYZE, BUFFERS):")
    for label, text in result["explained"]:
        print(f"- rows {label}: {text}")
    print()
    print(
        f"{workers} processes at once, single-row operations on random "
        f"{min(layout.rows):,}-row partitions of that table:"
    )
    print("| writes | total ops/s | lookup p50 ms | lookup p99 ms |")
    print("|---|---|---|---|")
    for w in result["writers"]:
        p50 = "" if w["p50"] is None else f"{w['p50']:.2f}"
        p99 = "" if w["p99"] is None else f"{w['p99']:.2f}"
        share = f"{w['share']:.0%}" + (", covering index" if w.get("covering") else "")
        print(f"| {share} | {w['ops_s']:,.0f} | {p50} | {p99} |")
    if result.get("covering"):
        added = result["covering"]["added_bytes"]
        build = result["covering"]["row"]["build_s"]
        print(
            f"The covering index added {added / 2**30:.2f} GiB "
            f"({added / max(1, layout.total):,.0f} bytes per row); built with VACUUM ANALYZE "
            f"in {build:.0f} s"
        )


# -- driver -----------------------------------------------------------------------------------


@contextmanager
def pg_location(dsn: str | None) -> Iterator[Callable[[str], str]]:
    """Yields a function naming a fresh schema on the server (``dsn#schema``)."""
    if dsn:
        yield lambda name: f"{dsn}#bench_{name}"
        return
    with PgTestServer(settings={"shared_buffers": "512MB"}) as server:
        yield lambda name: f"{server.dsn}#bench_{name}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", type=int, nargs="*", default=[1000, 10_000], help="one table of each size"
    )
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--inserts", type=int, default=300)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--hammer-size", type=int, default=10_000, help="0: no hammer section")
    parser.add_argument("--hammer-ops", type=int, default=500, help="operations per worker")
    parser.add_argument("--dsn", help="an existing Postgres (default: a throwaway server)")
    parser.add_argument("--backends", nargs="+", default=["local", "pg"])
    parser.add_argument(
        "--scale", type=int, default=0, help="Postgres at scale: rows in all (0: no such section)"
    )
    parser.add_argument("--scale-sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--scale-queries", type=int, default=300, help="lookups per size")
    parser.add_argument(
        "--scale-ann-min", type=int, default=10_000, help="index partitions of this size and up"
    )
    parser.add_argument(
        "--scale-covering",
        action="store_true",
        help="then measure PgBackend.create_covering_index (not made by default): lookups, "
        "pages, bytes and writes",
    )
    parser.add_argument("--scale-m", type=int, default=16, help="HNSW m of an indexed partition")
    parser.add_argument(
        "--scale-ef-construction", type=int, default=64, help="HNSW ef_construction"
    )
    parser.add_argument(
        "--scale-ef-search",
        type=lambda text: tuple(int(x) for x in text.split(",")),
        default=(40, 100, 200),
        help="comma-separated hnsw.ef_search values to measure (the backend's default is 100)",
    )
    args = parser.parse_args()
    if ("pg" in args.backends or args.scale) and (reason := missing_extra()):
        sys.exit(reason)
    print(header_line(machine_info()), flush=True)

    rows: list[tuple[str, ...]] = []
    with tempfile.TemporaryDirectory() as tmp, pg_location(args.dsn) as pg:

        def where(kind: str, name: str) -> str:
            return pg(name) if kind == "pg" else str(Path(tmp) / name)

        for size in args.sizes:
            for kind in args.backends:
                for r in measure(kind, where(kind, f"n{size}"), size, args.queries, args.inserts):
                    rows.append(
                        (
                            r["kind"],
                            f"{size:,}",
                            f"{r['p50']:.2f}",
                            f"{r['p99']:.2f}",
                            f"{r['insert_rate']:,.0f}",
                            f"{r['prep_s']:.1f}",
                        )
                    )
                    print(" | ".join(rows[-1]), flush=True)
        hammer_rows = []
        runs = [(k, False) for k in args.backends] + [("pg", True)] * ("pg" in args.backends)
        if not args.hammer_size:
            runs = []
        for kind, ann in runs:
            name = "hammer_hnsw" if ann else "hammer"
            r = hammer(
                kind, where(kind, name), args.hammer_size, args.workers, args.hammer_ops, ann
            )
            hammer_rows.append(
                (
                    f"{kind} + hnsw" if ann else kind,
                    f"{args.workers}",
                    f"{args.hammer_size:,}",
                    f"{r['ops_s']:,.0f}",
                    f"{r['p50']:.2f}",
                    f"{r['p99']:.2f}",
                )
            )
            print(" | ".join(hammer_rows[-1]), flush=True)
        if args.scale:
            layout = Layout(args.scale, args.scale_sizes)
            scaled = scale(
                pg("scale"),
                layout,
                args.scale_queries,
                args.scale_ann_min,
                args.workers,
                args.hammer_ops,
                AnnOptions(args.scale_m, args.scale_ef_construction, args.scale_ef_search),
                with_covering=args.scale_covering,
            )

    if rows:
        print()
        print("(fill s: loading the table in bulk; for '+ hnsw': building the partition's index)")
        print(
            "| backend | entries/partition | lookup p50 ms | lookup p99 ms | inserts/s | fill s |"
        )
        print("|---|---|---|---|---|---|")
        for row in rows:
            print("| " + " | ".join(row) + " |")
    if hammer_rows:
        print()
        print(f"{args.workers} processes on one cache, 80 % lookups / 20 % inserts:")
        print("| backend | workers | entries | total ops/s | lookup p50 ms | lookup p99 ms |")
        print("|---|---|---|---|---|---|")
        for row in hammer_rows:
            print("| " + " | ".join(row) + " |")
    if args.scale:
        print_scale(layout, scaled, args.workers)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
