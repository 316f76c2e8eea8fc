"""Shared fixtures. Every test here is offline and uses fakes, not mocks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pg_support import PgBackends, pg_backends, pg_dsn  # noqa: F401  (fixtures used by tests)

from llmcache._protocols import CacheBackend

BackendFactory = Callable[[], CacheBackend]

# Backends the storage-agnostic tests run against. "pg" runs against a throwaway PostgreSQL
# (tests/pg_support.py), or $LLMCACHE_TEST_PG_DSN; it skips when the [pg] extra is missing.
BACKEND_KINDS = ["local", "pg"]


@pytest.fixture(params=BACKEND_KINDS)
def make_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BackendFactory]:
    """A factory of fresh, empty backends of one kind; every backend made is closed afterwards."""
    if request.param == "pg":
        backends = PgBackends(request.getfixturevalue("pg_dsn"))  # a fresh schema per backend
        yield backends.make
        backends.close()
        return

    made: list[CacheBackend] = []

    def factory() -> CacheBackend:
        from llmcache._local_backend import LocalBackend

        backend = LocalBackend(tmp_path / f"cache{len(made)}")
        made.append(backend)
        return backend

    yield factory
    for backend in made:
        backend.close()
