"""Which slots of a templated call are embedded, and which must match exactly.

A templated call in keyword mode gives its slot values by name (``CacheOptions.slots``). Within
one table (one template, one agent, one set of request parameters) a slot whose value has been
the same in every call tells one query from another nothing: embedding it only buries the slot
that decides the answer (an agent's name passed into six slots and its persona summary are
most of the text; the event is a few words). So, unless the call gives ``keywords`` itself:

- a slot is **exact** when the call names it (``exact_slots``) or, unless detection is off
  (``CacheConfig(detect_exact=False)``), when its value is a time, a date or a numeric range
  as a whole (``09:00 AM``, ``2023-02-13``, ``February 13, 2023, 10:00 pm``, ``10:00 - 11:00``,
  ``3 to 5``): embeddings score ``09:00 AM`` and ``10:00 PM`` as near-identical
  (``docs/performance.md``), so a candidate whose value differs is never served, and exact
  slots are not embedded;
- a slot's **role** is learned from the table's traffic (:func:`partitioning`): a slot of few
  values, each recurring (an agent's name, its persona summary, a fixed list of places), tells
  *whose* query it is, not *what* is asked, and is never embedded. In a table several agents
  share (its calls name no agent: a prompt file recognised without an ``agent slot:`` note),
  every slot partitions until it has shown 16 distinct values (or while they are few per
  call), and the partitioning slots that separate the callers are exact
  (:func:`exact_partitions`), so one agent is never served another's answer, not even in the
  table's first calls (up to 15 agents); with more, a short value the call repeats in two of
  its slots (the agent's name, in a persona's header and in the question) is exact from the
  first call (:func:`echoed`);
- **times and dates inside** an embedded slot's value (``[Monday February 13 -- 10:00 AM]
  Activity:``) must match too (``CacheConfig(exact_times=True)``, the default), the rest
  being embedded;
- the **leading words** of the embedded text, when a category asks for them
  (``CacheConfig(lead_words=N)``, :func:`lead_differs`): a sentence embedding weighs the
  subject of an event ("Rajiv Patel is conversing about ..." against "conversing about ...")
  as a word or two among many, while the answer may turn on it;
- of the other slots, those whose values have **varied** within the table are embedded; until
  the table has seen any vary (its first calls), all of them are;
- in **deciding order**: shortest first, by the longest value the slot has held in the table
  (ties in the template's slot order), so that a long persona or plan comes last and an
  embedder's truncation (MiniLM reads 256 word pieces) never cuts the slot that decides.

The table's slot profile is kept as counters of the table (both backends keep them, atomically
across processes): per slot the least and greatest hash of its values (they differ once the slot
has varied), the longest value, its position and whether it was exact, and a distinct-value
sketch: 64 hashed buckets, each a ``max_`` counter (HyperLogLog's registers: the filled buckets
count the distinct values exactly while they are few, the registers estimate many). Every one
of them keeps an extreme (``max_``/``min_`` counters), so adding them again is harmless and
merging a re-read profile into one held in memory is idempotent. The table's call count
(``slot_calls``) adds up in the backend and is merged in memory by max. Roles are read from
these counters alone, so every process sharing a cache reaches the same choice from the same
counters.

A choice can change after entries were stored (a slot varies for the first time): an entry
records its slot values and the slots its vector embeds, and one embedded under another choice
is re-scored, by embedding its slot text under the current choice, before it can be served.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

logger = logging.getLogger("llmcache")

__all__ = [
    "LEADING_WORDS",
    "SlotBook",
    "choose",
    "distinct_estimate",
    "echoed",
    "embedded_from_counters",
    "exact_differs",
    "exact_partitions",
    "exact_slot_names",
    "lead_differs",
    "looks_dated",
    "looks_exact",
    "named",
    "observe",
    "partition_values_from_counters",
    "partitioning",
    "partitions_from_counters",
    "slot_text",
    "time_tokens",
    "times_differ",
]

_HASH = "slot_h:"
_LEN = "max_slot_len:"
_POS = "min_slot_pos:"
_EXACT = "max_slot_exact:"
# The distinct-value sketch (see _roles.__doc__ below): ``max_slot_v:<bucket>:<slot>`` is 1
# once a value hashed into that bucket, and ``slot_calls`` counts the table's calls.
_BUCKET = "max_slot_v:"
_CALLS = "slot_calls"
# ``max_slot_value:<slot>:<value>``: a value of a slot that separates a shared table's callers.
_VALUE = "max_slot_value:"
_NAMED_CHARS = 64

#: Buckets of a slot's distinct-value sketch: a slot's distinct values are counted (up to
#: collisions) by the buckets their hashes fill.
BUCKETS = 64
# The hash's bits left after the bucket (48 - 6), and HyperLogLog's constant for 64 registers.
_REST_BITS = 42
_HLL_ALPHA = 0.709
#: Filled buckets a slot needs before it can be embedded in a table shared by several agents
#: (no agent given): fewer distinct values can never fill them, so up to 15 agents sharing a
#: table are never crossed, whatever the order of their calls.
QUERY_DISTINCT = 16
#: Calls after which a table that has an agent learns its partitioning slots.
SETTLE_CALLS = 32
#: A slot with fewer than QUERY_DISTINCT values is partitioning in an agent's table once its
#: distinct values are at most this share of the table's calls (each value recurring).
RECUR_RATIO = 0.25
#: In a shared table, a slot with many values still partitions once they are this few per
#: call (a population of more than 15 agents: each has called about ten times).
POPULATION_RATIO = 0.1
#: In a shared table, a slot with at most this many times the values of the slots that name
#: the caller partitions too (see :func:`partitioning`).
ANCHOR_TIE = 1.5

_TRAILING = ".!?;:,"

# How often a process re-reads the profiles other processes may have moved (seconds).
_REFRESH_S = 30.0

_MONTH = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?"
)
_WEEKDAY = r"(?:mon|tue|wed|thu|fri|sat|sun)[a-z]*\.?"
_ATOMS = [
    r"\d{1,2}:\d{2}(?::\d{2})?(?:\s*[ap]\.?m\.?)?",  # 09:00, 9:00 am, 21:30:00
    r"\d{1,2}\s*[ap]\.?m\.?",  # 9am, 10 p.m.
    r"\d{4}-\d{1,2}-\d{1,2}(?:[t ]\d{1,2}:\d{2}(?::\d{2})?)?",  # 2023-02-13, ISO date-time
    r"\d{1,2}/\d{1,2}/\d{2,4}",  # 02/13/2023
    rf"{_MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?",  # February 13
    rf"\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}",  # 13 February
    _MONTH,
    _WEEKDAY,
    r"[-+]?\d+(?:[.,]\d+)?%?",  # numbers (a year, a count, a score)
]
_ATOM = "(?:" + "|".join(_ATOMS) + ")"
_JOIN = r"(?:\s*(?:[-\u2013\u2014,/]|to|at|until|and)\s*|\s+)"
_EXACT_VALUE = re.compile(rf"{_ATOM}(?:{_JOIN}{_ATOM})*", re.IGNORECASE)
# A value made only of numbers is exact only as a range ("10 - 20"); a lone number is a
# slot's ordinary content more often than not (a count the answer does not hinge on).
_LONE_NUMBER = re.compile(r"[-+]?\d+(?:[.,]\d+)?%?")
_HAS_TIME_OR_DATE = re.compile(
    rf"\d:\d|\d\s*[ap]\.?m|\d-\d{{1,2}}-\d|\d/\d|\b{_MONTH}\b|\b{_WEEKDAY}\b", re.IGNORECASE
)
_NUMERIC_RANGE = re.compile(r"\d\s*(?:[-\u2013\u2014]|to)\s*[-+]?\d", re.IGNORECASE)


def looks_exact(value: str) -> bool:
    """Whether a value, as a whole, is a time, a date (or both), or a numeric range."""
    text = value.strip().rstrip(".")
    if not text or len(text) > 80 or not _EXACT_VALUE.fullmatch(text):
        return False
    if _LONE_NUMBER.fullmatch(text):
        return False
    return bool(_HAS_TIME_OR_DATE.search(text) or _NUMERIC_RANGE.search(text))


def looks_dated(value: str) -> bool:
    """Whether a value, as a whole, is a time or a date (or both), not a numeric range."""
    return looks_exact(value) and bool(_HAS_TIME_OR_DATE.search(value))


# The time and date tokens inside a longer value (numbers alone are not: a count, a score).
_TIME_TOKEN = re.compile(
    rf"\d{{4}}-\d{{1,2}}-\d{{1,2}}(?:[t ]\d{{1,2}}:\d{{2}}(?::\d{{2}})?)?"
    rf"|\d{{1,2}}:\d{{2}}(?::\d{{2}})?(?:\s*[ap]\.?m\.?)?"
    rf"|\b\d{{1,2}}\s*[ap]\.?m\.?(?![a-z])"
    rf"|\b\d{{1,2}}/\d{{1,2}}/\d{{2,4}}\b"
    rf"|\b{_MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?\b"
    rf"|\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}(?![a-z])",
    re.IGNORECASE,
)


def time_tokens(value: str) -> tuple[str, ...]:
    """The times and dates inside a value, in order, lower-cased with spaces and dots dropped
    (``10:00 AM`` and ``10:00am`` are one time)."""
    return tuple(re.sub(r"[\s.]", "", m.group()).lower() for m in _TIME_TOKEN.finditer(value))


def times_differ(
    slots: Mapping[str, str], names: Sequence[str], stored: Mapping[str, str] | None
) -> str:
    """The first of ``names`` whose times and dates differ between the call's value and a
    stored entry's (an entry without slot values: the first with any); ``""`` when none does."""
    for name in names:
        mine = time_tokens(slots.get(name, ""))
        theirs = time_tokens(stored.get(name, "")) if stored is not None else ()
        if mine != theirs and (stored is not None or mine):
            return name
    return ""


