"""Bounded caches: entry and byte limits per table and per cache, least-recently-hit eviction,
time to live on wall time and on a caller's clock, kept across reopen and across processes,
``python -m llmcache prune`` and the limits in ``stats``; on both backends.

Clocks are injected (``SemanticCache(clock=...)``): no test sleeps.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from pg_support import PgBackends

from llmcache import CacheConfig, CachedLLM, CacheOptions, CallInfo, SemanticCache
from llmcache.__main__ import main
from llmcache.errors import ConfigurationError
from llmcache.storage import Limits
from llmcache.testing import FakeOpenAI, HashEmbedder

DIM = 32
Opener = Callable[[], Any]  # a new backend object on the same store, each call


class Clock:
    """A clock the test moves by hand: wall time, or a simulation's time."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Where(NamedTuple):
    """One cache: where it is, and a factory of backends opening it (a new one each call)."""

    location: str  # the directory, or the DSN and the schema ("dsn#schema")
    open: Opener
    kind: str


@pytest.fixture(params=["local", "pg"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Where]:
    if request.param == "local":
        from llmcache._local_backend import LocalBackend

        yield Where(str(tmp_path / "c"), lambda: LocalBackend(tmp_path / "c"), "local")
        return
    backends: PgBackends = request.getfixturevalue("pg_backends")
    schema = backends.make().schema
    yield Where(f"{backends.dsn}#{schema}", lambda: backends.make(schema), "pg")


def client(
    opener: Opener, clock: Callable[[], float] | None = None, **config: Any
) -> tuple[CachedLLM, FakeOpenAI]:
    fake = FakeOpenAI()
    cache = SemanticCache(
        opener(), embedder=HashEmbedder(dim=DIM), config=CacheConfig(**config), clock=clock
    )
    return CachedLLM(fake, cache=cache), fake


def ask(llm: CachedLLM, question: str, agent: str = "Ada") -> CallInfo:
    _, info = llm.chat.completions.create_with_info(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": f"rate: {question}"}],
        cache=CacheOptions(category="importance", agent=agent, keywords=[question]),
    )
    return info


QUESTIONS = [
    "tree is idle",
    "stove is burning",
    "bed is being used",
    "piano is played loudly",
    "garden is watered",
    "door is locked tight",
    "kettle whistles",
    "window is open",
]


def totals(llm: CachedLLM) -> tuple[int, int, int]:
    """(entries held, evicted, expired) as the cache's stats give them."""
    stats = llm.cache.stats()
    assert stats.entries is not None
    return stats.entries, stats.total.evicted, stats.total.expired


def table_counts(llm: CachedLLM) -> dict[str, int]:
    backend = llm.cache.backend
    return {p.agent: backend.count(p.key) for p in backend.partitions()}


# -- limits ------------------------------------------------------------------------------------


def test_each_table_keeps_at_most_its_limit(where: Where) -> None:
    llm, _ = client(where[1], max_entries_per_table=3)
    for q in QUESTIONS[:5]:
        ask(llm, q, "Ada")
    for q in QUESTIONS[:2]:
        ask(llm, q, "Ben")
    assert table_counts(llm) == {"Ada": 3, "Ben": 2}
    assert totals(llm) == (5, 2, 0)
    by_agent = {t.agent: t.evicted for t in llm.cache.stats().tables}
    assert by_agent == {"Ada": 2, "Ben": 0}
    llm.close()


def test_the_whole_cache_keeps_at_most_its_limit(where: Where) -> None:
    llm, _ = client(where[1], max_entries=4)
    for i, q in enumerate(QUESTIONS[:6]):
        ask(llm, q, "Ada" if i % 2 else "Ben")
    assert totals(llm) == (4, 2, 0)
    assert sum(table_counts(llm).values()) == 4
    llm.close()


def test_the_cache_keeps_within_its_bytes(where: Where) -> None:
    probe, _ = client(where[1])
    ask(probe, QUESTIONS[0])
    stats = probe.cache.stats()
    assert stats.bytes is not None and stats.bytes > 0
    one = stats.bytes
    probe.close()
    # Room for about three entries of that size.
    llm, _ = client(where[1], max_bytes=int(one * 3.5))
    for q in QUESTIONS[1:7]:
        ask(llm, q)
    entries, evicted, _ = totals(llm)
    size = llm.cache.stats().bytes
    assert size is not None and size <= one * 3.5
    assert entries == 3 and evicted == 4
    llm.close()


def test_the_least_recently_hit_entry_goes_first(where: Where) -> None:
    clock = Clock()
    llm, fake = client(where[1], clock=clock, max_entries_per_table=3)
    for q in QUESTIONS[:3]:  # stored at 1001, 1002, 1003
        clock.now += 1
        ask(llm, q)
    clock.now += 1
    assert ask(llm, QUESTIONS[0]).outcome == "hit"  # the oldest, hit at 1004: now the newest
    clock.now += 1
    ask(llm, QUESTIONS[3])  # a fourth: QUESTIONS[1] (stored 1002, never hit) must go
    assert table_counts(llm) == {"Ada": 3}
    paid = len(fake.calls)
    assert ask(llm, QUESTIONS[0]).outcome == "hit"
    assert ask(llm, QUESTIONS[2]).outcome == "hit"
    assert ask(llm, QUESTIONS[3]).outcome == "hit"
    assert len(fake.calls) == paid
    assert ask(llm, QUESTIONS[1]).outcome == "miss"  # evicted: asked (and paid) again
    llm.close()


# -- time to live ------------------------------------------------------------------------------


def test_an_expired_entry_is_never_served_and_is_counted(where: Where) -> None:
    wall = Clock(time.time())  # wall time, injected so that the test need not wait
    llm, fake = client(where[1], clock=wall, ttl_seconds=60)
    ask(llm, QUESTIONS[0])
    wall.now += 59
    assert ask(llm, QUESTIONS[0]).outcome == "hit"
    wall.now += 2  # 61 s after it was stored: a hit does not extend its life
    info = ask(llm, QUESTIONS[0])
    assert info.outcome == "miss" and len(fake.calls) == 2
    assert totals(llm) == (1, 0, 1)  # the expired one evicted, the new answer stored
    wall.now += 30
    assert ask(llm, QUESTIONS[0]).outcome == "hit"  # the new answer lives on its own time
    llm.close()


def test_entries_expire_in_a_simulations_own_time(where: Where) -> None:
    class Simulation:
        minutes = 0.0  # simulated time: the clock the cache is given, in seconds

        def seconds(self) -> float:
            return self.minutes * 60

    sim = Simulation()
    llm, _ = client(where[1], clock=sim.seconds, ttl_seconds=3600)  # one simulated hour
    for q in QUESTIONS[:3]:
        ask(llm, q)
        sim.minutes += 20
    # At 60 simulated minutes the first (stored at 0) is an hour old, whatever the wall says.
    assert ask(llm, QUESTIONS[0]).outcome == "miss"
    assert ask(llm, QUESTIONS[1]).outcome == "hit"
    # Writes sweep expired entries too: at 2 h 30 every earlier entry has expired.
    sim.minutes = 150
    ask(llm, QUESTIONS[5])
    entries, _, expired = totals(llm)
    assert entries == 1 and expired == 4
    llm.close()


# -- reopen, processes -------------------------------------------------------------------------


def test_limits_and_hit_times_survive_reopen(where: Where) -> None:
    clock = Clock()
    llm, _ = client(where[1], clock=clock, max_entries_per_table=2)
    clock.now += 1
    ask(llm, QUESTIONS[0])
    clock.now += 1
    ask(llm, QUESTIONS[1])
    clock.now += 1
    assert ask(llm, QUESTIONS[0]).outcome == "hit"  # QUESTIONS[1] is now the least recent
    llm.close()
    # Opened again without limits: the ones recorded are in force, and so are the times.
    again, _ = client(where[1], clock=clock)
    assert again.cache.limits == Limits(max_entries_per_table=2)
    clock.now += 1
    ask(again, QUESTIONS[2])
    assert ask(again, QUESTIONS[0]).outcome == "hit"
    assert ask(again, QUESTIONS[1]).outcome == "miss"
    stats = again.cache.stats()
    assert stats.limits == Limits(max_entries_per_table=2) and stats.total.evicted >= 1
    again.close()


def _distinct(worker: int, i: int) -> str:
    # One hex word per question: no two are alike enough to hit each other.
    return hashlib.sha256(f"{worker}/{i}".encode()).hexdigest()[:16]


def _writer(location: str, worker: int, n: int) -> None:
    from llmcache._local_backend import LocalBackend

    fake = FakeOpenAI()
    cache = SemanticCache(
        LocalBackend(location), embedder=HashEmbedder(dim=DIM), config=CacheConfig(max_entries=20)
    )
    llm = CachedLLM(fake, cache=cache)
    for i in range(n):
        ask(llm, _distinct(worker, i), agent=f"agent {i % 3}")
    llm.close()


def _pg_writer(dsn: str, schema: str, worker: int, n: int) -> None:
    from llmcache._pg import PgBackend

    fake = FakeOpenAI()
    cache = SemanticCache(
        PgBackend(dsn, schema=schema),
        embedder=HashEmbedder(dim=DIM),
        config=CacheConfig(max_entries=20),
    )
    llm = CachedLLM(fake, cache=cache)
    for i in range(n):
        ask(llm, _distinct(worker, i), agent=f"agent {i % 3}")
    llm.close()


def test_processes_writing_one_bounded_cache_evict_exactly_the_excess(
    where: Where,
) -> None:
    location, opener, kind = where
    ctx = multiprocessing.get_context("spawn")
    if kind == "pg":
        dsn, schema = location.rsplit("#", 1)
        procs = [ctx.Process(target=_pg_writer, args=(dsn, schema, w, 30)) for w in range(2)]
    else:
        procs = [ctx.Process(target=_writer, args=(location, w, 30)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    llm, _ = client(opener)
    entries, evicted, expired = totals(llm)
    # 60 stored, 20 kept: every eviction counted once, none lost, none doubled.
    assert (entries, evicted, expired) == (20, 40, 0)
    assert sum(table_counts(llm).values()) == 20
    llm.close()


# -- prune, stats, configuration ---------------------------------------------------------------


def test_prune_evicts_to_the_limits_given_and_to_those_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from llmcache._local_backend import LocalBackend

    path = tmp_path / "c"
    llm, _ = client(lambda: LocalBackend(path))
    for i, q in enumerate(QUESTIONS[:6]):
        ask(llm, q, "Ada" if i % 2 else "Ben")
    llm.close()
    assert main(["prune", str(path)]) == 1  # nothing recorded, nothing given
    assert "no limits" in capsys.readouterr().err
    assert main(["prune", str(path), "--max-entries-per-table", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["evicted"] == 2 and result["entries"] == 4
    # Far in the future on the wall clock, everything is older than a day.
    later = str(time.time() + 2 * 86400)
    assert main(["prune", str(path), "--ttl-seconds", "86400", "--now", later]) == 0
    out = capsys.readouterr().out
    assert "4 expired" in out and "0 entries" in out
    # A cache opened with limits records them; prune without options keeps to those.
    llm, _ = client(lambda: LocalBackend(path), max_entries=10)
    llm.close()
    backend = LocalBackend(path)
    assert backend.read_limits() == Limits(max_entries=10)
    backend.close()
    assert main(["prune", str(path)]) == 0
    assert "max_entries=10" in capsys.readouterr().out


def test_stats_shows_the_limits_and_the_evictions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from llmcache._local_backend import LocalBackend

    path = tmp_path / "c"
    clock = Clock()
    llm, _ = client(lambda: LocalBackend(path), clock=clock, max_entries=2, ttl_seconds=100)
    for q in QUESTIONS[:3]:
        ask(llm, q)
    clock.now += 500
    ask(llm, QUESTIONS[4])  # sweeps the two left, which have expired
    stats = llm.cache.stats()
    assert stats.limits == Limits(max_entries=2, ttl_seconds=100)
    assert (stats.entries, stats.total.evicted, stats.total.expired) == (1, 1, 2)
    assert "limits: max_entries=2, ttl_seconds=100" in stats.render()
    llm.close()
    assert main(["stats", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[-2:] == ["evicted", "expired"]
    total = next(line for line in out if line.startswith("(all)")).split()
    assert total[-2:] == ["1", "2"]
    assert out[-1].startswith("limits: max_entries=2, ttl_seconds=100; holding 1 entries")
    assert main(["stats", "--json", str(path)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["limits"]["max_entries"] == 2 and data["entries"] == 1


def test_limits_are_validated_and_refused_by_a_backend_that_cannot_keep_them(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match="max_entries"):
        CacheConfig(max_entries=0)
    with pytest.raises(ValueError, match="max_entry"):
        CacheConfig(max_entry=5)  # misspelt: refused, naming the valid settings

    from llmcache._local_backend import LocalBackend

    class Plain:  # a CacheBackend that keeps no entry times
        def __init__(self) -> None:
            self._inner = LocalBackend(tmp_path / "plain")

        def __getattr__(self, name: str) -> Any:
            if name in ("touch", "expire", "enforce", "usage", "read_limits", "write_limits"):
                raise AttributeError(name)
            return getattr(self._inner, name)

        check_embedder = property(lambda self: self._inner.check_embedder)
        add = property(lambda self: self._inner.add)
        search = property(lambda self: self._inner.search)
        get = property(lambda self: self._inner.get)
        evict = property(lambda self: self._inner.evict)
        partitions = property(lambda self: self._inner.partitions)
        count = property(lambda self: self._inner.count)
        iterate = property(lambda self: self._inner.iterate)
        add_stats = property(lambda self: self._inner.add_stats)
        read_stats = property(lambda self: self._inner.read_stats)
        close = property(lambda self: self._inner.close)

    with pytest.raises(ConfigurationError, match="cannot be bounded"):
        SemanticCache(Plain(), embedder=HashEmbedder(dim=DIM), config=CacheConfig(max_entries=3))
    # Unbounded, it works as before.
    llm = CachedLLM(FakeOpenAI(), cache=SemanticCache(Plain(), embedder=HashEmbedder(dim=DIM)))
    ask(llm, QUESTIONS[0])
    assert ask(llm, QUESTIONS[0]).outcome == "hit"
    assert llm.cache.stats().limits is None
    llm.close()


def test_prune_and_stats_reach_a_postgres_cache_by_its_dsn(
    pg_backends: PgBackends, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    from pg_support import DSN_ENV

    if os.environ.get(DSN_ENV):
        pytest.skip("the command line uses the default schema, which the test would drop")
    backend = pg_backends.make("llmcache")  # the schema a DSN alone reaches
    llm, _ = client(lambda: backend, max_entries=5)
    for q in QUESTIONS[:4]:
        ask(llm, q)
    llm.close()
    assert main(["prune", pg_backends.dsn, "--max-entries", "1"]) == 0
    assert "evicted 3 for size" in capsys.readouterr().out
    assert main(["stats", pg_backends.dsn]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("limits: max_entries=5; holding 1 entries")


def test_a_cache_made_before_bounds_gets_its_entry_times_on_open(where: Where) -> None:
    llm, _ = client(where.open)
    for q in QUESTIONS[:3]:
        ask(llm, q)
    llm.close()
    # Take the times away, as in a cache written by an llmcache without bounds.
    if where.kind == "pg":
        import psycopg

        dsn, schema = where.location.rsplit("#", 1)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP TABLE "{schema}".entry_times')
    else:
        import sqlite3

        with sqlite3.connect(Path(where.location) / "store" / "cache.db") as conn:
            conn.execute("DROP TABLE llmcache_times")
    # Opened again, it has them (every entry stored "now"), so the bounds hold at once.
    llm, _ = client(where.open, max_entries=2)
    stats = llm.cache.stats()
    assert stats.entries == 3 and stats.bytes is not None and stats.bytes > 0
    assert llm.cache.prune() == {"expired": 0, "evicted": 1}
    assert totals(llm) == (2, 1, 0)
    llm.close()


def test_a_lookup_looks_past_expired_candidates(where: Where) -> None:
    clock = Clock(0.0)
    llm, fake = client(where.open, clock=clock, ttl_seconds=60, k=1)
    ask(llm, QUESTIONS[0])
    clock.now = 50
    ask(llm, QUESTIONS[1])
    clock.now = 70  # QUESTIONS[0] has expired, QUESTIONS[1] has not
    paid = len(fake.calls)
    # k=1 and serve mode: only the nearest candidate is fetched, and any live one is served.
    info = ask(llm.with_cache(mode="serve"), QUESTIONS[0])
    assert info.outcome == "hit" and len(fake.calls) == paid  # served the live one
    assert totals(llm) == (1, 0, 1)
    llm.close()
