"""Shared fixtures. Every test here is offline and uses fakes, not mocks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pg_support import PgBackends, pg_backends, pg_dsn  # noqa: F401  (fixtures used by tests)

from llmcache import CachedLLM, SemanticCache
from llmcache._protocols import CacheBackend
from llmcache.testing import FakeOpenAI, HashEmbedder

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


@pytest.fixture
def echo_learner(tmp_path: Path) -> Iterator[tuple[CachedLLM, FakeOpenAI]]:
    """A ``CachedLLM`` that learns templates from the traffic, over a model double that
    answers "ANSWER " and the prompt (so a served answer says which prompt paid for it),
    with the double to count its calls."""
    fake = FakeOpenAI(lambda request: "ANSWER " + str(request["messages"][-1]["content"]))
    client = CachedLLM(
        fake,
        cache=SemanticCache(tmp_path / "c", embedder=HashEmbedder(dim=64)),
        learn_templates=True,
    )
    yield client, fake
    client.close()
