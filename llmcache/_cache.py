"""SemanticCache: the persistent part — backend, embedder, configuration, ledger."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._config import CacheConfig
from ._errors import ConfigurationError, CorruptEntryError
from ._ledger import CacheStats, Ledger, PriceTable
from ._protocols import CacheBackend, Embedder
from ._types import CacheEntry, Candidate, Partition, Similarity

__all__ = ["DEFAULT_CACHE_DIR_ENV", "SemanticCache", "open_backend"]

logger = logging.getLogger("llmcache")

DEFAULT_CACHE_DIR_ENV = "LLMCACHE_DIR"
_DEFAULT_DIR = ".llmcache"


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

    # -- views -------------------------------------------------------------------------------

    def with_config(self, **changes: Any) -> SemanticCache:
        """A view of the same tables with some configuration changed (e.g. ``mode=Mode.SERVE``)."""
        view = object.__new__(SemanticCache)
        view.__dict__.update(self.__dict__)
        view.config = self.config.model_copy(update=changes)
        return view

    # -- the operations the call core uses ---------------------------------------------------

    def embed(self, text: str) -> NDArray[np.float32]:
        vectors = self.embedder.embed([text])
        return np.asarray(vectors[0], dtype=np.float32)

    def lookup(
        self, partition: Partition, vector: NDArray[np.float32], k: int | None = None
    ) -> tuple[list[Candidate], int]:
        """The nearest entries of one table, best first, and how many corrupt ones were dropped."""
        hits = self.backend.search(partition, vector, k or self.config.k)
        out: list[Candidate] = []
        corrupt = 0
        for entry_id, cosine in hits:
            try:
                entry = self.backend.get(partition.key, entry_id)
            except CorruptEntryError:
                # A corrupt entry is a counted miss, and removed so it cannot fail again.
                corrupt += 1
                logger.warning("dropping corrupt cache entry %s/%s", partition.key, entry_id)
                try:
                    self.backend.evict(partition.key, entry_id)
                except Exception:
                    logger.warning("could not evict corrupt entry", exc_info=True)
                continue
            if entry is None:
                continue
            out.append(Candidate(entry=entry, similarity=Similarity(cosine=float(cosine))))
        return out, corrupt

    def put(self, entry: CacheEntry) -> int:
        return self.backend.add(entry)

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
