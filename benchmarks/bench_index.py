"""hnswlib vs exact (numpy) search: latency, recall@1, build time, memory.

Two parts:

- ``--sizes`` (default 100k and 1M vectors): build both indexes, then time single-vector searches
  (p50/p99 per query, through llmcache's own ``HnswIndex``/``ExactIndex`` wrappers, so the lock
  and conversions are included) and measure recall@1 against the true nearest neighbour, for two
  kinds of queries: *perturbed* copies of stored vectors (what a cache lookup looks like: a near
  duplicate exists) and *random* vectors (the worst case: every neighbour is about as far).
- ``--crossover`` (default 1k..50k): search and insert cost per vector of both indexes at small
  sizes, which is how the default index's exact-search limit (``DEFAULT_EXACT_LIMIT`` in
  llmcache's index module) was chosen.

Vectors (``--vectors``): ``random`` unit vectors (the hardest case for a graph index: every
direction is as likely), or ``quora``: the default embedder's (MiniLM) vectors of real questions,
the unique questions of the development set beside the repository (``../shared/benchmarks/``).
There the *near* queries are held-out paraphrases of stored questions (labelled duplicates) and
the *other* queries held-out questions with no labelled duplicate. Embeddings are computed once
and kept in the temp directory.

Examples::

    python benchmarks/bench_index.py --sizes 100000 --crossover ""  # ~5 min on 2 busy cores
    python benchmarks/bench_index.py                      # crossover, 100k and 1M: ~1 h, ~5 GB
    python benchmarks/bench_index.py --vectors quora --sizes 100000 --crossover "" --M 16 \
        --ef-construction 100                             # real vectors (first run embeds them)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import time
from pathlib import Path

import numpy as np
from bench_models import header_line, machine_info  # beside this file
from dev_set import quora_vectors  # beside this file
from numpy.typing import NDArray

from llmcache.index import AutoIndex, ExactIndex, HnswIndex


def unit_rows(
    rng: np.random.Generator, n: int, dim: int, chunk: int = 100_000
) -> NDArray[np.float32]:
    out = np.empty((n, dim), dtype=np.float32)
    for start in range(0, n, chunk):
        block = rng.standard_normal((min(chunk, n - start), dim), dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[start : start + len(block)] = block
    return out


def perturb(
    rng: np.random.Generator, rows: NDArray[np.float32], noise: float
) -> NDArray[np.float32]:
    """Add noise of norm ~``noise``: cosine to the original ~ 1/sqrt(1 + noise**2)."""
    dim = rows.shape[1]
    noisy = rows + rng.standard_normal(rows.shape, dtype=np.float32) * (noise / np.sqrt(dim))
    return (noisy / np.linalg.norm(noisy, axis=1, keepdims=True)).astype(np.float32)


def true_top1(data: NDArray[np.float32], queries: NDArray[np.float32]) -> NDArray[np.int64]:
    """The exact nearest neighbour of every query, by chunked matrix products (BLAS)."""
    best = np.full(len(queries), -np.inf, dtype=np.float32)
    arg = np.zeros(len(queries), dtype=np.int64)
    for start in range(0, len(data), 50_000):
        sims = queries @ data[start : start + 50_000].T
        i = sims.argmax(axis=1)
        s = sims[np.arange(len(queries)), i]
        better = s > best
        best[better] = s[better]
        arg[better] = i[better] + start
    return arg


def recall(
    data: NDArray[np.float32],
    queries: NDArray[np.float32],
    top: NDArray[np.int64],
    truth: NDArray[np.int64],
) -> float:
    """Recall@1: the share of queries whose answer is as near as the true nearest (real
    questions hold exact duplicates among their embeddings, so ties count as found)."""
    got = np.sum(queries * data[top], axis=1)
    best = np.sum(queries * data[truth], axis=1)
    return float(np.mean(got >= best - 1e-6))


def time_queries(
    index: ExactIndex | HnswIndex, k: int, queries: NDArray[np.float32]
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """Per-query latency in microseconds, and the top-1 id of each query."""
    latencies = np.empty(len(queries))
    top = np.empty(len(queries), dtype=np.int64)
    for j, q in enumerate(queries):
        t0 = time.perf_counter_ns()
        result = index.search(q, k)
        latencies[j] = (time.perf_counter_ns() - t0) / 1e3
        top[j] = result[0][0]
    return latencies, top


def pct(latencies: NDArray[np.float64]) -> str:
    p50, p99 = np.percentile(latencies, [50, 99])
    return f"p50 {fmt_us(p50):>9} p99 {fmt_us(p99):>9}"


def fmt_us(us: float) -> str:
    return f"{us / 1e3:.2f} ms" if us >= 1000 else f"{us:.0f} µs"


def peak_rss_gb() -> float:
    # ru_maxrss is KiB on Linux, bytes on macOS.
    scale = 1 if platform.system() == "Darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**30


def build_hnsw(
    args: argparse.Namespace, n: int, data: NDArray[np.float32]
) -> tuple[HnswIndex, float, int]:
    """Build the graph in chunks, checkpointing to ``--checkpoint`` so a killed run resumes.

    Returns the index, the build time summed over all runs, and where this run resumed.
    """
    hnsw = HnswIndex(
        args.dim,
        M=args.M,
        ef_construction=args.ef_construction,
        initial_capacity=n,
        num_threads=args.threads,
    )
    built, spent, resumed = 0, 0.0, 0
    ckpt = progress = None
    if args.checkpoint:
        os.makedirs(args.checkpoint, exist_ok=True)
        name = (
            f"hnsw-{args.vectors}-n{n}-d{args.dim}-M{args.M}-ef{args.ef_construction}"
            f"-seed{args.seed}"
        )
        ckpt = Path(args.checkpoint) / f"{name}.bin"
        progress = Path(args.checkpoint) / f"{name}.json"
        if progress.exists() and ckpt.exists():
            state = json.loads(progress.read_text())
            hnsw.load(ckpt)
            built, spent, resumed = state["built"], state["seconds"], state["built"]
    ids = np.arange(n, dtype=np.int64)
    step = 10_000
    t0 = time.perf_counter()
    for start in range(built, n, step):
        hnsw.add(ids[start : start + step].tolist(), data[start : start + step])
        done = min(start + step, n)
        if done % 100_000 == 0 or done == n:
            elapsed = spent + time.perf_counter() - t0
            print(f"  built {done:,}/{n:,} in {elapsed:.0f} s", flush=True)
            if ckpt is not None and progress is not None and n >= 200_000:
                hnsw.save(ckpt)
                progress.write_text(json.dumps({"built": done, "seconds": elapsed}))
    return hnsw, spent + time.perf_counter() - t0, resumed


def run_size(args: argparse.Namespace, n: int, rng: np.random.Generator) -> None:
    dim = args.dim
    print(f"\n== n = {n:,} vectors, dim {dim}, {args.vectors} vectors ==")
    t0 = time.perf_counter()
    if args.vectors == "quora":
        data, q_pert, q_rand = quora_vectors(n, args.queries, args.seed)
        half = len(q_pert)
        truth_pert, truth_rand = true_top1(data, q_pert), true_top1(data, q_rand)
        sources = np.arange(half)  # the anchors are stored first, in the queries' order
        kinds = "paraphrase queries: {half} held-out duplicates of stored questions"
    else:
        data = unit_rows(rng, n, dim)
        half = args.queries // 2
        sources = rng.choice(n, size=half, replace=False)
        q_pert = perturb(rng, data[sources], args.noise)
        q_rand = unit_rows(rng, args.queries - half, dim)
        truth_pert, truth_rand = true_top1(data, q_pert), true_top1(data, q_rand)
        kinds = f"perturbed queries: {{half}} (noise {args.noise})"
    mean_cos = float(np.mean(np.sum(q_pert * data[truth_pert], axis=1)))
    print(
        f"data + ground truth in {time.perf_counter() - t0:.1f} s; "
        + kinds.format(half=half)
        + f", mean cosine to their nearest {mean_cos:.3f}; other queries: {len(q_rand)}; "
        f"the source is the true top-1 for {np.mean(truth_pert == sources):.1%} of them"
    )
    ids = np.arange(n, dtype=np.int64)

    # -- HNSW ----------------------------------------------------------------------------------
    hnsw, build, resumed = build_hnsw(args, n, data)
    file_mb = hnsw._index.index_file_size() / 2**20
    print(
        f"hnsw build (M={args.M}, ef_construction={args.ef_construction}, "
        f"{args.threads} threads): {build:.1f} s = {build / n * 1e6 * max(args.threads, 1):.0f} "
        f"µs·thread per vector; index file {file_mb:,.0f} MiB "
        f"(raw vectors {n * dim * 4 / 2**20:,.0f} MiB)"
        + (f"; resumed from a checkpoint at {resumed:,} vectors" if resumed else "")
    )

    # -- the cache's own path: a table past the exact limit builds its graph in the background,
    # in 256-vector chunks, while the exact index answers --------------------------------------
    if args.library_build:
        auto = AutoIndex(
            dim,
            exact_limit=n - 1,
            M=args.M,
            ef_construction=args.ef_construction,
            num_threads=args.threads,
        )
        t0 = time.perf_counter()
        auto.add(ids.tolist(), data)  # one past the limit: the switch starts
        started = time.perf_counter() - t0
        auto.wait()
        took = time.perf_counter() - t0
        print(
            f"library build (AutoIndex, background, 256-vector chunks, {args.threads} threads): "
            f"{took:.1f} s until HNSW answers ({started:.1f} s of it adding to the exact index)"
        )
        auto.close()
        del auto

    # -- exact ---------------------------------------------------------------------------------
    exact = ExactIndex(dim)
    t0 = time.perf_counter()
    for start in range(0, n, 100_000):
        exact.add(ids[start : start + 100_000].tolist(), data[start : start + 100_000])
    exact_build = time.perf_counter() - t0
    n_exact = min(args.exact_queries, half)
    lat_exact, top_exact = time_queries(exact, 1, q_pert[:n_exact])
    found = recall(data, q_pert[:n_exact], top_exact, truth_pert[:n_exact])
    assert found == 1.0, "exact index disagrees with truth"
    print(
        f"exact: add {exact_build:.1f} s; search {pct(lat_exact)} ({n_exact} queries); "
        "recall@1 1.000 by construction (checked)"
    )

    for ef in args.ef_search:
        hnsw.ef_search = ef
        lat_p, top_p = time_queries(hnsw, 1, q_pert)
        lat_r, top_r = time_queries(hnsw, 1, q_rand)
        lat = np.concatenate([lat_p, lat_r])
        speedup = np.percentile(lat_exact, 50) / np.percentile(lat, 50)
        print(
            f"hnsw ef={ef:<4} search {pct(lat)}  recall@1 near "
            f"{recall(data, q_pert, top_p, truth_pert):.3f}  "
            f"other {recall(data, q_rand, top_r, truth_rand):.3f}  "
            f"exact/hnsw p50 = {speedup:,.0f}x"
        )
    print(
        f"peak RSS of this process so far: {peak_rss_gb():.1f} GiB (data, exact copy, graph); "
        f"load average {os.getloadavg()[0]:.1f}"
    )


def run_crossover(args: argparse.Namespace, sizes: list[int], rng: np.random.Generator) -> None:
    dim = args.dim
    print(
        f"\n== crossover (dim {dim}; inserts one vector per call, single-threaded, as the "
        f"cache does; HNSW M={args.M}, ef_construction={args.ef_construction}, ef_search 64) =="
    )
    print(
        f"{'n':>8} {'exact p50':>10} {'exact p99':>10} {'hnsw p50':>10} {'hnsw p99':>10} "
        f"{'hnsw insert':>12} {'exact insert':>13} {'hnsw r@1':>9}"
    )
    for n in sizes:
        data = unit_rows(rng, n, dim)
        queries = perturb(rng, data[rng.choice(n, size=min(300, n), replace=False)], args.noise)
        truth = true_top1(data, queries)
        hnsw = HnswIndex(dim, M=args.M, ef_construction=args.ef_construction, initial_capacity=n)
        exact = ExactIndex(dim)
        # Build most of each index in bulk, then time single inserts at this size.
        bulk = n - 200
        hnsw.add(range(bulk), data[:bulk])
        exact.add(range(bulk), data[:bulk])
        t0 = time.perf_counter()
        for i in range(bulk, n):
            hnsw.add([i], data[i : i + 1])
        hnsw_insert = (time.perf_counter() - t0) / 200 * 1e6
        t0 = time.perf_counter()
        for i in range(bulk, n):
            exact.add([i], data[i : i + 1])
        exact_insert = (time.perf_counter() - t0) / 200 * 1e6
        lat_e, _ = time_queries(exact, 4, queries)
        lat_h, top_h = time_queries(hnsw, 4, queries)
        p50e, p99e = np.percentile(lat_e, [50, 99])
        p50h, p99h = np.percentile(lat_h, [50, 99])
        print(
            f"{n:>8,} {fmt_us(p50e):>10} {fmt_us(p99e):>10} {fmt_us(p50h):>10} "
            f"{fmt_us(p99h):>10} {fmt_us(hnsw_insert):>12} {fmt_us(exact_insert):>13} "
            f"{recall(data, queries, top_h, truth):>9.3f}"
        )


def int_list(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--sizes",
        type=int_list,
        default=[100_000, 1_000_000],
        help="comma-separated table sizes for the recall/latency part",
    )
    parser.add_argument(
        "--crossover",
        type=int_list,
        default=[1_000, 2_000, 5_000, 10_000, 20_000],
        help='comma-separated small sizes for the crossover part ("" to skip)',
    )
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument(
        "--vectors",
        choices=("random", "quora"),
        default="random",
        help="random unit vectors, or MiniLM vectors of the development set's questions",
    )
    parser.add_argument(
        "--queries",
        type=int,
        default=1000,
        help="queries per size: half near ones (perturbed copies, paraphrases), half others",
    )
    parser.add_argument(
        "--exact-queries",
        type=int,
        default=200,
        help="how many of the perturbed queries time the exact index",
    )
    parser.add_argument(
        "--noise",
        type=float,
        default=0.5,
        help="perturbation norm (0.5 gives cosine ~0.89 to the source vector)",
    )
    parser.add_argument("--M", type=int, default=32, help="HNSW links per node (library default)")
    parser.add_argument("--ef-construction", type=int, default=200)
    parser.add_argument("--ef-search", type=int_list, default=[32, 64, 128, 256])
    parser.add_argument(
        "--threads",
        type=int,
        default=os.cpu_count() or 1,
        help="hnswlib threads for the bulk build",
    )
    parser.add_argument(
        "--library-build",
        action="store_true",
        help="also time the cache's own switch to HNSW (a background build in small chunks)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--checkpoint",
        default=None,
        help="directory to checkpoint large HNSW builds to (every 100k), so a rerun resumes",
    )
    args = parser.parse_args()

    # Date, CPU and the load average at start: how much other work disturbed the timings.
    print(header_line(machine_info()))
    print(
        f"bench_index: numpy {np.__version__}; "
        f"{args.vectors} vectors, sizes {args.sizes}, crossover {args.crossover}, "
        f"dim {args.dim}, M {args.M}, "
        f"ef_construction {args.ef_construction}, ef_search {args.ef_search}, seed {args.seed}"
    )
    rng = np.random.default_rng(args.seed)
    if args.crossover:
        run_crossover(args, args.crossover, rng)
    for n in args.sizes:
        run_size(args, n, rng)
    print(f"\nload average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
