"""Prompt templates learned from the traffic: calls made without cache options, filed by the
template their prompt was built from, with no declaration.

Agent code that builds its prompts in code (an f-string, a framework's prompt class) sends
prompts that are one fixed text with spans that vary. :class:`TemplateLearner` learns those
templates online from the raw prompts, in bounded memory, and files a prompt under the
template it fits, with its slot values by slot name, as a declared template's call is filed
(``CacheOptions(category=, template=, slots=)``). What each slot is for is then learned by
the cache's tables exactly as for declared templates (``llmcache/_slots.py``): a slot of few
values, each recurring (the agent's name, its persona), says whose call it is and must match
exactly, never embedded; a slot that keeps taking new values is the query, and is embedded.

Why not a log parser. Online template mining is solved for log lines by the Drain family
(``drain3`` on PyPI, last released in 2022). Drain first splits lines by their token count,
then by their first tokens, and compares lines position by position: a template is a fixed
number of tokens, each slot one token. A prompt's slot holds any number of words (an event,
a memory, a persona block), so two prompts of one template rarely have one token count and
never align position by position: Drain puts every prompt of such a template in a cluster of
its own. So this module aligns with gaps instead:

- a prompt is split into tokens (words, single punctuation marks, runs of white space), so
  that its text is exactly their concatenation; a system text comes first, then a separator;
- prompts are grouped by a cheap signature: the first and the last ``SIGNATURE_TOKENS``
  non-space tokens of a template's fixed text (a template that begins with a slot is found by
  its end, one that ends with a slot by its beginning; one that both begins and ends with a
  slot is never learned and its calls pass through);
- a prompt joins a template still being learned when a gap-tolerant alignment (the longest
  matching blocks, in order: ``difflib.SequenceMatcher`` over tokens) keeps most of the
  template's fixed text (``KEEP_SHARE`` of its words; a template seen once, whose "fixed"
  text still holds its first slot values, needs ``SEED_SHARE`` of the shorter prompt's
  words); the template is then generalised to the blocks both share, the rest become slots
  of any length; a prompt that joins no template starts one;
- a template is learned with confidence once ``CONFIDENT_CALLS`` prompts in a row joined it
  without changing it. Only then are its calls filed; until then they pass through, counted.
  A confident template is frozen: its text, slots and identity never change, so its tables
  never move; a prompt that no longer fits it starts a template of its own.

Safety. A frozen template files a prompt only when the prompt is exactly its fixed text with
each slot replaced by a value (each literal run found in order, leftmost; the first at the
start, the last at the end), so the values and the template give back the prompt itself. A
prompt that fits two templates goes to the one with more fixed text; if they tie it passes
through, never guessed. Agents are never crossed by the slot roles above: a learned
template's calls name no agent (``default_agent`` aside), so its table is shared, and there
every slot of fewer than 16 distinct values must match exactly (``llmcache/_slots.py``).
A long block every template shares (a persona pasted into every prompt of an agent) can
outweigh what tells two templates apart: two templates' prompts then share most of their
words, and once joined, their instructions would be a slot. Three rules keep them apart
(``RUN_WORDS``, 16 words and marks: an instruction, not a value):

- a template being learned is given up when one of its slot values begins as another recent
  value of it does, for ``RUN_WORDS``, and differs further on (``_recurs``): a swallowed
  instruction comes back at the start of a slot with every prompt of its template, while an
  event told twice, or a model's answer quoted in two memories, differ at their start;
- a template learned from two or more prompts never gives a run of ``RUN_WORDS`` of its fixed
  text up to a slot (a labelled line's value, "Currently: ...", is a value, not such a run);
- two texts of which one holds ``RUN_WORDS`` or more where the other holds nothing (a
  reaction's extra answer fields, where a location choice has none) are never one template.

The price: where a persona is most of every prompt, templates are learned per agent (and per
status line and day where the prompt carries them), and a template whose slots begin alike
in prompts that differ further on (one task asked with other options) is not learned
(``benchmarks/bench_learn_town.py``).

Memory is bounded: at most ``max_templates`` frozen templates and ``max_learning`` being
learned (the least recently used evicted, each pool apart, so that a stream of one-off prompts
never evicts a template in use), each holding only its fixed text (prompts over
``max_prompt_chars`` pass through): at most ``(max_templates + max_learning) *
max_prompt_chars`` characters of text; a template being learned also keeps the first
``RUN_WORDS`` words and marks of its recent prompts' long slot values (at most
``RECENT_VALUES * confident_calls`` prompts'). ``benchmarks/bench_learn.py`` measures it.

A learned template can be exported as prompt files (:meth:`TemplateLearner.export`) that
``TemplateSet.from_folder`` reads: pinned, they keep the same tables (a template's tables are
keyed by its text). A prompt that begins or ends with white space is recognised by the
learner, but a pinned file's prompt is matched stripped (as ``PromptTemplate.fill`` strips it).
"""