_LEAD_WORD = re.compile(r"\w+")
#: What a would-be hit refused by :func:`lead_differs` is counted as refused by, among the
#: exact slots (``CallInfo.exact_refused``, ``stats()``): no slot has this name.
LEADING_WORDS = "(leading words)"


def _leading(text: str, words: int) -> tuple[str, ...]:
    """The first ``words`` words of ``text``, case and punctuation aside."""
    found: list[str] = []
    for match in _LEAD_WORD.finditer(text):
        found.append(match.group().casefold())
        if len(found) == words:
            break
    return tuple(found)


def lead_differs(query: str, stored: str, words: int) -> bool:
    """Whether the first ``words`` words of two embedding texts differ (case and punctuation
    aside; 0: never). A text with fewer words is compared as far as it goes, and then by its
    length: "idle" and "idle in the park" differ at two words."""
    return words > 0 and _leading(query, words) != _leading(stored, words)


def exact_slot_names(
    slots: Mapping[str, str], declared: Sequence[str] | None, *, detect: bool
) -> frozenset[str]:
    """The call's exact slots: those it names, and (``detect``) those whose value looks exact."""
    names = {name for name in declared or () if name in slots}
    if detect:
        names.update(name for name, value in slots.items() if looks_exact(value))
    return frozenset(names)


