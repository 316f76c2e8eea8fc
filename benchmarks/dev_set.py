"""The development set beside the repository, and its texts embedded once per machine.

``../shared/benchmarks/quora_pairs.jsonl.gz`` holds labelled Quora question pairs (see its
README). Benchmarks that need the default embedder's vectors of many of its questions get them
from :func:`embed_cached`, which computes them once and keeps them in the temp directory:
embedding 100k questions takes minutes on 2 cores.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import tempfile
import time
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from llmcache.embedders import MiniLMEmbedder

__all__ = ["QUORA", "embed_cached", "quora_vectors"]

QUORA = (
    Path(__file__).resolve().parents[1] / ".." / "shared" / "benchmarks" / "quora_pairs.jsonl.gz"
)


def embed_cached(texts: list[str], purpose: str) -> tuple[str, NDArray[np.float32]]:
    """The default embedder's model id and its vectors of ``texts``, in order; kept under
    ``<tmp>/llmcache-bench-<purpose>/`` by a digest of the model and the texts."""
    model = MiniLMEmbedder()
    digest = hashlib.sha256("\n".join([model.model_id, *texts]).encode()).hexdigest()[:16]
    cache = Path(tempfile.gettempdir()) / f"llmcache-bench-{purpose}" / f"{digest}.npy"
    if cache.exists():
        return model.model_id, np.load(cache)
    started = time.perf_counter()
    parts = []
    for i in range(0, len(texts), 256):
        parts.append(model.embed(texts[i : i + 256]))
        if len(texts) > 10_000 and (i // 256) % 40 == 0:
            print(f"  embedded {i + len(parts[-1]):,}/{len(texts):,}", flush=True)
    vectors = np.concatenate(parts).astype(np.float32)
    print(f"embedded {len(texts):,} texts in {time.perf_counter() - started:.0f} s")
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.save(cache, vectors)
    return model.model_id, vectors


def quora_vectors(
    n: int, queries: int, seed: int
) -> tuple[NDArray[np.float32], NDArray[np.float32], NDArray[np.float32]]:
    """MiniLM vectors of ``n`` stored Quora questions, of ``queries // 2`` held-out paraphrases
    of stored ones, and of as many held-out questions with no labelled duplicate."""
    with gzip.open(QUORA, "rt", encoding="utf-8") as f:
        pairs = [json.loads(line) for line in f]
    pairs = [(p["a"].strip(), p["b"].strip(), p["duplicate"]) for p in pairs]
    pairs = [(a, b, d) for a, b, d in pairs if a and b and a != b]
    random.Random(seed).shuffle(pairs)
    half = queries // 2
    near = [(a, b) for a, b, d in pairs if d]
    duplicated = {t for a, b, d in pairs if d for t in (a, b)}
    other = list(dict.fromkeys(b for _, b, d in pairs if not d and b not in duplicated))
    near_queries: list[str] = []
    anchors: list[str] = []
    for a, b in near:
        if len(near_queries) == half:
            break
        if b not in near_queries and b not in anchors and a not in near_queries + anchors:
            near_queries.append(b)
            anchors.append(a)
    other_queries = other[: queries - half]
    held = set(near_queries) | set(other_queries)
    everything = dict.fromkeys(t for a, b, _ in pairs for t in (a, b))
    stored = list(dict.fromkeys(anchors + [t for t in everything if t not in held]))[:n]
    if len(stored) < n:
        raise SystemExit(f"the development set has only {len(stored):,} questions to store")
    texts = stored + near_queries + other_queries
    _, vectors = embed_cached(texts, "index")
    return vectors[:n], vectors[n : n + half], vectors[n + half :]
