"""Hit-path latency of ``CachedLLM.chat.completions.create``, embedding excluded.

A table of N entries is filled directly through the backend; each query is a stored entry's
keyword text whose vector the embedder returns from a precomputed table (so no model runs: what
is timed is keys, index search, entry fetch, modifier, the rebuilt ChatCompletion, and the
ledger). Prints p50/p99 per size and the search+fetch share.

Vectors (``--vectors``): ``random`` 384-d unit vectors (the hardest case for the HNSW index a
table past 10k entries uses: every direction is as likely), or ``quora``: the default
embedder's (MiniLM) vectors of real questions from the development set beside the repository
(computed once, kept in the temp directory).

    .venv/bin/python benchmarks/bench_hit_path.py --sizes 10000 100000 --queries 2000
    .venv/bin/python benchmarks/bench_hit_path.py --vectors quora --sizes 100000
    .venv/bin/python benchmarks/bench_hit_path.py --sizes 10000 --lead-words 2
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from bench_models import header_line, machine_info  # beside this file
from dev_set import quora_vectors
from numpy.typing import NDArray

from llmcache import CacheConfig, CachedLLM, CacheOptions, SemanticCache
from llmcache.storage import LocalBackend
from llmcache.testing import FakeOpenAI
from llmcache.types import CacheEntry

DIM = 384


class PrecomputedEmbedder:
    """Returns stored vectors for known texts: embedding cost is excluded from the timing."""

    model_id = "bench-precomputed-384"
    dim = DIM

    def __init__(self, table: dict[str, NDArray[np.float32]]) -> None:
        self.table = table

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        return np.stack([self.table[t] for t in texts])


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def stored_vectors(kind: str, size: int, rng: np.random.Generator) -> NDArray[np.float32]:
    if kind == "quora":
        # The same held-out count as bench_index's default, so both share the kept embeddings.
        return quora_vectors(size, 1000, 0)[0]
    vectors = rng.standard_normal((size, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def run(
    size: int, queries: int, seed: int, kind: str = "random", lead_words: int = 0
) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    vectors = stored_vectors(kind, size, rng)
    texts = [f"memory number {i}" for i in range(size)]
    embedder = PrecomputedEmbedder(dict(zip(texts, vectors, strict=True)))
    messages = [{"role": "user", "content": "Rate the importance of a memory, 1-10."}]
    kwargs = {"model": "gpt-4o-mini", "messages": messages}
    with tempfile.TemporaryDirectory() as tmp:
        cache = SemanticCache(
            Path(tmp) / "c", embedder=embedder, config=CacheConfig(lead_words=lead_words)
        )
        client = CachedLLM(FakeOpenAI(lambda r: '{"score": 5}'), cache=cache)
        # The first entry goes in as a real miss would store it, which names the table.
        first = CacheOptions(category="importance", agent="A", keywords=[texts[0]])
        completion = client.chat.completions.create(**kwargs, cache=first).model_dump(mode="json")
        (partition,) = cache.partitions()
        t0 = time.perf_counter()
        for i in range(1, size):
            cache.put(
                CacheEntry(
                    partition=partition,
                    embed_text=texts[i],
                    embed_mode="keyword",
                    embedder_id=embedder.model_id,
                    vector_b64=CacheEntry.encode_vector(vectors[i]),
                    keywords=(texts[i],),
                    messages=messages,
                    content='{"score": 5}',
                    completion=completion,
                    usage={"prompt_tokens": 20, "completion_tokens": 5},
                )
            )
        fill_s = time.perf_counter() - t0
        # First lookup builds/loads the partition's index; a table past the exact-search limit
        # then moves to HNSW in a background thread. Time the steady state after that.
        cache.lookup(partition, vectors[0])
        t0 = time.perf_counter()
        if isinstance(cache.backend, LocalBackend):
            cache.backend.wait_for_indexes()
        index_s = time.perf_counter() - t0
        picks = rng.integers(0, size, queries)
        full: list[float] = []
        search: list[float] = []
        hits = 0
        for i in picks:
            options = CacheOptions(category="importance", agent="A", keywords=[texts[i]])
            t = time.perf_counter()
            _, info = client.chat.completions.create_with_info(**kwargs, cache=options)
            full.append(time.perf_counter() - t)
            hits += info.outcome == "hit"
            t = time.perf_counter()
            cache.lookup(partition, vectors[i])
            search.append(time.perf_counter() - t)
        client.close()
    return {
        "size": size,
        "fill_s": fill_s,
        "index_s": index_s,
        "hit_rate": hits / queries,
        "p50_ms": 1e3 * percentile(full, 50),
        "p99_ms": 1e3 * percentile(full, 99),
        "lookup_p50_ms": 1e3 * percentile(search, 50),
        "lookup_p99_ms": 1e3 * percentile(search, 99),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vectors", choices=("random", "quora"), default="random")
    parser.add_argument(
        "--lead-words", type=int, default=0, help="CacheConfig.lead_words: each hit compares them"
    )
    args = parser.parse_args()
    print(header_line(machine_info()), flush=True)
    print(
        f"{args.vectors} vectors, {args.queries} hits per size, lead_words={args.lead_words}",
        flush=True,
    )
    rows = [run(n, args.queries, args.seed, args.vectors, args.lead_words) for n in args.sizes]
    print(
        f"{'entries':>8} {'fill s':>7} {'index s':>7} {'hit%':>6} {'create p50 ms':>13} "
        f"{'p99 ms':>7} {'search+fetch p50':>16} {'p99':>6} {'search share':>12}"
    )
    for r in rows:
        print(
            f"{r['size']:>8} {r['fill_s']:>7.1f} {r['index_s']:>7.1f} {100 * r['hit_rate']:>5.1f}% "
            f"{r['p50_ms']:>13.3f} {r['p99_ms']:>7.3f} {r['lookup_p50_ms']:>16.3f} "
            f"{r['lookup_p99_ms']:>6.3f} {r['lookup_p50_ms'] / r['p50_ms']:>11.0%}"
        )
    if len(rows) > 1:
        print(
            f"p50 ratio {rows[-1]['size']}/{rows[0]['size']} entries: "
            f"{rows[-1]['p50_ms'] / rows[0]['p50_ms']:.2f}x"
        )


if __name__ == "__main__":
    main()