def named(slots: Mapping[str, str], names: Iterable[str]) -> frozenset[str]:
    """Of ``names``, the slots whose value is short (at most ``_NAMED_CHARS``: a name, not a
    persona or a status line)."""
    return frozenset(n for n in names if n in slots and len(slots[n].strip()) <= _NAMED_CHARS)


def echoed(slots: Mapping[str, str]) -> frozenset[str]:
    """The slots whose value, a short one (a name: at most ``_NAMED_CHARS``), the call
    repeats in another of its slots: what a prompt says twice ("Here is a brief description
    of {name}.\nName: {name}", "... for {name}") names whom it is about, never what is
    asked. In a table several agents share they are exact from the first call: until the
    names have recurred (about ten calls each, with more than 15 agents) nothing else keeps
    two agents apart but the embedding."""
    seen: dict[str, list[str]] = {}
    for name, value in slots.items():
        key = value.strip()
        if key and len(key) <= _NAMED_CHARS:
            seen.setdefault(key, []).append(name)
    return frozenset(name for names in seen.values() if len(names) > 1 for name in names)


def exact_differs(
    slots: Mapping[str, str], exact: frozenset[str], stored: Mapping[str, str] | None
) -> str:
    """The first exact slot (in name order) whose stored value differs from the call's (any
    exact slot when the entry kept no slot values); ``""`` when none does."""
    for name in sorted(exact):
        if stored is None or stored.get(name, "").strip() != slots[name].strip():
            return name
    return ""


