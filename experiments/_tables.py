"""One recorded run's tables, searched exactly: what every experiment that retrieves candidates
shares.

Offline and exact: a query's similarity to a table is the cosine of its description's vector
to every entry's (numpy), normalised as the study does, (cos + 1) / 2. The live cache finds the
same nearest entry (its index is exact while a table is small, and HNSW at a recall near 1
above); doing it in numpy lets an experiment see *all* similarities, not just the top k.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from ._data import EmbeddingStore, Prompt, kept_groups, tables

__all__ = ["TableIndex", "normalised", "sample_per_group"]


def normalised(cosine: NDArray[np.float32] | float) -> NDArray[np.float64]:
    return (np.asarray(cosine, dtype=np.float64) + 1.0) / 2.0


def sample_per_group(
    prompts: Sequence[Prompt], n: int | None, rng: random.Random
) -> dict[str, list[Prompt]]:
    """Up to ``n`` prompts per group (all when fewer, or when ``n`` is None), seeded."""
    by_group: dict[str, list[Prompt]] = defaultdict(list)
    for p in prompts:
        by_group[p.group].append(p)
    out: dict[str, list[Prompt]] = {}
    for g in kept_groups():
        items = by_group.get(g, [])
        out[g] = items if n is None or len(items) <= n else sorted(rng.sample(items, n), key=_idx)
    return out


def _idx(p: Prompt) -> int:
    return p.index


class TableIndex:
    """One run's tables in one mode: the entries' vectors per (category, agent)."""

    def __init__(self, prompts: Sequence[Prompt], store: EmbeddingStore, mode: str) -> None:
        self.mode = mode
        self.tables = tables(prompts)
        self.vectors: dict[tuple[str, str], NDArray[np.float32]] = {
            key: store.embed([p.description(mode) for p in items])
            for key, items in self.tables.items()
        }

    def similarities(
        self, query_vector: NDArray[np.float32], key: tuple[str, str], *, upto: int | None = None
    ) -> tuple[list[Prompt], NDArray[np.float64]]:
        """The table's entries (those made within ``upto`` elapsed minutes) and their similarity."""
        items = self.tables.get(key, [])
        if not items:
            return [], np.zeros(0)
        vectors = self.vectors[key]
        if upto is not None:
            n = sum(1 for p in items if p.elapsed_minutes <= upto)
            items, vectors = items[:n], vectors[:n]
        if not items:
            return [], np.zeros(0)
        return items, normalised(vectors @ query_vector)
