"""Embedded backend (diskcache + hnswlib) vs Postgres + pgvector: lookups, inserts, 4 workers.

For each table size N (entries in one partition, random 384-d unit vectors, ~1 kB answers):

- lookup p50/p99: one ``search(k=5)`` plus a ``get`` of the best entry, as a cache hit does;
- insert rate: single ``add`` calls per second into the filled table;
- Postgres twice: exact per-partition scan (the default), then with the partition's own HNSW
  index (``PgBackend.create_ann_index``), with its build time;
- then 4 worker processes hammer one cache at once (80 % lookups, 20 % inserts, over a table
  of ``--hammer-size`` entries): total operations/s and lookup p50/p99 under contention
  (workers run with OPENBLAS_NUM_THREADS=1; set BENCH_WORKER_BLAS_THREADS to change it).

Postgres runs in a throwaway server (tests/pg_support.py: fsync off, on 127.0.0.1) unless
``--dsn`` names one. Needs the [pg] extra (``pip install -e .[pg]``; scripts/setup.sh installs it).

    .venv/bin/python benchmarks/bench_backends.py                        # 1k and 10k
    .venv/bin/python benchmarks/bench_backends.py --sizes 1000 10000 100000
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmcache import (
    CacheBackend,
    CacheEntry,
    EmbedMode,
    LocalBackend,
    Partition,
    PgBackend,
    Usage,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from pg_support import PgTestServer, missing_extra

DIM = 384
EMBEDDER = "bench-random-384"
PART = Partition(category="importance", agent="Liam Oliver", params_hash="h", model="m")
ANSWER = '{"rating": 4, "reason": "' + "a routine morning activity " * 30 + '"}'


def vectors(n: int, seed: int) -> NDArray[np.float32]:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def entry(vector: NDArray[np.float32], i: int) -> CacheEntry:
    text = f"Liam Oliver Tree in Victoria Park is Idle {i}"
    return CacheEntry(
        partition=PART,
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


def open_backend(kind: str, where: str) -> CacheBackend:
    if kind == "pg":
        dsn, schema = where.split("#", 1)
        backend: CacheBackend = PgBackend(dsn, schema=schema)
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


def lookup(backend: CacheBackend, query: NDArray[np.float32]) -> None:
    best = backend.search(PART, query, 5)
    if best:
        backend.get(PART.key, best[0][0])


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


def _hammer(kind: str, where: str, worker: int, ops: int, barrier: Any, out: Any) -> None:
    backend = open_backend(kind, where)
    try:
        rng = np.random.default_rng(100 + worker)
        qs = vectors(ops, seed=200 + worker)
        lookup(backend, qs[0])
        barrier.wait(timeout=600)
        times: list[float] = []
        start = time.perf_counter()
        for i in range(ops):
            if rng.random() < 0.2:
                backend.add(entry(qs[i], 50_000_000 + worker * 1_000_000 + i))
            else:
                t = time.perf_counter()
                lookup(backend, qs[i])
                times.append(time.perf_counter() - t)
        out.put((worker, time.perf_counter() - start, times))
    finally:
        backend.close()


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
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(workers), ctx.Queue()
    # One BLAS thread per worker: 4 processes x 2 spinning OpenBLAS threads on 2 cores slow the
    # embedded backend's exact search down several-fold (spawned children read this at start).
    saved = os.environ.get("OPENBLAS_NUM_THREADS")
    os.environ["OPENBLAS_NUM_THREADS"] = os.environ.get("BENCH_WORKER_BLAS_THREADS", "1")
    procs = [
        ctx.Process(target=_hammer, args=(kind, where, w, ops, barrier, out))
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
    p50, p99 = percentiles(times)
    return {"ops_s": workers * ops / wall, "p50": p50, "p99": p99}


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
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--inserts", type=int, default=300)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--hammer-size", type=int, default=10_000)
    parser.add_argument("--hammer-ops", type=int, default=500, help="operations per worker")
    parser.add_argument("--dsn", help="an existing Postgres (default: a throwaway server)")
    parser.add_argument("--backends", nargs="+", default=["local", "pg"])
    args = parser.parse_args()
    if "pg" in args.backends and (reason := missing_extra()):
        sys.exit(reason)

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

    print()
    print("(fill s: loading the table in bulk; for '+ hnsw': building the partition's index)")
    print("| backend | entries/partition | lookup p50 ms | lookup p99 ms | inserts/s | fill s |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()
    print(f"{args.workers} processes on one cache, 80 % lookups / 20 % inserts:")
    print("| backend | workers | entries | total ops/s | lookup p50 ms | lookup p99 ms |")
    print("|---|---|---|---|---|---|")
    for row in hammer_rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
