"""The development set beside the repository, and its texts embedded once per machine.

``../shared/benchmarks/quora_pairs.jsonl.gz`` holds labelled Quora question pairs (see its
README). Benchmarks that need the default embedder's vectors of many of its questions get them
from :func:`embed_cached`, which computes them once and keeps them in the temp directory:
embedding 100k questions takes minutes on 2 cores.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from llmcache import MiniLMEmbedder

__all__ = ["QUORA", "embed_cached"]

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
