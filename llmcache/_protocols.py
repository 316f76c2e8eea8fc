"""The seams of llmcache, as ``typing.Protocol`` classes.

Implementations are passed to constructors; there is no global registry and no string factory.
Each protocol lists everything llmcache calls on it. The embedded defaults are
:class:`~llmcache.embedders.MiniLMEmbedder` (an :class:`Embedder`), an index per table that searches
exactly while the table is small and with :class:`~llmcache.index.HnswIndex` once it grows (a
:class:`VectorIndex`, made by ``LocalBackend(index_factory=...)``), and
:class:`~llmcache.storage.LocalBackend` (a :class:`BoundedBackend`;
:class:`~llmcache.storage.PgBackend` is the
other).

Storage is plugged in whole, as a :class:`CacheBackend`: the entry store inside
``LocalBackend`` is part of the directory's format (index files name it, processes sharing the
directory rely on its commit order, bounds are kept in its transactions), not a seam.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from ._config import Limits
from ._manifest import Manifest
from ._types import CacheEntry, CacheOptions, Candidate, Partition, Usage, Verdict

__all__ = [
    "BoundedBackend",
    "CacheBackend",
    "Embedder",
    "Equivalence",
    "Modifier",
    "ModifyContext",
    "Validator",
    "VectorIndex",
    "Verifier",
]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-length float32 vectors.

    ``model_id`` must change whenever the vectors would (another model, another quantisation):
    the cache refuses to mix vectors of different embedders in one directory.
    """

    @property
    def model_id(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Return an array of shape ``(len(texts), dim)``, each row L2-normalised."""
        ...


@runtime_checkable
class VectorIndex(Protocol):
    """A nearest-neighbour index over the vectors of one partition, by cosine similarity.

    Ids are the store's entry ids. ``search`` returns ``(id, cosine)`` pairs, best first, at
    most ``min(k, len(self))`` of them. Implementations must be safe to call from several
    threads at once.

    An index may reorganise itself in the background (the default one moves a table that
    outgrew exact search to HNSW): ``kind`` names the form ``save`` would write now, so that a
    change of form is saved even when no vector was added; ``wait`` waits for such work and
    ``close`` stops it. An index without background work returns a constant ``kind``,
    ``True`` from ``wait`` and does nothing on ``close``.
    """

    @property
    def dim(self) -> int: ...

    @property
    def kind(self) -> str: ...

    def add(self, ids: Sequence[int], vectors: NDArray[np.float32]) -> None: ...

    def search(self, vector: NDArray[np.float32], k: int) -> list[tuple[int, float]]: ...

    def remove(self, entry_id: int) -> None: ...

    def __len__(self) -> int: ...

    def save(self, path: Path) -> None: ...

    def load(self, path: Path) -> None: ...

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for background work to finish; ``True`` when none is running."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class CacheBackend(Protocol):
    """Everything the cache core needs from storage: entries, nearest-neighbour search, counters.

    :class:`~llmcache.storage.LocalBackend` keeps entries in a directory with one
    :class:`VectorIndex`
    per partition; :class:`~llmcache.storage.PgBackend` is a database with vector search. A backend
    that also keeps entry times is a :class:`BoundedBackend` and can be bounded.
    """

    def check_embedder(self, embedder_id: str, dim: int) -> None:
        """Record the embedder on first use; raise ``EmbedderMismatchError`` on a different one."""
        ...

    def read_manifest(self) -> Manifest | None:
        """The embedder the cache was built with; ``None`` before one is recorded."""
        ...

    def add(self, entry: CacheEntry) -> int: ...

    def add_many(self, entries: Sequence[CacheEntry]) -> list[int]:
        """Add several entries (a transfer's batch); their ids in order. A backend with a
        cheaper bulk write uses it; adding them one by one is correct too."""
        ...

    def search(
        self, partition: Partition, vector: NDArray[np.float32], k: int
    ) -> list[tuple[int, float]]: ...

    def get(self, partition_key: str, entry_id: int) -> CacheEntry | None: ...

    def evict(self, partition_key: str, entry_id: int) -> None: ...

    def partitions(self) -> list[Partition]: ...

    def count(self, partition_key: str) -> int: ...

    def iterate(self, partition_key: str) -> Iterator[CacheEntry]: ...

    def add_stats(self, partition_key: str, delta: dict[str, float]) -> None:
        """Add counters (ledger deltas) atomically; safe across processes. A counter adds up,
        except one named ``max_…`` or ``min_…``, which keeps the extreme."""
        ...

    def read_stats(self) -> dict[str, dict[str, float]]: ...

    def close(self) -> None: ...


@runtime_checkable
class BoundedBackend(CacheBackend, Protocol):
    """A backend that keeps each entry's times and size, so that a cache can be bounded.

    Times are seconds on the cache's clock (wall time, or a simulation's), given by the caller.
    Every eviction made here is counted in the table's counters by the process whose delete
    removed the entry: ``evicted`` (for size) or ``expired`` (past its time to live).
    Both embedded backends implement it; a backend that does not cannot take limits.
    """

    def add(self, entry: CacheEntry, *, now: float | None = None) -> int:
        """Store an entry as stored and last hit at ``now`` (wall time when ``None``)."""
        ...

    def touch(self, partition_key: str, entry_id: int, now: float) -> None:
        """Record a hit on an entry (its last-hit time never goes back)."""
        ...

    def expire(
        self, partition_key: str, entry_ids: Sequence[int], now: float, ttl_seconds: float
    ) -> list[int]:
        """Evict those of ``entry_ids`` stored ``ttl_seconds`` or more before ``now``; return
        their ids (counted as ``expired``)."""
        ...

    def enforce(
        self,
        limits: Limits,
        now: float,
        *,
        partition_key: str | None = None,
        budget: int | None = None,
    ) -> dict[str, int]:
        """Evict expired entries, then the least recently hit ones until every bound holds.

        ``partition_key`` restricts the per-table bound to that table (the write path); at most
        ``budget`` entries are evicted per kind (``None``: as many as it takes). Returns
        ``{"expired": n, "evicted": m}``.
        """
        ...

    def usage(self) -> tuple[int, int]:
        """How many entries the cache holds, and their bytes."""
        ...

    def read_limits(self) -> Limits | None: ...

    def write_limits(self, limits: Limits) -> None: ...


class Validator(Protocol):
    """Accepts an answer's text or raises ``ValueError`` (pydantic's ``ValidationError`` is one)
    saying why not. A pydantic model class may be given wherever a validator is expected."""

    def __call__(self, content: str) -> Any: ...


class Equivalence(Protocol):
    """Whether a cached answer (after its modifier) and a fresh answer to the same query say the
    same thing: how a wrong-hit budget labels its tables. Both are answer texts.

    Supplied per category or per call as validators are; the default is
    :func:`~llmcache.verification.same_answer` (equal JSON values, else equal texts up to
    whitespace and case).
    """

    def __call__(self, cached: str, fresh: str) -> bool: ...


@runtime_checkable
class Verifier(Protocol):
    """Says whether a cached entry answers a new query, where the embedding alone is unsure.

    Asked about a *near miss*: the nearest entry of a table whose cosine lies in the band just
    under the threshold in force (``verify_band``). ``query`` and ``cached`` are the two
    embedding texts (the keywords in keyword mode, the canonical messages in full mode),
    ``cosine`` their similarity. A verifier that fails raises: the call is then a counted miss.
    :class:`~llmcache.verification.LLMVerifier` asks any OpenAI-compatible chat model.

    It may be called from several threads at once, and off the request path from a worker
    thread of the cache.
    """

    def verify(self, query: str, cached: str, *, cosine: float) -> Verdict: ...


@dataclass
class ModifyContext:
    """What a modifier gets to turn a cached answer into an answer for the query.

    ``complete(messages)`` sends a prompt to the LLM with the query's own model and parameters,
    counts its tokens as spent, and returns the answer's text (the ``revise`` modifier uses it).
    """

    query_messages: list[dict[str, Any]]
    options: CacheOptions
    candidate: Candidate
    embedder: Embedder
    complete: Callable[[list[dict[str, Any]]], str]
    spent: Usage = field(default_factory=Usage)


@runtime_checkable
class Modifier(Protocol):
    """Turns a cached answer into the answer to a new query (thesis Table 3.3).

    Returns the new answer's text, or ``None`` when it cannot (the call becomes a miss).
    """

    @property
    def name(self) -> str: ...

    def apply(self, ctx: ModifyContext) -> str | None: ...