def _value_hash(value: str) -> float:
    # 48 bits: exact as a float8 counter (every backend stores counters as doubles).
    digest = hashlib.sha256(value.strip().encode("utf-8", "surrogatepass")).digest()
    return float(int.from_bytes(digest[:6], "big"))


def observe(slots: Mapping[str, str], exact: frozenset[str]) -> dict[str, float]:
    """The counters one call adds to its table's slot profile."""
    delta: dict[str, float] = {}
    for position, (name, value) in enumerate(slots.items()):
        h = _value_hash(value)
        delta[f"max_{_HASH}{name}"] = h
        delta[f"min_{_HASH}{name}"] = h
        delta[f"{_LEN}{name}"] = float(len(value.strip()))
        delta[f"{_POS}{name}"] = float(position)
        delta[f"{_EXACT}{name}"] = float(name in exact)
        bucket, rest = int(h) % BUCKETS, int(h) // BUCKETS
        # HyperLogLog's register: the rank of the first 1-bit of the hash's other 42 bits.
        delta[f"{_BUCKET}{bucket}:{name}"] = float(_REST_BITS - rest.bit_length() + 1)
    return delta


def _filled(profile: Mapping[str, float], name: str) -> int:
    return sum(1 for j in range(BUCKETS) if f"{_BUCKET}{j}:{name}" in profile)


def distinct_estimate(profile: Mapping[str, float], name: str) -> float:
    """How many distinct values a slot has held in the table, from its sketch: HyperLogLog
    over 64 registers (about 13% error), by linear counting while few registers are set
    (exact while few values share no bucket)."""
    registers = [profile.get(f"{_BUCKET}{j}:{name}", 0.0) for j in range(BUCKETS)]
    empty = sum(1 for r in registers if r == 0.0)
    raw = _HLL_ALPHA * BUCKETS * BUCKETS / sum(math.pow(2.0, -r) for r in registers)
    if raw <= 2.5 * BUCKETS and empty:
        return BUCKETS * math.log(BUCKETS / empty)
    return raw


def partitioning(
    profile: Mapping[str, float],
    names: Sequence[str],
    *,
    shared: bool,
    anchors: frozenset[str] = frozenset(),
) -> frozenset[str]:
    """The slots that tell *whose* query a call is rather than *what* it asks: few values,
    each recurring (an agent's name, its persona summary, a fixed list of places). They are
    never embedded; those that separate agents are exact too (:func:`exact_partitions`).

    In a ``shared`` table (its calls name no agent: a prompt recognised without an agent
    slot) a slot is partitioning until it has shown it keeps taking new values: at least
    ``QUERY_DISTINCT`` filled buckets, and more than ``POPULATION_RATIO`` distinct values per
    call. So the first calls of a shared table are served only on exact repeats, and one
    agent is never served another's answer. In an agent's own table no agent can be crossed,
    so a slot that varied is embedded at once (as before), and becomes partitioning only
    once the table has ``SETTLE_CALLS`` calls and the slot has shown few values, each
    recurring (at most ``RECUR_RATIO`` of the calls).

    ``anchors``: the slots that name the caller in a shared table (:func:`echoed`). A slot
    with no more values than they have (``ANCHOR_TIE`` times, an estimate's error and a
    persona that changes once or twice aside) is the caller's too: with more than 15 agents
    an agent's persona lines have as many values as the names, and embedded with the
    question they made every question of one agent look alike (their text most of it)."""
    calls = profile.get(_CALLS, 0.0)
    found = set()
    tie = ANCHOR_TIE * max((distinct_estimate(profile, a) for a in anchors), default=0.0)
    for name in names:
        filled = _filled(profile, name)
        if filled == 0:
            continue  # a profile without a sketch (written before it existed): no role learned
        estimate = distinct_estimate(profile, name)
        few = filled < QUERY_DISTINCT
        if shared:
            if few or (calls and estimate < POPULATION_RATIO * calls) or estimate <= tie:
                found.add(name)
        elif calls >= SETTLE_CALLS and few and estimate <= RECUR_RATIO * calls:
            found.add(name)
    return frozenset(found)


