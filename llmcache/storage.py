"""Where a cache keeps its tables: a directory (diskcache entries and an index per table) or
PostgreSQL + pgvector shared by many workers, the bounds they keep, and copying between them.

``SemanticCache(location)`` opens one from a directory, a ``postgresql://`` DSN or any
:class:`CacheBackend`; :func:`open_backend` is that step on its own.
"""

from __future__ import annotations

from ._cache import open_backend
from ._config import Limits
from ._local_backend import LocalBackend
from ._manifest import Manifest
from ._pg import PgBackend
from ._protocols import BoundedBackend, CacheBackend
from ._transfer import transfer

__all__ = [
    "BoundedBackend",
    "CacheBackend",
    "Limits",
    "LocalBackend",
    "Manifest",
    "PgBackend",
    "open_backend",
    "transfer",
]
