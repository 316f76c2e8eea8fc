"""Verification of near misses off the request path, and what one verdict costs.

A *near miss* is a lookup whose nearest entry lies in the band just under the threshold in
force, where the embedding alone is unsure (``verify_band``). On the request path the call
core asks the :class:`~llmcache.verification.Verifier` before answering (``_serving.py``). Off
it
(``verify_path="background"``, the way Krites verifies), the miss is answered and stored as
usual and the near miss handed to the :class:`VerifyQueue` of the open cache: a worker thread
asks the verifier. Where the call labelled its near miss by comparing answers (under a budget,
with a modifier that needs no LLM), that label stands and a yes adds it to the table's
``verified`` labels too, measuring how often the verifier's yes is right. Where the call gave
no label, the verdict becomes the table's label, through the wrong-hit budget's one label path
(:meth:`BudgetBook.add`): there the budget holds only as far as the verifier is right.

Verifications off the path are an optimisation: the paid answer is stored before one is
queued, so nothing a caller was given depends on them. A full queue refuses new ones, and a
cache closing with some still queued drops them; either way they are counted
(``vf_dropped``), never lost silently and never waited for without bound.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass

from ._budget import BudgetBook
from ._ledger import Ledger, PriceTable, verify_counters
from ._protocols import Verifier
from ._types import Verdict

__all__ = ["VerifyJob", "VerifyQueue", "ask_verifier", "verdict_cost"]

logger = logging.getLogger("llmcache")

# How many near misses may wait for a verification; past that new ones are dropped (counted):
# a verifier slower than the traffic must not grow memory without bound.
_MAX_PENDING = 1024

# How long closing the cache waits for the verification in progress (its LLM call) to finish.
_CLOSE_WAIT_S = 5.0


def verdict_cost(prices: PriceTable, verdict: Verdict) -> float:
    """What a verdict cost in US dollars at the cache's prices (0 for a local verifier)."""
    return prices.cost(verdict.model, verdict.usage) if verdict.model else 0.0


def ask_verifier(verifier: Verifier, query: str, cached: str, cosine: float) -> Verdict:
    """Ask ``verifier``; raise whatever it raises, and ``TypeError`` for an answer that is no
    :class:`~llmcache.types.Verdict` (the caller turns either into a counted miss)."""
    verdict = verifier.verify(query, cached, cosine=cosine)
    if not isinstance(verdict, Verdict):
        raise TypeError(f"a verifier returned {type(verdict).__name__}, not a Verdict")
    return verdict


@dataclass(frozen=True)
class VerifyJob:
    """One near miss to verify off the request path: the table (its counters' key), the
    verifier in force for the call, the two embedding texts, their cosine, and the label the
    call gave the near miss by comparing answers (``None``: none). ``pool``: the counters' key
    of the table's pool, when it pools its evidence."""

    key: str
    verifier: Verifier
    query: str
    cached: str
    cosine: float
    label: bool | None = None
    pool: str | None = None


class VerifyQueue:
    """The near misses of one open cache waiting for verification, and the worker thread that
    verifies them one at a time (started on the first, a daemon: a hung verifier never keeps
    a process alive). Shared by every view of the cache, like the ledger."""

    def __init__(
        self,
        ledger: Ledger,
        book: BudgetBook,
        prices: PriceTable,
        *,
        max_pending: int = _MAX_PENDING,
    ) -> None:
        self._ledger = ledger
        self._book = book
        self._prices = prices
        self._max_pending = max_pending
        self._queue: queue.Queue[VerifyJob | None] = queue.Queue()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending = 0  # queued or being verified
        self._thread: threading.Thread | None = None
        self._closed = False
        self._abandoned = False  # closed while a verification ran on: its verdict is not kept

    def submit(self, job: VerifyJob) -> bool:
        """Queue a near miss; ``False`` (and counted as dropped) when the queue is full or the
        cache closed."""
        with self._lock:
            accepted = not self._closed and self._pending < self._max_pending
            if accepted:
                self._pending += 1
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._work, name="llmcache-verify", daemon=True
                    )
                    self._thread.start()
        if not accepted:
            self._count(job.key, {"vf_dropped": 1})
            return False
        self._queue.put(job)
        return True

    @property
    def pending(self) -> int:
        """Near misses queued or being verified."""
        with self._lock:
            return self._pending

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every queued near miss is verified; ``True`` when none is left."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def close(self, timeout: float = _CLOSE_WAIT_S) -> None:
        """Stop taking near misses, drop (and count) those still queued, and wait up to
        ``timeout`` seconds for the one being verified."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                self._count(job.key, {"vf_dropped": 1})
                self._done()
        if thread is None:
            return
        self._queue.put(None)
        thread.join(timeout)
        if thread.is_alive():
            with self._lock:
                self._abandoned = True

    # -- the worker ----------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            try:
                self._verify(job)
            except Exception:  # a store that fails the counters: the worker goes on
                logger.warning("could not record a verification", exc_info=True)
            finally:
                self._done()

    def _verify(self, job: VerifyJob) -> None:
        try:
            verdict = ask_verifier(job.verifier, job.query, job.cached, job.cosine)
        except Exception:
            logger.warning("the verifier failed on a near miss off the path", exc_info=True)
            self._count(job.key, verify_counters(failed=True))
            return
        usd = verdict_cost(self._prices, verdict)
        tokens = verdict.usage.total_tokens
        # Off the path the verdict belongs to no call, so it is also counted as the table's
        # spending here (on the path it is inside the call's usage and cost).
        delta = verify_counters(verified=verdict.same, tokens=tokens, usd=usd)
        self._count(job.key, {**delta, "tokens_spent": tokens, "usd_spent": usd})
        with self._lock:
            if self._abandoned:
                return
        if job.label is None:
            self._book.add(job.key, job.cosine, verdict.same, pool=job.pool)
        elif verdict.same:
            self._book.add(job.key, job.cosine, job.label, "verified", pool=job.pool)

    def _count(self, key: str, delta: dict[str, float]) -> None:
        with self._lock:
            if self._abandoned:
                return
        self._ledger.add(key, delta)

    def _done(self) -> None:
        with self._idle:
            self._pending -= 1
            if self._pending == 0:
                self._idle.notify_all()
