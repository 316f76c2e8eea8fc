"""SemanticCache: the persistent part — backend, embedder, configuration, ledger."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._config import CacheConfig
from ._errors import ConfigurationError, CorruptEntryError, StoreError
from ._ledger import CacheStats, Ledger, PriceTable
from ._protocols import CacheBackend, Embedder
from ._types import CacheEntry, Candidate, Partition, Similarity

__all__ = ["DEFAULT_CACHE_DIR_ENV", "SemanticCache", "open_backend"]

logger = logging.getLogger("llmcache")

DEFAULT_CACHE_DIR_ENV = "LLMCACHE_DIR"
_DEFAULT_DIR = ".llmcache"

# How long a call waits for another thread's miss on the same question before it gives up
# waiting and calls the LLM itself (a generous LLM call, retries included).
_SINGLE_FLIGHT_WAIT_S = 300.0

EntryCheck = Callable[[CacheEntry], "str | None"]


def _cosine(entry: CacheEntry, query: NDArray[np.float64], query_norm: float) -> float:
    """The cosine between the query and the vector stored in the entry itself."""
    try:
        vector = entry.vector().astype(np.float64)
    except ValueError as exc:  # base64 or length damage (binascii.Error included)
        raise CorruptEntryError(f"its vector is unreadable: {exc}") from exc
    norm = float(np.linalg.norm(vector))
    if vector.shape != query.shape or not np.isfinite(norm) or norm == 0.0:
        raise CorruptEntryError(f"its vector (shape {vector.shape}) is unusable")
    if query_norm == 0.0:
        return 0.0
    cosine = float(np.dot(vector, query)) / (norm * query_norm)
    return min(1.0, max(-1.0, cosine))


def open_backend(location: str | os.PathLike[str] | CacheBackend | None) -> CacheBackend:
    """A backend from a directory, a ``postgresql://`` DSN, or an existing backend object.

    ``None`` means ``$LLMCACHE_DIR``, or ``./.llmcache`` when that is unset.
    """
    if location is None:
        location = os.environ.get(DEFAULT_CACHE_DIR_ENV, _DEFAULT_DIR)
    if isinstance(location, (str, os.PathLike)):
        text = os.fspath(location)
        if text.startswith(("postgresql://", "postgres://")):
            try:
                from ._pg import PgBackend  # type: ignore[import-not-found,unused-ignore]
            except ImportError as exc:
                raise ConfigurationError(
                    "a postgresql:// cache needs the [pg] extra: pip install -e '.[pg]'"
                ) from exc
            backend: CacheBackend = PgBackend(text)
            return backend
        from ._backend import LocalBackend

        return LocalBackend(Path(text))
    if isinstance(location, CacheBackend):
        return location
    raise ConfigurationError(
        f"cannot open a cache from {type(location).__name__}: give a directory, a postgresql:// "
        "DSN or a CacheBackend"
    )


def default_embedder() -> Embedder:
    """The embedded default: local all-MiniLM-L6-v2 (int8 ONNX), memoised."""
    from ._embedders import MemoEmbedder, MiniLMEmbedder

    return MemoEmbedder(MiniLMEmbedder())


class SemanticCache:
    """A semantic cache on disk (or in a database): tables of answers found by similarity.

    ``location`` is a directory (the default backend: diskcache entries + hnswlib indexes), a
    ``postgresql://`` DSN, or any :class:`~llmcache.CacheBackend`. ``embedder`` defaults to the
    local MiniLM model. Opening a cache built with another embedder or dimension raises
    :class:`~llmcache.EmbedderMismatchError`.
    """

    def __init__(
        self,
        location: str | os.PathLike[str] | CacheBackend | None = None,
        *,
        embedder: Embedder | None = None,
        config: CacheConfig | None = None,
        prices: PriceTable | None = None,
    ) -> None:
        self.embedder: Embedder = embedder if embedder is not None else default_embedder()
        self.backend: CacheBackend = open_backend(location)
        try:
            self.backend.check_embedder(self.embedder.model_id, self.embedder.dim)
        except BaseException:
            self.backend.close()
            raise
        self.config: CacheConfig = config or CacheConfig()
        self.prices: PriceTable = prices or PriceTable()
        self.ledger = Ledger(self.backend)
        self._closed = False
        # Misses in flight, by (table, embedding text): see single_flight.
        self._inflight: dict[tuple[str, str], threading.Event] = {}
        self._inflight_lock = threading.Lock()

    # -- views -------------------------------------------------------------------------------

    def with_config(self, **changes: Any) -> SemanticCache:
        """A view of the same tables with some configuration changed (e.g. ``mode=Mode.SERVE``)."""
        view = object.__new__(SemanticCache)
        view.__dict__.update(self.__dict__)
        view.config = self.config.updated(**changes)
        return view

    # -- the operations the call core uses ---------------------------------------------------

    def embed(self, text: str) -> NDArray[np.float32]:
        vectors = self.embedder.embed([text])
        return np.asarray(vectors[0], dtype=np.float32)

    def lookup(
        self,
        partition: Partition,
        vector: NDArray[np.float32],
        k: int | None = None,
        *,
        check: EntryCheck | None = None,
    ) -> tuple[list[Candidate], int]:
        """The nearest entries of one table, best first, and how many damaged ones were dropped.

        Every candidate is scored by the vector stored in its own entry: the index only proposes
        ids, so an index that is stale or damaged can cost a hit but never serve an answer to a
        question it was not given for. A damaged entry (undecodable, failing its checksum, an
        unusable vector, or refused by ``check``, which names what is wrong) is evicted and
        counted; one that cannot be read for another reason (a locked or failing database) is
        skipped and kept.
        """
        query = np.asarray(vector, dtype=np.float64).reshape(-1)
        query_norm = float(np.linalg.norm(query))
        hits = self.backend.search(partition, vector, k or self.config.k)
        out: list[Candidate] = []
        corrupt = 0
        for entry_id, _ in hits:
            try:
                entry = self.backend.get(partition.key, entry_id)
                if entry is None:
                    continue
                cosine = _cosine(entry, query, query_norm)
                problem = check(entry) if check is not None else None
                if problem is not None:
                    raise CorruptEntryError(problem)
            except CorruptEntryError as exc:
                # A damaged entry is a counted miss, and removed so it cannot fail again.
                corrupt += 1
                logger.warning(
                    "dropping damaged cache entry %s/%s: %s", partition.key, entry_id, exc
                )
                try:
                    self.backend.evict(partition.key, entry_id)
                except Exception:
                    logger.warning("could not evict a damaged entry", exc_info=True)
                continue
            except StoreError:
                logger.warning(
                    "could not read cache entry %s/%s", partition.key, entry_id, exc_info=True
                )
                continue
            out.append(Candidate(entry=entry, similarity=Similarity(cosine=cosine)))
        out.sort(key=lambda c: -c.similarity.cosine)  # stable: ties keep the index's order
        return out, corrupt

    @contextlib.contextmanager
    def single_flight(self, key: tuple[str, str]) -> Iterator[bool]:
        """Coalesce concurrent misses on the same question within this process.

        The first caller for ``key`` gets ``True`` (it calls the LLM and stores the answer);
        callers arriving meanwhile wait until it is done and get ``False`` (they look up again
        and are answered from the stored entry). Processes do not coordinate: misses racing in
        several processes each call the LLM and each store their (valid) answer.
        """
        with self._inflight_lock:
            event = self._inflight.get(key)
            leader = event is None
            if event is None:
                event = threading.Event()
                self._inflight[key] = event
        if not leader:
            event.wait(_SINGLE_FLIGHT_WAIT_S)
            yield False
            return
        try:
            yield True
        finally:
            with self._inflight_lock:
                self._inflight.pop(key, None)
            event.set()

    def put(self, entry: CacheEntry) -> int:
        # Sealed here as well as by the embedded store, so every backend stores a checksum.
        return self.backend.add(entry.sealed())

    def entries(self, partition_key: str) -> list[CacheEntry]:
        return list(self.backend.iterate(partition_key))

    def partitions(self) -> list[Partition]:
        return self.backend.partitions()

    def stats(self) -> CacheStats:
        """Per table: lookups, hits, similarity, tokens and dollars spent and avoided."""
        return self.ledger.stats()

    # -- lifetime ----------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.ledger.flush()
        finally:
            self.backend.close()

    def __enter__(self) -> SemanticCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
