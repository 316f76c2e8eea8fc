"""The embedder a cache was built with, and the one check every backend makes against it.

Vectors of different embedders (another model, another dimension) cannot be compared, so a
cache records its embedder on first use and refuses any other: on open, on every write (the
entry's embedder and vector length) and on every search (the query's length).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from pydantic import BaseModel

from ._errors import EmbedderMismatchError

__all__ = ["SCHEMA_VERSION", "EmbedderRecord", "Manifest"]

SCHEMA_VERSION = 1


class Manifest(BaseModel):
    """What a cache directory (or database) was built with; checked on every open."""

    schema_version: int = SCHEMA_VERSION
    embedder_id: str
    dim: int


class EmbedderRecord:
    """One backend's record of its embedder, and the check against it.

    ``read()`` returns the manifest the cache holds (``None`` before one is recorded);
    ``record(manifest)`` stores it unless the cache already has one, atomically (so two
    processes opening a new cache with different embedders cannot both win), and returns the
    one the cache has. ``where`` names the cache and ``remedy`` says how to start afresh in
    the backend's own terms, for the error's message.
    """

    def __init__(
        self,
        *,
        where: str,
        remedy: str,
        read: Callable[[], Manifest | None],
        record: Callable[[Manifest], Manifest],
        manifest: Manifest | None = None,
    ) -> None:
        self._where = where
        self._remedy = remedy
        self._read = read
        self._record = record
        self._lock = threading.Lock()
        self.manifest: Manifest | None = manifest

    def mismatch(self, manifest: Manifest, embedder_id: str, dim: int) -> EmbedderMismatchError:
        return EmbedderMismatchError(
            f"the cache in {self._where} was built with embedder {manifest.embedder_id!r} "
            f"(dimension {manifest.dim}), but it is being opened with {embedder_id!r} "
            f"(dimension {dim}). Vectors of different embedders cannot be compared: open it "
            f"with the same embedder, or {self._remedy}."
        )

    def check(self, embedder_id: str, dim: int) -> None:
        """Record the embedder if the cache has none yet; raise on a different one."""
        with self._lock:
            manifest = self._record(Manifest(embedder_id=embedder_id, dim=dim))
            if manifest.embedder_id != embedder_id or manifest.dim != dim:
                raise self.mismatch(manifest, embedder_id, dim)
            self.manifest = manifest

    def dim_for(self, vector_dim: int, embedder_id: str | None) -> int | None:
        """The cache's dimension, after checking a vector of ``vector_dim`` (and, for a write,
        its ``embedder_id``) against it.

        ``None`` when no embedder is recorded yet and nothing is written (a search of an empty
        cache: nothing to check against). A write to such a cache records the entry's embedder.
        """
        if self.manifest is None:
            self.manifest = self._read()
        if self.manifest is None:
            if embedder_id is None:
                return None
            self.check(embedder_id, vector_dim)
            assert self.manifest is not None
        manifest = self.manifest
        if vector_dim != manifest.dim or (
            embedder_id is not None and embedder_id != manifest.embedder_id
        ):
            raise self.mismatch(manifest, embedder_id or manifest.embedder_id, vector_dim)
        return manifest.dim