from __future__ import annotations

import difflib
import logging
import math
import os
import re
import threading
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from ._errors import ConfigurationError
from ._learned_file import SavedTemplate, read_learned, write_learned
from ._template import COMMENT_MARKER, PromptTemplate
from ._types import CacheOptions, EmbedMode

__all__ = ["LearnedTemplate", "TemplateLearner"]

logger = logging.getLogger("llmcache")

_TOKEN = re.compile(r"\w+|[^\w\s]|\s+")
_WORD = re.compile(r"\w")
_NAMED = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_POSITIONAL = re.compile(r"!<INPUT (\d+)>!")
# Between a system text and the user text: never inside a prompt (a NUL character).
_SEP = "\x00"

#: Non-space tokens of a template's beginning (and end) it is found by.
SIGNATURE_TOKENS = 2
#: A template learned from more than one prompt keeps at least this share of its fixed words
#: when a prompt joins it (what it loses were words that happened to recur in a slot).
KEEP_SHARE = 0.67
#: A prompt joins a template only when the words they share are at least this share of the
#: prompt's words (and of the first prompt's, for a template seen once): so two templates are
#: taken for one only when a block they share is most of both their prompts.
SHARE = 0.5
#: Prompts in a row that joined a template without changing it before its calls are filed.
CONFIDENT_CALLS = 8
#: Templates seen once that a prompt no signature leads to is compared with, newest first: a
#: template that begins and ends with a slot is found by its second prompt this way.
RECENT_SEEDS = 16
#: Templates a prompt is aligned with, at most (those sharing the most words with it).
MAX_ALIGNED = 2
#: A template with more slots than this is not a template (prompts that share little).
MAX_SLOTS = 24
#: At least this many fixed words make a template.
MIN_WORDS = 3
#: A run of this many words (and marks) is an instruction, not a value: different slot values
#: that begin with one hold fixed text of another template (``_recurs``), and a template
#: learned from two or more prompts never gives one of its own up to a slot.
RUN_WORDS = 16
#: A fixed block of fewer words and marks than this inside a slot's span is taken as part of
#: its value when slot values are compared (``_recurs``): it matched by chance.
VALUE_BREAK = 3
#: How many recent prompts' long slot values a template being learned keeps for ``_recurs``,
#: in calls a template needs to be learned: prompts of several templates joined into one may
#: come a few of each, far apart.
RECENT_VALUES = 4
#: How much of a template's fixed text the stats show.
SHOWN_CHARS = 80


class LearnedTemplate(BaseModel):
    """A template the learner is sure of: its name (the tables' category), identity, fixed
    text with its slots, and how many calls it filed."""

    model_config = ConfigDict(frozen=True)

    name: str
    digest: str
    text: str
    system: str | None = None
    slots: tuple[str, ...]
    calls: int

    def shown(self, chars: int = SHOWN_CHARS) -> str:
        """The fixed text on one line, shortened to ``chars``."""
        text = " ".join(self.text.split())
        return text if len(text) <= chars else text[: chars - 1] + "\u2026"


_GAP = object()
_Element = object  # a token (str) or _GAP


def _tokens(prompt: str, system: str | None) -> list[str]:
    tokens = [*_TOKEN.findall(system), _SEP] if system is not None else []
    return tokens + _TOKEN.findall(prompt)


def _words(elements: list[_Element] | list[str]) -> int:
    return sum(1 for e in elements if isinstance(e, str) and _WORD.search(e))


def _bag(elements: list[_Element] | list[str]) -> Counter[str]:
    return Counter(e for e in elements if isinstance(e, str) and _WORD.search(e))


def _keys(elements: list[_Element]) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None]:
    """The signature a template is found by: its first and last non-space tokens, where its
    text begins (ends) with fixed text."""
    head: list[str] = []
    for e in elements:
        if not isinstance(e, str):
            break
        if not e.isspace():
            head.append(e)
            if len(head) == SIGNATURE_TOKENS:
                break
    tail: list[str] = []
    for e in reversed(elements):
        if not isinstance(e, str):
            break
        if not e.isspace():
            tail.append(e)
            if len(tail) == SIGNATURE_TOKENS:
                break
    return (tuple(head) or None), (tuple(reversed(tail)) or None)


