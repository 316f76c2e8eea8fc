"""SemanticCache: the persistent part — backend, embedder, configuration, ledger."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from ._budget import BudgetBook, table_stats
from ._config import CacheConfig, Limits
from ._embedders import default_embedder
from ._errors import ConfigurationError, CorruptEntryError, StoreError
from ._hit import HitStep
from ._ledger import CacheStats, Ledger, PriceTable, info_stats_key, untabled_counts
from ._protocols import BoundedBackend, CacheBackend, Embedder
from ._slots import SlotBook
from ._tokens import count_tokens
from ._types import CacheEntry, CallInfo, Candidate, Partition, Similarity, Usage
from ._verify import VerifyJob, VerifyQueue

__all__ = ["DEFAULT_CACHE_DIR_ENV", "SemanticCache", "open_backend"]

logger = logging.getLogger("llmcache")

DEFAULT_CACHE_DIR_ENV = "LLMCACHE_DIR"
_DEFAULT_DIR = ".llmcache"

# How long a call waits for another thread's miss on the same question before it gives up
# waiting and calls the LLM itself (a generous LLM call, retries included).
_SINGLE_FLIGHT_WAIT_S = 300.0

# How many entries one write may evict per kind (expired, over a bound): the bounds are kept by
# evicting the excess a write makes (one entry) plus a little of any backlog (bounds lowered,
# a clock moved on), so that no call pays for a whole sweep; `prune` does whole sweeps.
_WRITE_BUDGET = 64

EntryCheck = Callable[[CacheEntry], "str | None"]
#: Re-judges a fetched entry: the cosine it is to be scored by (given the one its own vector
#: has), or ``None`` when it may not be served to this query at all.
EntryJudge = Callable[[CacheEntry, float], "float | None"]
T = TypeVar("T")

# How far a fetched entry's own cosine may fall short of an unfetched candidate's index score
# and still be taken as at least as good (float32 index scores against float64 cosines).
_SCORE_SLACK = 1e-6


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
        from ._local_backend import LocalBackend

        return LocalBackend(Path(text))
    if isinstance(location, CacheBackend):
        return location
    raise ConfigurationError(
        f"cannot open a cache from {type(location).__name__}: give a directory, a postgresql:// "
        "DSN or a CacheBackend"
    )


@dataclass
class _Tables:
    """What every view of one open cache shares (see :meth:`SemanticCache.with_config`): the
    backend, the ledger's pending counters, the wrong-hit budget's labels, the near misses
    waiting for verification, the misses in flight and the bounds recorded in the store when
    it was opened."""

    backend: CacheBackend
    ledger: Ledger
    stored_limits: Limits | None
    book: BudgetBook
    verifications: VerifyQueue
    slots: SlotBook
    inflight: dict[tuple[str, str], threading.Event] = field(default_factory=dict)
    inflight_lock: threading.Lock = field(default_factory=threading.Lock)
    # Entries this process stored, per table (under inflight_lock): a miss about to lead
    # compares it with what it saw before its lookup (see SemanticCache.writes).
    writes: dict[str, int] = field(default_factory=dict)
    draws: random.Random = field(default_factory=random.Random)
    draws_lock: threading.Lock = field(default_factory=threading.Lock)


class SemanticCache:
    """A semantic cache on disk (or in a database): tables of answers found by similarity.

    ``location`` is a directory (the default backend: diskcache entries + hnswlib indexes), a
    ``postgresql://`` DSN, or any :class:`~llmcache.storage.CacheBackend`. ``embedder`` defaults to
    the
    local MiniLM model. Opening a cache built with another embedder or dimension raises
    :class:`~llmcache.errors.EmbedderMismatchError`.

    Bounds (``CacheConfig(max_entries=..., ttl_seconds=...)``, see
    :class:`~llmcache.storage.Limits`)
    are kept on every write and recorded in the store, so that every process sharing the cache
    keeps the same ones. ``clock`` says what time it is for them (default ``time.time``): give a
    simulation's clock, in seconds, and entries expire and age in simulated time.
    """

    def __init__(
        self,
        location: str | os.PathLike[str] | CacheBackend | None = None,
        *,
        embedder: Embedder | None = None,
        config: CacheConfig | None = None,
        prices: PriceTable | None = None,
        clock: Callable[[], float] | None = None,
        _tables: _Tables | None = None,
    ) -> None:
        # `_tables` is for with_config alone: a view of tables another instance opened (and
        # checked against its embedder), so it is not opened, checked or recorded again.
        self.embedder: Embedder = embedder if embedder is not None else default_embedder()
        self.config: CacheConfig = config or CacheConfig()
        self.clock: Callable[[], float] = clock or time.time
        self.prices: PriceTable = prices or PriceTable()
        self._bounded_for: object = None
        self._bounded: BoundedBackend | None = None
        self._closed = False
        self._tables = _tables if _tables is not None else self._open(location)
        self.backend: CacheBackend = self._tables.backend
        self.ledger: Ledger = self._tables.ledger
        self.budget: BudgetBook = self._tables.book
        self.verifications: VerifyQueue = self._tables.verifications

    def _open(self, location: str | os.PathLike[str] | CacheBackend | None) -> _Tables:
        backend = open_backend(location)
        try:
            backend.check_embedder(self.embedder.model_id, self.embedder.dim)
            stored_limits = self._record_limits(backend)
        except BaseException:
            backend.close()
            raise
        ledger = Ledger(backend)
        book = BudgetBook(backend, ledger, seed=self.config.explore_seed)
        return _Tables(
            backend,
            ledger,
            stored_limits,
            book,
            VerifyQueue(ledger, book, self.prices),
            SlotBook(backend.read_stats, ledger.add),
            draws=random.Random(self.config.explore_seed),
        )

    # -- views -------------------------------------------------------------------------------

    def with_config(self, **changes: Any) -> SemanticCache:
        """A view of the same tables with some configuration changed (e.g. ``mode=Mode.SERVE``):
        same backend, embedder, prices, clock and counters."""
        return SemanticCache(
            embedder=self.embedder,
            config=self.config.updated(**changes),
            prices=self.prices,
            clock=self.clock,
            _tables=self._tables,
        )

    # -- bounds ------------------------------------------------------------------------------

    def _bounded_backend(self) -> BoundedBackend | None:
        # Checked once: isinstance against a Protocol inspects every method each time.
        if self._bounded_for is not self.backend:
            self._bounded_for = self.backend
            self._bounded = self.backend if isinstance(self.backend, BoundedBackend) else None
        return self._bounded

    def _record_limits(self, opened: CacheBackend) -> Limits | None:
        """Record this configuration's bounds in the store, or adopt the store's when it sets
        none (so a process opened without limits keeps to those the cache was given)."""
        limits = self.config.limits
        backend = opened if isinstance(opened, BoundedBackend) else None
        if backend is None:
            if limits.bounded:
                raise ConfigurationError(
                    f"{type(opened).__name__} does not keep entry times, so it cannot "
                    "be bounded (max_entries, max_bytes, ttl_seconds): use a cache directory "
                    "or a postgresql:// DSN"
                )
            return None
        if limits.bounded:
            if backend.read_limits() != limits:
                backend.write_limits(limits)
            return limits
        return backend.read_limits()

    @property
    def limits(self) -> Limits:
        """The bounds in force: this configuration's, or else those recorded in the store."""
        limits = self.config.limits
        if limits.bounded or self._tables.stored_limits is None:
            return limits
        return self._tables.stored_limits

    def prune(self, limits: Limits | None = None) -> dict[str, int]:
        """Evict, now, every expired entry and every entry over a bound (by default the bounds
        in force); returns ``{"expired": n, "evicted": m}``. Writes do this a little at a time."""
        backend = self._bounded_backend()
        limits = limits or self.limits
        if backend is None or not limits.bounded:
            return {"expired": 0, "evicted": 0}
        return backend.enforce(limits, self.clock())

    def mark_hit(self, partition_key: str, entry_id: int) -> None:
        """Record that an entry answered a call (it is then the last to be evicted for size)."""
        backend = self._bounded_backend()
        if backend is None:
            return
        try:
            backend.touch(partition_key, entry_id, self.clock())
        except StoreError:
            # The hit is served either way; a lost last-hit time only ages the entry early.
            logger.warning("could not record a hit on %s/%s", partition_key, entry_id)

    # -- the operations the cached call uses -------------------------------------------------

    @functools.cached_property
    def hit_step(self) -> HitStep:
        """The step a hit is made by (modifier, validation, revision), with this cache's
        configuration, embedder and prices: see :class:`~llmcache.modifiers.HitStep`."""
        return HitStep(self.config, self.embedder, self.prices)

    def choose_slots(
        self,
        stats_key: str,
        slots: dict[str, str],
        exact: frozenset[str],
        *,
        shared: bool,
        anchors: frozenset[str] = frozenset(),
    ) -> tuple[tuple[str, ...], frozenset[str]]:
        """Which of a templated call's slots to embed, and which partition its table (exact
        too), from what its table (whose counters' key is ``stats_key``; ``shared``: its calls
        name no agent; ``anchors``: its slots that name the caller) has seen; the call's
        values join the table's profile."""
        return self._tables.slots.choose(stats_key, slots, exact, shared=shared, anchors=anchors)

    def embed(self, text: str) -> NDArray[np.float32]:
        vectors = self.embedder.embed([text])
        return np.asarray(vectors[0], dtype=np.float32)

    def embedding_cost(self, text: str) -> tuple[int, float]:
        """What embedding ``text`` costs: its tokens, and US dollars at this cache's prices
        (only a paid embedder costs money; the local model is free to run)."""
        tokens, _ = count_tokens(text)
        model_id = self.embedder.model_id
        if not model_id.startswith("openai:"):
            return tokens, 0.0
        name = model_id.split(":", 1)[1].split("@", 1)[0]
        return tokens, self.prices.cost(name, Usage(prompt_tokens=tokens))

    def lookup(
        self,
        partition: Partition,
        vector: NDArray[np.float32],
        k: int | None = None,
        *,
        check: EntryCheck | None = None,
        band: float = 0.0,
        judge: EntryJudge | None = None,
        rescores: bool = True,
    ) -> tuple[list[Candidate], int]:
        """The nearest entries of one table, best first, and how many damaged ones were dropped.

        Every candidate is scored by the vector stored in its own entry: the index only proposes
        ids, so an index that is stale or damaged can cost a hit but never serve an answer to a
        question it was not given for. A damaged entry (undecodable, failing its checksum, an
        unusable vector, or refused by ``check``, which names what is wrong) is evicted and
        counted; one that cannot be read for another reason (a locked or failing database) is
        skipped and kept. Candidates are fetched in the index's order until no candidate left can
        score higher than the best fetched less ``band``, so usually one entry is read (more
        when ``band`` asks for every candidate near the best); ``check`` runs from the best
        candidate down until one passes, so the first candidate returned has passed it and the
        ones after it are not checked.

        ``judge`` (a templated call whose embedded slots are chosen per table) re-scores each
        fetched entry or rules it out (an exact slot that differs); since a re-scored entry may
        score above its index score, every proposed candidate is then fetched, unless
        ``rescores`` is false (the judge only rules entries out: ``lead_words``).
        """
        query = np.asarray(vector, dtype=np.float64).reshape(-1)
        query_norm = float(np.linalg.norm(query))
        hits = self.backend.search(partition, vector, k or self.config.k)
        ttl = self.limits.ttl_seconds
        backend = self._bounded_backend()
        if ttl is not None and backend is not None:
            # Never served past its time: an expired candidate is evicted (counted as
            # `expired` by the backend) and the lookup goes on as if it were not there, so
            # it searches again when expired ones took the places of live ones.
            now = self.clock()
            for attempt in range(4):
                expired = set(backend.expire(partition.key, [i for i, _ in hits], now, ttl))
                hits = [(i, s) for i, s in hits if i not in expired]
                if not expired or attempt == 3:
                    break
                hits = self.backend.search(partition, vector, k or self.config.k)
        # Fetching and decoding an entry costs more than the search, and checking it (``check``:
        # rebuilding a whole response) more again, while only the best usable candidate is
        # served. The index's scores come from the same stored vectors, so candidates are
        # fetched in the index's order only until the best fetched scores at least every score
        # left, and only the best is checked; a damaged one is dropped and the next fetched.
        # (A stale or damaged index only makes this fetch more, or cost a hit.)
        pending = sorted(hits, key=lambda h: -h[1])
        scored: list[tuple[int, Candidate]] = []
        corrupt = 0
        while True:
            while pending and not (
                (judge is None or not rescores)
                and scored
                and scored[0][1].similarity.cosine - band >= pending[0][1] - _SCORE_SLACK
            ):
                entry_id, _ = pending.pop(0)
                try:
                    entry = self.backend.get(partition.key, entry_id)
                    if entry is None:
                        continue
                    cosine = _cosine(entry, query, query_norm)
                    judged = judge(entry, cosine) if judge is not None else cosine
                    if judged is None:
                        continue
                    similarity = Similarity(cosine=judged)
                except CorruptEntryError as exc:
                    corrupt += self._drop_damaged(partition, entry_id, exc)
                    continue
                except StoreError:
                    logger.warning(
                        "could not read cache entry %s/%s", partition.key, entry_id, exc_info=True
                    )
                    continue
                scored.append((entry_id, Candidate(entry=entry, similarity=similarity)))
                # Best first; stable, so ties keep the index's order.
                scored.sort(key=lambda s: -s[1].similarity.cosine)
            if not scored:
                return [], corrupt
            entry_id, best = scored[0]
            problem = check(best.entry) if check is not None else None
            if problem is None:
                return [c for _, c in scored], corrupt
            corrupt += self._drop_damaged(partition, entry_id, CorruptEntryError(problem))
            scored.pop(0)

    def _drop_damaged(self, partition: Partition, entry_id: int, exc: Exception) -> int:
        """Evict a damaged entry (a counted miss, removed so it cannot fail again); 1."""
        logger.warning("dropping damaged cache entry %s/%s: %s", partition.key, entry_id, exc)
        try:
            self.backend.evict(partition.key, entry_id)
        except Exception:
            logger.warning("could not evict a damaged entry", exc_info=True)
        return 1

    @contextlib.contextmanager
    def single_flight(self, key: tuple[str, str]) -> Iterator[bool]:
        """Coalesce concurrent misses on the same question within this process.

        The first caller for ``key`` gets ``True`` (it calls the LLM and stores the answer);
        callers arriving meanwhile wait until it is done and get ``False`` (they look up again
        and are answered from the stored entry). Processes do not coordinate: misses racing in
        several processes each call the LLM and each store their (valid) answer.
        """
        tables = self._tables
        with tables.inflight_lock:
            event = tables.inflight.get(key)
            leader = event is None
            if event is None:
                event = threading.Event()
                tables.inflight[key] = event
        if not leader:
            event.wait(_SINGLE_FLIGHT_WAIT_S)
            yield False
            return
        try:
            yield True
        finally:
            with tables.inflight_lock:
                tables.inflight.pop(key, None)
            event.set()

    def writes(self, partition_key: str) -> int:
        """How many entries this process has stored in a table since the cache was opened
        (every view of the cache counts together). A miss that is about to call the LLM
        compares it with the count it saw before its lookup: another thread may have stored
        the very answer in between."""
        with self._tables.inflight_lock:
            return self._tables.writes.get(partition_key, 0)

    def put(self, entry: CacheEntry) -> int:
        # Sealed here as well as by the embedded store, so every backend stores a checksum.
        backend = self._bounded_backend()
        if backend is None:
            entry_id = self.backend.add(entry.sealed())
            self._count_write(entry.partition.key)
            return entry_id
        now = self.clock()
        entry_id = backend.add(entry.sealed(), now=now)
        self._count_write(entry.partition.key)
        limits = self.limits
        if limits.bounded:
            try:
                backend.enforce(
                    limits, now, partition_key=entry.partition.key, budget=_WRITE_BUDGET
                )
            except StoreError:
                # The entry is stored; the excess is evicted by the next write (or a prune).
                logger.warning("could not evict entries over the cache's bounds", exc_info=True)
        return entry_id

    def _count_write(self, partition_key: str) -> None:
        tables = self._tables
        with tables.inflight_lock:
            tables.writes[partition_key] = tables.writes.get(partition_key, 0) + 1

    def draw(self, items: Sequence[T]) -> T:
        """One of ``items`` at random, from the draws every view of the cache shares (seeded
        by ``CacheConfig.explore_seed``, so that a replayed stream draws the same)."""
        with self._tables.draws_lock:
            return self._tables.draws.choice(items)

    def record(self, info: CallInfo) -> None:
        """Count a finished call in its table's counters (flushed in batches)."""
        self.ledger.record(info)

    def verify_later(self, job: VerifyJob) -> None:
        """Hand a near miss to the worker that verifies off the request path."""
        self.verifications.submit(job)

    def entries(self, partition_key: str) -> list[CacheEntry]:
        return list(self.backend.iterate(partition_key))

    def partitions(self) -> list[Partition]:
        return self.backend.partitions()

    def feedback(self, info: CallInfo, *, ok: bool) -> None:
        """Tell the cache whether a hit's answer was right: a label for the hit's table.

        ``info`` is the :class:`~llmcache.CallInfo` of a call answered from the cache
        (``outcome == "hit"``); its table and similarity say where the label goes. ``ok=False``
        counts a wrong hit, ``ok=True`` a right one; under a wrong-hit budget they move the
        table's learned threshold (docs/wrong-hit-budget.md). Labels are kept with or without
        a budget. A hit the verifier said yes to labels the table's ``verified`` labels too.
        The entry itself stays: it may be right for other queries.
        """
        if info.outcome != "hit" or info.similarity is None or not info.partition_key:
            raise ConfigurationError(
                f"feedback is for hits: this call's outcome is {info.outcome!r}"
                + ("" if info.similarity is not None else " and it has no similarity")
            )
        key, pool = info_stats_key(info), info.pool_key
        self.budget.add(key, info.similarity.cosine, ok, pool=pool)
        if info.verified:
            self.budget.add(key, info.similarity.cosine, ok, "verified", pool=pool)

    def stats(self) -> CacheStats:
        """Per table: lookups, hits, similarity, tokens and dollars spent and avoided, entries
        evicted for size and expired; the bounds in force and the cache's size; labels and
        exploration, and under a wrong-hit budget the threshold in force and the estimated
        wrong-hit rate with its 95% interval."""
        counters = self.ledger.counters()
        stats = CacheStats(
            tables=table_stats(counters, self.config.guard_for), **untabled_counts(counters)
        )
        backend = self._bounded_backend()
        if backend is None:
            return stats
        entries, size = backend.usage()
        return stats.model_copy(update={"limits": self.limits, "entries": entries, "bytes": size})

    def wait_for_verifications(self, timeout: float | None = None) -> bool:
        """Wait until the near misses queued for verification off the request path
        (``verify_path="background"``) are verified; ``True`` when none is left. Closing the
        cache does not wait for them: those still queued are dropped and counted."""
        return self.verifications.wait(timeout)

    # -- lifetime ----------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            # Before the counters' last flush, so that what it drops is counted.
            self.verifications.close()
            self.ledger.flush()
        finally:
            self.backend.close()

    def __enter__(self) -> SemanticCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
