"""Helpers of the fault-injection suite: a small cache to damage, and ways to damage it for real.

Damage goes through the real files — bytes flipped in ``cache.db``, rows edited with SQL, value
files truncated or deleted, index files cut — never through mocks. The worker functions at the
bottom run in child processes (SIGKILL and concurrent-writer tests), so they live in this
importable module rather than in a test file.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.context
import os
import random
import sqlite3
import string
import time
from collections.abc import Callable
from multiprocessing import forkserver
from pathlib import Path
from typing import Any

from llmcache import CacheConfig, CachedLLM, CacheOptions, SemanticCache
from llmcache._local_backend import LocalBackend
from llmcache._protocols import CacheBackend
from llmcache._tokens import count_tokens
from llmcache.testing import FakeOpenAI, HashEmbedder

# Load the token counter's vocabulary now (about a second): child processes fork from a server
# that imported this module, so they start with it loaded and write from their first moment.
count_tokens("warm up")

DIM = 64
CATEGORY = "importance"
AGENT = "Liam Oliver"
MODEL = "gpt-4o-mini"


def words(rng: random.Random, n: int = 3) -> list[str]:
    """Random made-up words: keywords that share (almost) no features with one another."""
    return ["".join(rng.choice(string.ascii_lowercase) for _ in range(7)) for _ in range(n)]


def messages(keywords: list[str]) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You rate how important a memory is."},
        {"role": "user", "content": f"Memory: {' '.join(keywords)}. Rate 1-10."},
    ]


def opts(keywords: Any, **kw: Any) -> CacheOptions:
    base: dict[str, Any] = {"category": CATEGORY, "agent": AGENT, "keywords": keywords}
    base.update(kw)
    return CacheOptions(**base)


def answer_for(request: dict[str, Any]) -> str:
    """The fake LLM's answer: names the question, so a wrong answer is recognisable."""
    return "answer to " + str(request["messages"][-1]["content"])


def open_client(
    location: Path | CacheBackend,
    fake: FakeOpenAI | None = None,
    *,
    recorder: Path | None = None,
    **config: Any,
) -> tuple[CachedLLM, FakeOpenAI]:
    fake = fake or FakeOpenAI(answer_for)
    cache = SemanticCache(location, embedder=HashEmbedder(dim=DIM), config=CacheConfig(**config))
    return CachedLLM(fake, cache=cache, recorder=recorder), fake


def ask(client: CachedLLM, keywords: list[str], **kw: Any) -> tuple[str | None, Any]:
    reply, info = client.chat.completions.create_with_info(
        model=MODEL, messages=messages(keywords), cache=opts(keywords, **kw)
    )
    return reply.choices[0].message.content, info


def fill(path: Path, n: int, *, seed: int = 0, big: int = 0) -> list[tuple[list[str], str]]:
    """A cache of ``n`` entries in one table; returns (keywords, answer) of each, in id order.

    ``big`` pads that many of the answers past diskcache's 32 kB threshold, so that they live
    in value files of their own. Every answer holds a multi-byte character, so that a cut can
    land inside one.
    """
    rng = random.Random(seed)
    padding = "é" * 20_000

    def responder(request: dict[str, Any]) -> str:
        text = answer_for(request) + " — ✓"
        return text + padding if "big" in request["messages"][-1]["content"] else text

    client, _ = open_client(path, FakeOpenAI(responder))
    made = []
    for i in range(n):
        keywords = words(rng) + (["big"] if i < big else [])
        content, info = ask(client, keywords)
        assert info.outcome == "miss" and content is not None
        made.append((keywords, content))
    client.close()
    return made


def table_key(client: CachedLLM) -> str:
    (partition,) = client.cache.partitions()
    return partition.key


# -- the real files ---------------------------------------------------------------------------


def db_file(cache_dir: Path) -> Path:
    return cache_dir / "store" / "cache.db"


def run_sql(cache_dir: Path, statement: str, params: tuple[Any, ...] = ()) -> list[Any]:
    """Run SQL on the diskcache database itself, as someone editing the file would."""
    with contextlib.closing(sqlite3.connect(db_file(cache_dir))) as db, db:
        rows = db.execute(statement, params).fetchall()
    return rows