def _signatures(tokens: list[str]) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    """The keys a prompt's templates may be indexed by: its first 1..K and last 1..K
    non-space tokens (a template's fixed beginning may be shorter than K)."""
    words = [t for t in tokens if not t.isspace()]
    heads = [tuple(words[:k]) for k in range(1, min(SIGNATURE_TOKENS, len(words)) + 1)]
    tails = [tuple(words[-k:]) for k in range(1, min(SIGNATURE_TOKENS, len(words)) + 1)]
    return heads, tails


def _space(e: _Element) -> bool:
    return isinstance(e, str) and e.isspace()


def _blocks(
    template: list[_Element], tokens: list[_Element] | list[str]
) -> list[tuple[int, int, int]]:
    """The blocks (template start, prompt start, length) both hold, in order. Aligned on the
    words and marks alone: white space recurs everywhere, and aligning on it costs time
    quadratic in a prompt's length; a block is then cut where the white space inside it
    differs, and takes in the white space on its edges where both have the same."""
    a = [k for k, e in enumerate(template) if not _space(e)]
    b = [k for k, e in enumerate(tokens) if not _space(e)]
    matcher = difflib.SequenceMatcher(
        None, [template[k] for k in a], [tokens[k] for k in b], autojunk=False
    )
    found: list[tuple[int, int, int]] = []
    at_t = at_p = 0
    for i, j, n in matcher.get_matching_blocks():
        k = 0
        while k < n:
            # The longest run from k whose white space between the words agrees too.
            end = k
            while end + 1 < n and (
                template[a[i + end] + 1 : a[i + end + 1]] == tokens[b[j + end] + 1 : b[j + end + 1]]
            ):
                end += 1
            s_t, s_p = a[i + k], b[j + k]
            e_t, e_p = a[i + end] + 1, b[j + end] + 1
            if (
                s_t > at_t
                and s_p > at_p
                and _space(template[s_t - 1])
                and (template[s_t - 1] == tokens[s_p - 1])
            ):
                s_t, s_p = s_t - 1, s_p - 1
            if (
                e_t < len(template)
                and e_p < len(tokens)
                and _space(template[e_t])
                and (template[e_t] == tokens[e_p])
            ):
                e_t, e_p = e_t + 1, e_p + 1
            found.append((s_t, s_p, e_t - s_t))
            at_t, at_p = e_t, e_p
            k = end + 1
    return found


@dataclass
class _Merged:
    """Two texts' common template: its elements, the fixed words it keeps, the longest run of
    the first's fixed text it gives up to a slot (words and marks; a gap of the first does not
    end it, so it errs long), and the second's text in its slots (each a tuple of its words
    and marks)."""

    elements: list[_Element]
    kept: int
    lost: int
    values: list[tuple[str, ...]]
    #: The longest text one of them holds where the other holds none (words and marks).
    inserted: int = 0


def _marks(elements: list[_Element] | list[str]) -> tuple[str, ...]:
    """The words and marks of a span, without its white space and gaps."""
    return tuple(e for e in elements if isinstance(e, str) and not e.isspace())


def _none(span: list[_Element] | list[str]) -> bool:
    """Whether a span holds no text and no slot."""
    return not any(e is _GAP or (isinstance(e, str) and not e.isspace()) for e in span)


def _one_line(span: list[_Element]) -> bool:
    """Whether a span of a template holds no line break (nor a gap: a slot may hold one)."""
    return all(isinstance(e, str) and "\n" not in e for e in span)


def _labels_line(block: list[_Element]) -> bool:
    """Whether a block of fixed text ends in a label: a line that holds a word and ends with a
    colon ("Currently:"), whose value follows on its line. (A word matched by chance at the
    start of another template's one-line instruction is not a label.)"""
    tail = [e for e in reversed(block) if isinstance(e, str)]
    if not tail or "\n" in tail[0]:
        return False
    last = next((e for e in tail if not e.isspace()), "")
    if last != ":":
        return False
    for e in tail:
        if "\n" in e:
            return False
        if _WORD.search(e):
            return True
    return False


