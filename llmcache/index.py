"""The vector indexes a directory cache keeps, one per table: exact search while a table is
small, hnswlib's HNSW once it grows (:class:`AutoIndex` switches between them)."""

from __future__ import annotations

from ._index import AutoIndex, ExactIndex, HnswIndex
from ._protocols import VectorIndex

__all__ = ["AutoIndex", "ExactIndex", "HnswIndex", "VectorIndex"]
