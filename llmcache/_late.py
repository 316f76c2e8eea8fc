"""Answers paid for while their template was learned (or before it changed), filed under the
template that files their prompts now.

A template learned from the traffic files nothing until it is learned with confidence
(``llmcache/_learn.py``: eight prompts in a row fitted it unchanged), so its first calls pass
through to the model; and a learned template can change after it filed calls (widened in place
where its first prompts all held a word by chance, or merged with another agent's), which
gives it new tables (a template's text names them). Either way answers that were paid for,
and answer exactly their prompts, would sit outside the tables later calls look in. So they
are kept, and filed again under the template that files their prompts now, as a miss's answer
is: the table starts with them instead of empty (on LangChain's generative agents, sites of
20 to 40 calls, the calls passed through are a third: ``benchmarks/bench_frameworks.py``).

A cache that learns (``CachedLLM``, ``AsyncCachedLLM``, the LangChain cache) says which calls
its learner handled (:meth:`LateFiling.expect`, by prompt: passed through, or filed under a
learned template), gives each one's fresh answer when it has it (:meth:`LateFiling.answered`,
with what the cache needs to store it; a hit's answer is another prompt's and is never kept),
and asks after each answer whether the learner has learned or changed a template since
(:meth:`LateFiling.ready`, cheap); the kept calls a template now files under another name than
before are then handed back (:meth:`LateFiling.due`) and stored without a lookup and without
being counted as calls again, only as ``filed_late``. A call is kept by its prompt: the first
answer heard for a prompt the learner handled is that call's (a client that sends it on with
``cache=False`` after ``file_call``, as the proxy and ``replay`` do, is answered so).

Bounded: at most ``LATE_CALLS`` calls awaited and ``LATE_CALLS`` kept, the oldest dropped (their
answers stay where they were filed, or unfiled).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Generic, TypeVar

from ._learn import TemplateLearner
from ._site import code_site
from ._types import CacheOptions

__all__ = ["LATE_CALLS", "LateFiling"]

#: Calls kept (and calls awaiting their answer): a template is learned from about ten of its
#: calls, so this covers twenty-odd templates learned at once.
LATE_CALLS = 256

T = TypeVar("T")

_Prompt = tuple[str, str | None]


@dataclass(slots=True)
class _Kept(Generic[T]):
    site: str | None
    answer: T
    #: The category its answer is filed under (``None``: not filed, passed through).
    filed_under: str | None


class LateFiling(Generic[T]):
    """The calls a learner handled, each with its fresh answer (``T``: what the cache needs to
    store it), to be filed under the template that files them now. Safe to share between
    threads."""

    def __init__(self, limit: int = LATE_CALLS) -> None:
        self._lock = threading.Lock()
        # One filing at a time: two threads never file one kept answer twice.
        self._filing = threading.Lock()
        self._limit = limit
        # Prompt -> (its code site, the category it was filed under) until its answer comes.
        self._expected: OrderedDict[_Prompt, tuple[str | None, str | None]] = OrderedDict()
        self._kept: OrderedDict[_Prompt, _Kept[T]] = OrderedDict()
        # The learner's count of templates learned or changed when the kept were looked at.
        self._seen = 0

    def expect(self, prompt: _Prompt, site: str | None, filed_under: str | None = None) -> None:
        """The learner handled ``prompt`` (learned from at ``site``): passed it through, or
        filed it under ``filed_under``."""
        with self._lock:
            self._expected[prompt] = (site, filed_under)
            self._expected.move_to_end(prompt)
            while len(self._expected) > self._limit:
                self._expected.popitem(last=False)

    def answered(self, prompt: _Prompt, answer: T, *, fresh: bool = True) -> None:
        """An answer to ``prompt``: kept when the learner handled that prompt and the answer
        is the model's own to it (``fresh``; a hit's is another prompt's: never kept)."""
        with self._lock:
            expected = self._expected.pop(prompt, None)
            if expected is None or not fresh:
                return
            site, filed_under = expected
            self._kept[prompt] = _Kept(site, answer, filed_under)
            self._kept.move_to_end(prompt)
            while len(self._kept) > self._limit:
                self._kept.popitem(last=False)

    def ready(self, learner: TemplateLearner) -> bool:
        """Whether the learner has learned or changed a template since the kept calls were
        looked at (cheap: asked after every answer)."""
        return bool(self._kept) and learner.learned != self._seen

    def due(
        self, learner: TemplateLearner, default_agent: str = ""
    ) -> list[tuple[T, CacheOptions]]:
        """The kept calls a template now files under another category than their answers are
        filed under, each with its options (they stay kept, filed under it now)."""
        with self._filing:
            with self._lock:
                learned = learner.learned
                if learned == self._seen or not self._kept:
                    self._seen = learned
                    return []
                self._seen = learned
                kept = list(self._kept.items())
            due: list[tuple[T, CacheOptions]] = []
            for (prompt, system), item in kept:
                # Filed as it would have been at the time: its options name its code site.
                with code_site(item.site) if item.site is not None else nullcontext():
                    options = learner.recognise(prompt, system, default_agent)
                if options is not None and options.category != item.filed_under:
                    item.filed_under = options.category
                    due.append((item.answer, options))
            return due