def _merge(template: list[_Element], tokens: list[_Element] | list[str]) -> _Merged:
    """The template both share (their matching blocks in order, gaps elsewhere), of a template
    and a prompt's tokens, or of two templates. (A full stop or colon alone is kept: it may be
    all that stands between two slots, and one that matched by chance goes at the next
    prompt.)"""
    merged: list[_Element] = []
    at_t = at_p = 0
    kept = lost = 0
    values: list[tuple[str, ...]] = []
    # A slot's value, and the fixed text a template gives up, run on over the short blocks
    # both happen to hold inside them (a name, "of the"): what an instruction was cut into by
    # them is one run again.
    value: list[str] = []
    inserted = 0
    gone = 0
    line = False  # whether the text kept last ends in a labelled line ("Currently: ")
    for i, j, n in _blocks(template, tokens):
        if i > at_t or j > at_p:
            merged.append(_GAP)
            span, theirs = template[at_t:i], tokens[at_p:j]
            given_up, held = _marks(span), _marks(theirs)
            if _none(theirs) or _none(span):
                # Text one holds where the other holds none: optional text, or another
                # template's (a reaction's extra field, where a location prompt has none).
                inserted = max(inserted, len(given_up), len(held))
            if gone or not (line and _one_line(span)):
                # A line's value after its label (a status that changes) is a value given
                # up; anything longer may be an instruction.
                gone += len(given_up)
            value.extend(held)
        block = template[i : i + n]
        marks = _marks(block)
        if len(marks) >= VALUE_BREAK:
            if value:
                values.append(tuple(value))
            value, lost, gone = [], max(lost, gone), 0
        else:
            value.extend(marks if value else ())
            gone += len(marks) if gone else 0
        merged.extend(block)
        kept += _words(block)
        line = _labels_line(block)
        at_t, at_p = i + n, j + n
    if at_t < len(template) or at_p < len(tokens):
        merged.append(_GAP)
        span, theirs = template[at_t:], tokens[at_p:]
        given_up, held = _marks(span), _marks(theirs)
        if _none(theirs) or _none(span):
            inserted = max(inserted, len(given_up), len(held))
        gone += len(given_up)
        value.extend(held)
    lost = max(lost, gone)
    if value:
        values.append(tuple(value))
    # Two templates' slots may meet: one slot.
    elements = [e for k, e in enumerate(merged) if e is not _GAP or merged[k - 1] is not _GAP]
    return _Merged(elements, kept, lost, values, inserted)


def _recurs(values: list[tuple[str, ...]], recent: deque[tuple[_Value, ...]]) -> bool:
    """Whether one of a prompt's slot values begins with the same ``RUN_WORDS`` words and marks
    as a different value of a recent prompt of the same template: fixed text of
    the template it came from, which this template's slot swallowed. An agent's persona begins
    the prompts of every template of the agent; two templates' prompts joined by it alone part
    where their instructions begin, so a slot then begins with an instruction, and it comes
    back with every prompt of that template. Values that merely share words further on (an
    event told twice, a model's answer quoted in two memories) are not taken for it."""
    mine = [_value(v) for v in values if len(v) >= RUN_WORDS]
    if not mine:
        return False
    heads: dict[tuple[str, ...], set[int]] = {}
    for held in recent:
        for o in held:
            heads.setdefault(o.head, set()).add(o.whole)
    # One other value is enough: an instruction swallowed by a slot comes back with every
    # prompt of its template, and ``RECENT_VALUES`` keeps enough prompts to meet it again.
    return any(heads.get(v.head, set()) - {v.whole} for v in mine)


@dataclass(frozen=True)
class _Value:
    """A long slot value as ``_recurs`` compares it: its first ``RUN_WORDS`` words and marks,
    and the whole of it (hashed: a template keeps a few of these, never the text)."""

    head: tuple[str, ...]
    whole: int


def _value(value: tuple[str, ...]) -> _Value:
    return _Value(value[:RUN_WORDS], hash(value))


def _runs(elements: list[_Element]) -> tuple[list[str], bool, bool]:
    """A template as its literal runs (texts), and whether it begins and ends with a slot."""
    runs: list[str] = []
    current: list[str] = []
    for e in elements:
        if isinstance(e, str):
            current.append(e)
        else:
            runs.append("".join(current))
            current = []
    runs.append("".join(current))
    lead, trail = runs[0] == "", runs[-1] == ""
    return [r for r in runs if r], lead, trail


@dataclass
class _Template:
    elements: list[_Element]
    #: Its fixed words, counted: a prompt sharing too few of them is not aligned at all.
    bag: Counter[str] = field(default_factory=Counter)
    calls: int = 1
    stable: int = 0
    frozen: _Frozen | None = None
    keys: tuple[tuple[str, ...] | None, tuple[str, ...] | None] = (None, None)
    #: The long slot values of the prompts that joined it unchanged, latest last (at most
    #: ``RECENT_VALUES * confident_calls`` prompts'): what ``_recurs`` compares a new
    #: prompt's with. A generalised template keeps them: a value begins where it did.
    recent: deque[tuple[_Value, ...]] = field(default_factory=deque)

    @property
    def validated(self) -> bool:
        """Whether its fixed text was found in two or more prompts that differ (it has a slot)."""
        return self.calls >= 2 and _GAP in self.elements