def exact_partitions(
    profile: Mapping[str, float], parts: frozenset[str], *, shared: bool
) -> frozenset[str]:
    """Of a table's partitioning slots, those a candidate must match exactly; the others are
    context: neither embedded nor matched (a persona summary that changes over the day).

    Only a ``shared`` table needs any: an agent's own table cannot cross agents. In a shared
    table, the slots of few values (fewer than ``QUERY_DISTINCT``: an agent's name) are exact,
    and so is every partitioning slot of short values (``_NAMED_CHARS``: a name, whatever the
    number of callers); a slot of many long values that partitions by their recurrence alone
    (each agent's successive personas) is context when a slot of few values, with more than
    one, already separates the callers, and exact otherwise. (A slot of few values cannot tell
    more than 15 callers apart: with 24 agents of three ages, the ages exact and the names
    taken for context served agents each other's answers; ``tests/test_slot_roles.py``.)"""
    if not shared:
        return frozenset()
    few = frozenset(name for name in parts if _filled(profile, name) < QUERY_DISTINCT)
    if any(_filled(profile, name) > 1 for name in few):
        short = {n for n in parts - few if profile.get(f"{_LEN}{n}", 0.0) <= _NAMED_CHARS}
        return few | short
    return parts


def _varied(profile: Mapping[str, float], name: str) -> bool:
    high, low = profile.get(f"max_{_HASH}{name}"), profile.get(f"min_{_HASH}{name}")
    return high is not None and low is not None and high != low


def choose(
    profile: Mapping[str, float], names: Sequence[str], exact: frozenset[str]
) -> tuple[str, ...]:
    """The slots to embed, deciding first (see the module documentation)."""
    embeddable = [name for name in names if name not in exact]
    varied = [name for name in embeddable if _varied(profile, name)]
    # Every slot exact: the filter decides, and embedding them all harms nothing.
    chosen = varied or embeddable or list(names)
    position = {name: i for i, name in enumerate(names)}
    return tuple(
        sorted(chosen, key=lambda name: (profile.get(f"{_LEN}{name}", 0.0), position[name]))
    )


def slot_text(slots: Mapping[str, str], chosen: Sequence[str]) -> str | None:
    """The embedding text of ``chosen`` slots: their values joined by single spaces, each
    stripped of surrounding space and of a trailing full stop or the like (alone, a short
    value is all the text there is: MiniLM puts "sleeping." and "sleeping" at cosine 0.87);
    ``None`` when a chosen slot is missing from ``slots``."""
    if any(name not in slots for name in chosen):
        return None
    values = (slots[name].strip().rstrip(_TRAILING).rstrip() for name in chosen)
    return " ".join(v for v in values if v)


def _names(counters: Mapping[str, float]) -> list[str]:
    prefix = f"max_{_HASH}"
    names = [name[len(prefix) :] for name in counters if name.startswith(prefix)]
    names.sort(key=lambda name: counters.get(f"{_POS}{name}", 0.0))
    return names


def embedded_from_counters(
    counters: Mapping[str, float], *, shared: bool = False
) -> tuple[str, ...] | None:
    """The slots a table embeds now, from its counters (``None``: it chooses none);
    ``shared``: the table's calls name no agent (see :func:`partitioning`)."""
    names = _names(counters)
    if not names:
        return None
    exact = frozenset(name for name in names if counters.get(f"{_EXACT}{name}", 0.0))
    return choose(counters, names, exact | partitioning(counters, names, shared=shared))


def partition_values_from_counters(counters: Mapping[str, float]) -> dict[str, list[str]]:
    """The values of the slots that separated a shared table's callers (its agents' names,
    where no agent slot is declared), by slot."""
    found: dict[str, list[str]] = {}
    for key in counters:
        if key.startswith(_VALUE):
            name, _, value = key[len(_VALUE) :].partition(":")
            found.setdefault(name, []).append(value)
    return {name: sorted(values) for name, values in sorted(found.items())}


def partitions_from_counters(
    counters: Mapping[str, float], *, shared: bool = False
) -> dict[str, int]:
    """A table's partitioning slots (see :func:`partitioning`), each with how many distinct
    values it has held (estimated from its sketch)."""
    names = _names(counters)
    return {
        name: round(distinct_estimate(counters, name))
        for name in sorted(partitioning(counters, names, shared=shared))
    }


