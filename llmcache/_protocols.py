"""The seams of llmcache, as ``typing.Protocol`` classes.

Implementations are passed to constructors; there is no global registry and no string factory.
The embedded defaults are :class:`~llmcache.MiniLMEmbedder`, :class:`~llmcache.HnswIndex`,
:class:`~llmcache.DiskStore` (composed by :class:`~llmcache.LocalBackend`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel

from ._config import Limits
from ._types import CacheEntry, CacheOptions, Candidate, Partition, Usage

__all__ = [
    "BoundedBackend",
    "CacheBackend",
    "Embedder",
    "EntryStore",
    "Manifest",
    "Modifier",
    "ModifyContext",
    "Validator",
    "VectorIndex",
]

SCHEMA_VERSION = 1


class Manifest(BaseModel):
    """What a cache directory (or database) was built with; checked on every open."""

    schema_version: int = SCHEMA_VERSION
    embedder_id: str
    dim: int


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
    """

    @property
    def dim(self) -> int: ...

    def add(self, ids: Sequence[int], vectors: NDArray[np.float32]) -> None: ...

    def search(self, vector: NDArray[np.float32], k: int) -> list[tuple[int, float]]: ...

    def remove(self, entry_id: int) -> None: ...

    def __len__(self) -> int: ...

    def save(self, path: Path) -> None: ...

    def load(self, path: Path) -> None: ...


@runtime_checkable
class EntryStore(Protocol):
    """Durable storage of entries, split by partition key. Ids are assigned by the store,
    increase within a partition, and are never reused."""

    def read_manifest(self) -> Manifest | None: ...

    def write_manifest(self, manifest: Manifest) -> None: ...

    def put(self, entry: CacheEntry) -> int: ...

    def get(self, partition_key: str, entry_id: int) -> CacheEntry | None:
        """The entry, ``None`` if absent; raises ``CorruptEntryError`` if it is damaged
        (cannot be decoded, fails its checksum, lost its data)."""
        ...

    def iterate(self, partition_key: str, after_id: int = 0) -> Iterator[CacheEntry]:
        """Entries with ``id > after_id`` in id order; damaged ones are skipped, logged,
        evicted and counted (``corrupt``), never skipped silently."""
        ...

    def evict(self, partition_key: str, entry_id: int) -> None: ...

    def partitions(self) -> list[Partition]: ...

    def count(self, partition_key: str) -> int: ...

    def last_id(self, partition_key: str) -> int:
        """The highest id ever assigned in the partition (0 when none)."""
        ...

    def add_stats(self, partition_key: str, delta: dict[str, float]) -> None:
        """Add counters (ledger deltas) atomically; safe across processes."""
        ...

    def read_stats(self) -> dict[str, dict[str, float]]: ...

    def close(self) -> None: ...


@runtime_checkable
class CacheBackend(Protocol):
    """Everything the cache core needs from storage: entries, nearest-neighbour search, counters.

    :class:`~llmcache.LocalBackend` composes an :class:`EntryStore` with one
    :class:`VectorIndex` per partition; a database with vector search implements it directly.
    """

    def check_embedder(self, embedder_id: str, dim: int) -> None:
        """Record the embedder on first use; raise ``EmbedderMismatchError`` on a different one."""
        ...

    def add(self, entry: CacheEntry) -> int: ...

    def search(
        self, partition: Partition, vector: NDArray[np.float32], k: int
    ) -> list[tuple[int, float]]: ...

    def get(self, partition_key: str, entry_id: int) -> CacheEntry | None: ...

    def evict(self, partition_key: str, entry_id: int) -> None: ...

    def partitions(self) -> list[Partition]: ...

    def count(self, partition_key: str) -> int: ...

    def iterate(self, partition_key: str) -> Iterator[CacheEntry]: ...

    def add_stats(self, partition_key: str, delta: dict[str, float]) -> None: ...

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