@dataclass
class _Frozen:
    template: PromptTemplate
    runs: list[str]
    lead: bool
    trail: bool
    fixed_chars: int
    names: tuple[str, ...]
    filed: int = 0

    def parse(self, text: str) -> dict[str, str] | None:
        """The slot values that fill this template to exactly ``text`` (the leftmost fit), or
        ``None`` when it does not fit."""
        runs, pos, values = self.runs, 0, []
        for k, run in enumerate(runs):
            first, last = k == 0, k == len(runs) - 1
            if first and not self.lead:
                if not text.startswith(run):
                    return None
                pos = len(run)
                continue
            if last and not self.trail:
                end = len(text) - len(run)
                if end < pos or not text.endswith(run):
                    return None
                values.append(text[pos:end])
                pos = len(text)
                continue
            found = text.find(run, pos)
            if found < 0:
                return None
            values.append(text[pos:found])
            pos = found + len(run)
        if self.trail:
            values.append(text[pos:])
        elif pos != len(text):
            return None
        if len(values) != len(self.names):
            return None
        return dict(zip(self.names, values, strict=True))


class TemplateLearner:
    """Learns prompt templates from the prompts it is shown, and files each prompt under its
    template once that is learned with confidence (see the module documentation).

    ``options(prompt, system, default_agent)`` learns from one call's prompt and returns the
    :class:`~llmcache.CacheOptions` to file it under, or ``None``: pass it through. Safe to
    share between threads. ``max_templates`` bounds the frozen templates, ``max_learning`` those
    being learned, ``max_prompt_chars`` the prompts learned from. ``path``: a file where the
    templates learned are kept between processes (read at once, written as each is learned;
    ``llmcache/_learned_file.py``), so that the next run files their calls from its first.
    """

    def __init__(
        self,
        *,
        max_templates: int = 1000,
        max_learning: int = 1000,
        max_prompt_chars: int = 16_000,
        confident_calls: int = CONFIDENT_CALLS,
        path: str | os.PathLike[str] | None = None,
    ) -> None:
        if min(max_templates, max_learning, max_prompt_chars, confident_calls) < 1:
            raise ConfigurationError("a TemplateLearner's bounds must be at least 1")
        self.max_templates = max_templates
        self.max_learning = max_learning
        self.max_prompt_chars = max_prompt_chars
        self.confident_calls = confident_calls
        self._lock = threading.Lock()
        self._frozen: OrderedDict[int, _Template] = OrderedDict()
        self._learning: OrderedDict[int, _Template] = OrderedDict()
        self._heads: dict[tuple[str, ...], set[int]] = {}
        self._tails: dict[tuple[str, ...], set[int]] = {}
        self._others: set[int] = set()
        self._seeds: deque[int] = deque(maxlen=RECENT_SEEDS)
        self._next = 0
        #: Calls passed through while their template was being learned (or fitting none).
        self.passed = 0
        #: Calls passed through because they fit two templates equally.
        self.ambiguous = 0
        self.evicted = 0
        #: Templates given up while learned: a slot of theirs held another template's fixed
        #: text (``RUN_WORDS``), so they would have filed two templates' calls together.
        self.refused = 0
        #: Where learned templates are kept between processes (``None``: nowhere).
        self.path = Path(path) if path is not None else None
        # Templates this learner replaced (superseded or evicted): not written back.
        self._dropped: set[tuple[str | None, ...]] = set()
        if self.path is not None:
            self._restore(read_learned(self.path))

    # -- the public surface --------------------------------------------------------------------

    def options(
        self, prompt: str, system: str | None = None, default_agent: str = ""
    ) -> CacheOptions | None:
        """Learn from this prompt (the user message's text; ``system``: the system message's)
        and return the options to file the call under, or ``None`` to pass it through (its
        template is still being learned, or it fits none or two)."""
        return self._file(prompt, system, default_agent, learn=True)

    def recognise(
        self, prompt: str, system: str | None = None, default_agent: str = ""
    ) -> CacheOptions | None:
        """The options of a prompt that fits a learned template, learning nothing."""
        return self._file(prompt, system, default_agent, learn=False)

    def templates(self) -> list[LearnedTemplate]:
        """The templates learned with confidence, most recently used first."""
        with self._lock:
            frozen = [t.frozen for t in reversed(self._frozen.values()) if t.frozen is not None]
            return [
                LearnedTemplate(
                    name=f.template.name,
                    digest=f.template.digest,
                    text=f.template.prompt,
                    system=f.template.system,
                    slots=f.names,
                    calls=f.filed,
                )
                for f in frozen
            ]

    def held(self) -> int:
        """Templates held: learned and being learned (at most ``max_templates +
        max_learning``)."""
        with self._lock:
            return len(self._frozen) + len(self._learning)

    def export(self, folder: str | os.PathLike[str]) -> list[Path]:
        """Write each learned template as a prompt file ``<name>.txt`` in ``folder`` (made if
        missing): ``TemplateSet.from_folder(folder)`` recognises the same prompts and files
        them under the same tables. A template with a system text is skipped (a prompt file
        holds the user text only), logged. Returns the files written."""
        root = Path(folder)
        root.mkdir(parents=True, exist_ok=True)
        with self._lock:
            frozen = [t.frozen for t in self._frozen.values() if t.frozen is not None]
        written = []
        for f in frozen:
            if f.template.system is not None:
                logger.info("template %s has a system text: not exported", f.template.name)
                continue
            notes = (
                f"Learned by llmcache from the traffic ({f.filed} calls filed).\n"
                f"Slots: {', '.join(f.names) or 'none'}.\n"
            )
            path = root / f"{f.template.name}.txt"
            path.write_text(f"{notes}{COMMENT_MARKER}\n{f.template.prompt}", encoding="utf-8")
            written.append(path)
        return written

    # -- kept between processes (``path``; see _learned_file.py) -------------------------------

    def _restore(self, saved: list[SavedTemplate]) -> None:
        """Take the templates a file kept as learned (their calls are filed at once)."""
        digests: set[str] = set()
        for entry in saved[-self.max_templates :]:
            elements: list[_Element] = [_GAP if t is None else t for t in entry.tokens]
            frozen = _frozen(elements, name_of=self._name)
            if frozen is None or frozen.template.digest in digests:
                continue
            digests.add(frozen.template.digest)
            frozen.filed = entry.filed
            template = _Template(elements, _bag(elements), calls=entry.filed, frozen=frozen)
            key = self._next
            self._next += 1
            self._frozen[key] = template
            self._index(key, template)

    def _save(self) -> None:
        """Write the learned templates to ``path`` (called with the lock held, when one is
        learned: rare, and a reader must not see one half written)."""
        if self.path is None:
            return
        saved = [
            SavedTemplate(tokens=list(_saved_tokens(t.elements)), filed=t.frozen.filed)
            for t in self._frozen.values()
            if t.frozen is not None
        ]
        write_learned(self.path, saved, dropped=self._dropped, limit=self.max_templates)

    # -- filing --------------------------------------------------------------------------------

    def _file(
        self, prompt: str, system: str | None, agent: str, *, learn: bool
    ) -> CacheOptions | None:
        if len(prompt) + len(system or "") > self.max_prompt_chars or _SEP in f"{prompt}{system}":
            with self._lock:
                self.passed += learn
            return None
        tokens = _tokens(prompt, system)
        heads, tails = _signatures(tokens)
        with self._lock:
            candidates = self._candidates(heads, tails)
            found = self._fit(self._fitting(heads, tails), prompt, system)
            if found is None:
                if learn:
                    self.passed += 1
                    self._learn(candidates, tokens)
                return None
            if isinstance(found, bool):
                self.ambiguous += learn
                self.passed += learn
                return None
            key, values = found
            self._frozen.move_to_end(key)
            frozen = self._frozen[key].frozen
            assert frozen is not None
            frozen.filed += learn
            template = frozen.template
        return _options(template, values, agent)

    def _candidates(self, heads: list[tuple[str, ...]], tails: list[tuple[str, ...]]) -> list[int]:
        found: set[int] = set(self._others)
        for key in heads:
            found.update(self._heads.get(key, ()))
        for key in tails:
            found.update(self._tails.get(key, ()))
        return sorted(found)

    def _fitting(self, heads: list[tuple[str, ...]], tails: list[tuple[str, ...]]) -> list[int]:
        """The frozen templates a prompt may fit: those beginning as it does, and of those
        that begin with a slot, those ending as it does (a frozen template's fixed beginning
        must begin the prompt, so one indexed by another beginning cannot fit)."""
        found: set[int] = set(self._others)
        for key in heads:
            found.update(self._heads.get(key, ()))
        for key in tails:
            for k in self._tails.get(key, ()):
                template = self._frozen.get(k)
                if template is not None and template.keys[0] is None:
                    found.add(k)
        return sorted(found)

    def _fit(
        self, candidates: list[int], prompt: str, system: str | None
    ) -> tuple[int, dict[str, str]] | bool | None:
        """The frozen template this prompt fits best, with its values; ``None`` when it fits
        none, ``False`` when it fits two equally."""
        text = f"{system}{_SEP}{prompt}" if system is not None else prompt
        best: list[tuple[int, int, dict[str, str]]] = []
        for key in candidates:
            template = self._frozen.get(key)
            if template is None or template.frozen is None:
                continue
            frozen = template.frozen
            if (frozen.template.system is not None) != (system is not None):
                continue
            values = frozen.parse(text)
            if values is not None:
                best.append((frozen.fixed_chars, key, values))
        if not best:
            return None
        best.sort(key=lambda b: -b[0])
        if len(best) > 1 and best[0][0] == best[1][0]:
            return False
        return best[0][1], best[0][2]

    # -- learning ------------------------------------------------------------------------------

    def _learn(self, candidates: list[int], tokens: list[str]) -> None:
        bag = _bag(tokens)
        words = bag.total()
        # The words a prompt and a template both hold bound what an alignment can keep: most
        # candidates end there; of the rest, the few sharing most are aligned (a bounded cost
        # for a prompt of no template, whatever the templates held).
        hopeful: list[tuple[int, int, int]] = []
        for key in dict.fromkeys([*candidates, *reversed(self._seeds)]):
            template = self._learning.get(key)
            if template is None:
                continue
            fixed = template.bag.total()
            # A template without a slot has seen one prompt (perhaps again and again): its
            # words are that prompt's, slot values included.
            seed = _GAP not in template.elements
            need = SHARE * max(fixed, words) if seed else KEEP_SHARE * fixed
            need = max(need, SHARE * words, MIN_WORDS)
            shared = (bag & template.bag).total()
            if shared >= need:
                hopeful.append((shared, key, math.ceil(need)))
        hopeful.sort(reverse=True)
        best: tuple[int, int, _Merged] | None = None
        for _, key, need in hopeful[:MAX_ALIGNED]:
            template = self._learning[key]
            merged = _merge(template.elements, tokens)
            slots = sum(1 for e in merged.elements if e is _GAP)
            if merged.kept < need or slots > MAX_SLOTS:
                continue
            if template.validated and merged.lost >= RUN_WORDS:
                continue  # it would give up an instruction two prompts agreed on
            if merged.inserted >= RUN_WORDS:
                continue  # an instruction one holds and the other lacks: two templates
            if (_SEP in tokens) != (_SEP in merged.elements):
                continue  # a system text's slot would run into the user text
            if best is None or merged.kept > best[1]:
                best = (key, merged.kept, merged)
        if best is None:
            self._seeds.append(self._add(_Template(list(tokens), bag)))
            return
        key, _, merged = best
        template = self._learning[key]
        self._learning.move_to_end(key)
        template.calls += 1
        if merged.elements == template.elements:
            if _recurs(merged.values, template.recent):
                # Its slot swallowed fixed text of the template this prompt came from: it
                # would file two templates' calls together. Never frozen; learning starts
                # again from this prompt.
                self._learning.pop(key)
                self._unindex(key, template)
                self.refused += 1
                self._seeds.append(self._add(_Template(list(tokens), bag)))
                return
            template.stable += 1
            template.recent.append(tuple(_value(v) for v in merged.values if len(v) >= RUN_WORDS))
            while len(template.recent) > RECENT_VALUES * self.confident_calls:
                template.recent.popleft()
        else:
            self._unindex(key, template)
            template.elements = merged.elements
            template.bag = _bag(merged.elements)
            template.stable = 0
            self._index(key, template)
        if template.stable >= self.confident_calls:
            self._freeze(key, template)

    def _add(self, template: _Template) -> int:
        key = self._next
        self._next += 1
        self._learning[key] = template
        self._index(key, template)
        while len(self._learning) > self.max_learning:
            old, gone = self._learning.popitem(last=False)
            self._unindex(old, gone)
            self.evicted += 1
        return key

    def _freeze(self, key: int, template: _Template) -> None:
        del self._learning[key]
        self._supersede(key, template)
        frozen = _frozen(template.elements, name_of=self._name)
        digests = {t.frozen.template.digest for t in self._frozen.values() if t.frozen}
        if frozen is None or frozen.template.digest in digests:
            # Its fixed text would read as slots in a prompt file (its calls keep passing), or
            # the template is learned already: two equal templates would tie on every prompt.
            self._unindex(key, template)
            return
        template.frozen = frozen
        self._frozen[key] = template
        self._dropped.discard(_saved_tokens(template.elements))
        while len(self._frozen) > self.max_templates:
            old, gone = self._frozen.popitem(last=False)
            self._unindex(old, gone)
            self._dropped.add(_saved_tokens(gone.elements))
            self.evicted += 1
        self._save()

    def _supersede(self, key: int, template: _Template) -> None:
        """Generalise a template about to be frozen with the frozen ones it differs from only
        a little (``KEEP_SHARE``), which it then replaces: an agent whose calls came in a
        burst froze a template with its name as fixed text, and the next agent's calls made
        another; together they are one template whose name slot partitions its table."""
        head, tail = _keys(template.elements)
        near = set(self._others)
        for index, sig in ((self._heads, head), (self._tails, tail)):
            if sig is not None:
                near.update(index.get(sig, ()))
        # The few that share most words with it (a bounded cost, as in _learn).
        frozen = [(self._frozen[k], k) for k in near if k in self._frozen]
        overlap = [((template.bag & old.bag).total(), other, old) for old, other in frozen]
        overlap.sort(key=lambda o: (-o[0], o[1]))
        for _, other, old in overlap[:MAX_ALIGNED]:
            merged = _merge(old.elements, template.elements)
            most = max(_words(old.elements), _words(template.elements))
            slots = sum(1 for e in merged.elements if e is _GAP)
            if merged.kept < max(KEEP_SHARE * most, MIN_WORDS) or slots > MAX_SLOTS:
                continue
            lost = max(merged.lost, _merge(template.elements, old.elements).lost)
            if max(lost, merged.inserted) >= RUN_WORDS:
                continue  # one would give up an instruction, or lacks one: two templates
            if (_SEP in template.elements) != (_SEP in merged.elements):
                continue
            del self._frozen[other]
            self._unindex(other, old)
            self._dropped.add(_saved_tokens(old.elements))
            self._unindex(key, template)
            template.elements = merged.elements
            template.bag = _bag(merged.elements)
            self._index(key, template)

    @staticmethod
    def _name(digest: str) -> str:
        return f"learned_{digest[:10]}"

    def _index(self, key: int, template: _Template) -> None:
        head, tail = template.keys = _keys(template.elements)
        if head is not None:
            self._heads.setdefault(head, set()).add(key)
        if tail is not None:
            self._tails.setdefault(tail, set()).add(key)
        if head is None and tail is None:
            self._others.add(key)

    def _unindex(self, key: int, template: _Template) -> None:
        head, tail = template.keys
        for index, sig in ((self._heads, head), (self._tails, tail)):
            if sig is not None and sig in index:
                index[sig].discard(key)
                if not index[sig]:
                    del index[sig]
        self._others.discard(key)