class SlotBook:
    """The slot profiles of every table of one open cache: held in memory, written as the
    tables' counters through ``add`` (the ledger) and re-read from ``read`` every so often, so
    that a variation another process saw is taken up too."""

    def __init__(
        self,
        read: Callable[[], Mapping[str, Mapping[str, float]]],
        add: Callable[[str, Mapping[str, float]], None],
        *,
        refresh_s: float = _REFRESH_S,
    ) -> None:
        self._read = read
        self._add = add
        self._refresh_s = refresh_s
        self._lock = threading.Lock()
        self._profiles: dict[str, dict[str, float]] = {}
        self._read_at: float | None = None
        self._warned: set[str] = set()

    def _refresh(self) -> None:
        now = time.monotonic()
        if self._read_at is not None and now - self._read_at < self._refresh_s:
            return
        self._read_at = now
        try:
            counters = self._read()
        except Exception:
            # A profile that cannot be read is rebuilt from the calls that come: at worst the
            # table embeds every slot a little longer.
            return
        for key, table in counters.items():
            names = [n for n in table if n.startswith(("max_slot", "min_slot", _CALLS))]
            if names:
                _merge(self._profiles.setdefault(key, {}), {n: table[n] for n in names})

    def choose(
        self,
        key: str,
        slots: Mapping[str, str],
        exact: frozenset[str],
        *,
        shared: bool = False,
        anchors: frozenset[str] = frozenset(),
    ) -> tuple[tuple[str, ...], frozenset[str]]:
        """Take a call's slot values into its table's profile, then choose its slots: those
        to embed, and the partitioning ones to match exactly (:func:`exact_partitions`);
        ``shared``: the call names no agent, ``anchors``: its slots that name the caller (see
        :func:`partitioning`)."""
        delta = observe(slots, exact)
        with self._lock:
            self._refresh()
            profile = self._profiles.setdefault(key, {})
            changed = {
                n: v for n, v in delta.items() if _merged(n, profile.get(n), v) != profile.get(n)
            }
            _merge(profile, changed)
            # The calls add up (not an extreme): counted here, merged with a re-read by max.
            profile[_CALLS] = profile.get(_CALLS, 0.0) + 1.0
            names = list(slots)
            parts = partitioning(profile, names, shared=shared, anchors=anchors)
            chosen = choose(profile, names, exact | parts)
            matched = exact_partitions(profile, parts, shared=shared)
            # Where no agent is named, the values of the slots that separate the callers name
            # them in the stats (short values only: a name, not a persona).
            callers = {
                f"{_VALUE}{name}:{slots[name].strip()}": 1.0
                for name in (named(slots, matched) if shared else ())
            }
            callers = {n: v for n, v in callers.items() if n not in profile}
            profile.update(callers)
            changed.update(callers)
            # Said once the roles are told apart (some slot keeps taking new values), so that
            # it names the slots that partition, not every slot of a table's first calls.
            warn = (
                shared
                and key not in self._warned
                and len(parts) < len(names)
                and _several(profile, exact_partitions(profile, parts, shared=shared))
            )
            if warn:
                self._warned.add(key)
        self._add(key, {**changed, _CALLS: 1.0})
        if warn:
            logger.warning(
                "table %s: recognised calls with several values of slot(s) %s share one table "
                "(their template names no agent slot); each value is kept apart as an exact "
                "slot, never embedded. Name the agent's slot (an 'agent slot:' note) to give "
                "each its own table",
                key,
                ", ".join(sorted(n for n in matched if _filled(profile, n) > 1)),
            )
        return chosen, matched


def _several(profile: Mapping[str, float], parts: frozenset[str]) -> bool:
    return any(_filled(profile, name) > 1 for name in parts)


def _merged(name: str, old: float | None, new: float) -> float:
    # Every counter of the profile keeps an extreme in memory; the call count, a sum in the
    # backend, is merged by max with a re-read too (the greater count has seen more calls).
    if old is None:
        return new
    return min(old, new) if name.startswith("min_") else max(old, new)


def _merge(profile: dict[str, float], delta: Mapping[str, Any]) -> None:
    for name, value in delta.items():
        profile[name] = _merged(name, profile.get(name), float(value))