def entry_rows(cache_dir: Path) -> list[tuple[str, str | None]]:
    """(key, value file name) of every entry row, in key (= id) order."""
    rows = run_sql(cache_dir, "SELECT key, filename FROM Cache WHERE key LIKE 'e:%' ORDER BY key")
    return [(str(k), f) for k, f in rows]


def checkpointed(cache_dir: Path) -> Path:
    """The database file with every committed page in it (no write-ahead log left aside)."""
    with contextlib.closing(sqlite3.connect(db_file(cache_dir))) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return db_file(cache_dir)


def flip_bytes(path: Path, at: list[int], mask: int = 0xFF) -> None:
    data = bytearray(path.read_bytes())
    for offset in at:
        data[offset] ^= mask
    path.write_bytes(bytes(data))


def value_offsets(cache_dir: Path) -> dict[str, tuple[int, int]]:
    """Where each (small) entry's JSON text lies in ``cache.db``: key → (offset, length).

    Entries of this suite are small enough to sit contiguously in one database page.
    """
    db = checkpointed(cache_dir)
    raw = db.read_bytes()
    out = {}
    for key, value in run_sql(
        cache_dir, "SELECT key, value FROM Cache WHERE key LIKE 'e:%' AND filename IS NULL"
    ):
        text = str(value).encode("utf-8")
        offset = raw.find(text)
        assert offset >= 0 and raw.find(text, offset + 1) < 0, key
        out[str(key)] = (offset, len(text))
    return out


# -- child processes ---------------------------------------------------------------------------


def run_processes(target: Callable[..., None], arg_lists: list[tuple[Any, ...]]) -> list[Any]:
    """Run ``target(*args, barrier, results)`` in one process per argument list, all released
    together by one barrier; return what each put on ``results``."""
    ctx = mp_context()
    barrier = ctx.Barrier(len(arg_lists))
    results = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, barrier, results)) for args in arg_lists]
    for proc in procs:
        proc.start()
    out = [results.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(30)
        assert proc.exitcode == 0
    return out


def mp_context() -> multiprocessing.context.BaseContext:
    """Children forked from a clean server process: fast to start, and not forked from the
    test runner's own threads."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["fault_tools"])
    # Python 3.11's fork server ignores the parent's sys.path when preloading, and skips a
    # module it cannot import without a word: point it at this folder while it starts.
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).parent), before]))
    try:
        forkserver.ensure_running()
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before
    return ctx


def _backend_at(location: str, schema: str | None, save_every: int | None) -> CacheBackend:
    if schema is not None:
        from llmcache._pg import PgBackend

        backend: CacheBackend = PgBackend(location, schema=schema, max_connections=2)
        return backend
    return LocalBackend(location, save_every=save_every)


def acked_writer(location: str, schema: str | None, seed: int, conn: Any) -> None:
    """Store entries forever; after each one is stored (``create`` returned), send its
    (keywords, answer, id) to the parent. The parent SIGKILLs this process at a random moment.

    The index is saved every few entries, so kills also land in index saves.
    """
    rng = random.Random(seed)
    backend = _backend_at(location, schema, save_every=7)
    client, _ = open_client(backend, mode="collect")
    conn.send(("ready", None, None, None))
    while True:
        keywords = words(rng)
        content, info = ask(client, keywords)
        conn.send(("ack", keywords, content, info.entry_id))


def concurrent_writer(
    location: str, schema: str | None, worker: int, n: int, barrier: Any, results: Any
) -> None:
    """Store ``n`` entries as fast as possible once every writer is ready; put the ids and the
    start and end times (for the throughput figure) on ``results``."""
    rng = random.Random(1000 + worker)
    backend = _backend_at(location, schema, save_every=None)
    client, _ = open_client(backend, mode="collect")
    ids = []
    barrier.wait()
    start = time.time()
    for _ in range(n):
        _, info = ask(client, [f"w{worker}", *words(rng)])
        ids.append(int(info.entry_id))
    end = time.time()
    client.close()
    results.put((ids, start, end))


def racing_asker(location: str, delay_s: float, barrier: Any, results: Any) -> None:
    """Ask one question the moment every racer is ready (the fake LLM takes ``delay_s``)."""

    def slow(request: dict[str, Any]) -> str:
        time.sleep(delay_s)
        return answer_for(request)

    client, _ = open_client(Path(location), FakeOpenAI(slow))
    barrier.wait()
    _, info = ask(client, ["the", "same", "question"])
    client.close()
    results.put(str(info.outcome))