def _frozen(elements: list[_Element], *, name_of: Callable[[str], str]) -> _Frozen | None:
    """A learned template's frozen form: its :class:`PromptTemplate` (named slots, or Park's
    positional ones where the fixed text holds ``{name}``), runs to parse prompts by."""
    runs, lead, trail = _runs(elements)
    fixed = "".join(runs)
    if _NAMED.search(fixed) and _POSITIONAL.search(fixed):
        return None
    positional = bool(_NAMED.search(fixed))
    slots = sum(1 for e in elements if e is _GAP)
    names = tuple(str(i) if positional else f"slot_{i + 1}" for i in range(slots))
    # The text with each gap a slot; a system text is what comes before the separator.
    parts: list[str] = []
    gap = 0
    for e in elements:
        if isinstance(e, str):
            parts.append(e)
        else:
            parts.append(f"!<INPUT {names[gap]}>!" if positional else "{" + names[gap] + "}")
            gap += 1
    text = "".join(parts)
    system: str | None = None
    if _SEP in text:
        system, _, text = text.partition(_SEP)
    if not text.strip():
        return None
    try:
        probe = PromptTemplate(name="learned", text=text, system=system)
    except ValueError:
        return None
    template = probe.model_copy(update={"name": name_of(probe.digest)})
    return _Frozen(template, runs, lead, trail, len(fixed), names)


def _saved_tokens(elements: list[_Element]) -> tuple[str | None, ...]:
    """A template's tokens as a file keeps them: a slot is ``None``."""
    return tuple(e if isinstance(e, str) else None for e in elements)


def _options(template: PromptTemplate, values: dict[str, str], agent: str) -> CacheOptions:
    """A learned template's call, filed as a recognised declared template's is."""
    options = CacheOptions(
        category=template.name,
        agent=agent,
        template=template.digest,
        slots=values,
    )
    if not any(v.strip() for v in values.values()):
        # No slot (or only blank ones): the whole, fixed prompt is what it is found by.
        options = options.model_copy(update={"embed": EmbedMode.FULL})
    return options
