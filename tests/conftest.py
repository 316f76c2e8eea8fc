"""Shared fixtures. Every test here is offline and uses fakes, not mocks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from llmcache._protocols import CacheBackend

BackendFactory = Callable[[], CacheBackend]

# Backends the storage-agnostic tests run against. The Postgres backend adds itself here when its
# extra is installed (see tests/pg_support.py once it exists).
BACKEND_KINDS = ["local"]


@pytest.fixture(params=BACKEND_KINDS)
def make_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BackendFactory]:
    """A factory of fresh, empty backends of one kind; every backend made is closed afterwards."""
    made: list[CacheBackend] = []

    def factory() -> CacheBackend:
        from llmcache._backend import LocalBackend

        backend = LocalBackend(tmp_path / f"cache{len(made)}")
        made.append(backend)
        return backend

    yield factory
    for backend in made:
        backend.close()
