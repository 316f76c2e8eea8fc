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
  matching blocks, in order: ``difflib.SequenceMatcher`` over tokens, compiled by
  ``cydifflib``) keeps most of the template's fixed text (``KEEP_SHARE`` of its words) and
  the words they share are at least ``SHARE`` of the prompt's (of both, for a template seen
  once, whose "fixed" text still holds its first slot values); a prompt that begins and ends
  as a template found in two prompts does joins it on ``ANCHORED_WORDS`` shared words,
  however long its values (a question around a list of memories); the template is then
  generalised to the blocks both share, the rest become slots of any length; a prompt that
  joins no template starts one;
- words are compared outside **labelled lines' values**: a line that begins with one to
  ``LABEL_WORDS`` words and a colon ("Currently: ...", "Learned traits: ...", "Options (JSON
  list): [...]") holds a value after its label, as does the line after a label that stands
  alone ("Conversation:"). So two agents' prompts of one template whose personas are labelled
  lines share what is compared and make one template (each persona line a slot, which
  partitions the table: below), while one agent's prompts of two templates share little; and
  a labelled line whose value is free text (``RUN_WORDS`` words and marks or more) is one slot
  from its label to the line's end, whatever words two values happen to share, and text one
  such value holds where the other holds none is a value too (one observation more);
- **a list is one value** (``_listed``): the item lines after a line that ends with a colon
  ("Context from memory:\n- ...\n- ..."), and a labelled line's items joined by semicolons
  ("Most recent observations: a; b; c"), are read as one token that aligns with nothing, so
  a list retrieved anew for each call (reordered, one item more) is a slot from the first join;
- **a model's answer a prompt quotes is one value** (``heard``): the caches tell the learner
  each answer, and a later prompt that quotes a recent long one whole (an agent's summary in
  every reaction prompt, an entity named in the next question) holds it as one token that
  aligns with nothing: a summary made anew is a new value, not another template's text;
- **each code site is learned apart** (``llmcache/_site.py``): only prompts from the code that
  made a template's prompts join it (read from the stack: for LangChain's generative agents,
  the framework's function), because two templates a chain calls one after the other share
  their values (an entity question, then an action question about the same observation) and,
  as text, the shared value looks fixed and the questions like values. Through the proxy,
  which sees no stack, every call is one site and the text alone tells templates apart (with
  a seed kept after it is joined, and rules for names and ends: below);
- a template is learned with confidence once ``CONFIDENT_CALLS`` prompts in a row joined it
  without changing it. Only then are its calls filed; until then they pass through, counted.
  A confident template is frozen: its text and slots do not change, so its tables stay; a
  prompt that no longer fits it starts a template of its own, with one exception: a prompt
  that fits it but for fewer than ``VALUE_BREAK`` words its first prompts all held by chance
  in or beside a slot (an agent's name in each early observation, the day of the first calls
  in "Current time: ...") widens it there in place and is filed (``_widen``; its tables are
  then new ones, as a template's text names its tables, and the answers filed under the old
  ones are filed again under them: ``llmcache/_late.py``); so does, at the code site that made
  it, a prompt that differs from it in one name its text holds, wherever (Tommie's in "What is
  the relationship between Tommie and {entity}?", once Eve asks): one line of code builds one
  template, so the name is a value. By the text alone a name the text holds twice or more
  is widened so where the prompt holds one value in each of its places ("What is the Tommie
  doing ...? The Tommie is", once the dog is observed: one value filled in twice), and a name
  held once where the prompt holds another name there (one to three capitalised words: Eve's
  for Tommie's), never a lower-case value (an instruction's word, perhaps). Two templates
  alike but for such a word may then be one, the word a slot of few values, each recurring:
  it must match exactly, so neither is served the other's answer (the slot roles below);
- **a seed joined stays a seed, once** (a *shadow*): a chain's two calls one after the other
  share the value they are made from (LangChain's agent asks which entity an observation is
  about, then what that entity is doing in the same observation), and as text the second
  joins the first, the observation fixed text, the questions slots: a template never seen
  again. The first prompt is kept as a seed, aligned only by a prompt that joins no other
  template (a shadow shares a whole prompt's words and would rank above the template it
  began), so the next call of the first kind still finds its first.

Safety. A frozen template files a prompt only when the prompt is exactly its fixed text with
each slot replaced by a value (each literal run found in order, leftmost; the first at the
start, the last at the end), so the values and the template give back the prompt itself. A
prompt that fits two templates goes to the one with more fixed text; if they tie it passes
through, never guessed. Agents are never crossed by the slot roles above: a learned
template's calls name no agent (``default_agent`` aside), so its table is shared, and there
every slot of fewer than 16 distinct values (or of few values per call) must match exactly
(``llmcache/_slots.py``). Two templates' prompts must never make one template, their
instructions a slot. Rules keep them apart (``RUN_WORDS``, 16 words and marks: an
instruction, not a value):

- no join gives a run of ``RUN_WORDS`` of the template's text (its first prompt's, for a
  template seen once) up to a slot, but in a labelled line's value;
- two texts of which one holds ``RUN_WORDS`` or more where the other holds nothing (a
  reaction's extra answer fields, where a location choice has none) are never one template;
- a slot never holds a labelled line's label the other text does not hold there ("Observation:"
  where the other tells of a person), and a label at a line's start is never a slot ("Event:"
  against "Conversation:");
- by the text alone, two frozen templates whose ends differ are never made one
  (``_supersede``) but where each gives up a name alone (the agent's, at the start of one
  agent's prompts): an entity question and an action question alike but for a few words are
  two templates, though their fixed text differs less than ``KEEP_SHARE``;
- a template being learned is given up when one of its slot values begins as another recent
  value of it does, for ``RUN_WORDS``, and differs further on, or is a long value seen before
  that the latest prompt did not hold (``_recurs``): a swallowed instruction comes back;
- a template is not confident while its long slot values recur whole (``_constant``): text
  that never varies is fixed text, in a slot only because two templates were joined.

The price: a template whose persona is not in labelled lines is learned per agent (and per
status line and day where the prompt carries them); a slot that quotes one long text for many
calls keeps its template from being learned until the text has changed often enough; and a
template whose slots begin alike in prompts that differ further on (one task asked with other
options) is not learned (``benchmarks/bench_learn_town.py``). Two templates alike but for
their lists, or for text inside a long labelled value, are learned as one, the list or value
a slot (a list of instructions after "Rules:"); that slot's few values, each recurring, then
say which call it is and match exactly, so the two never share an answer (the slot roles
below), though they share a table. A model's answer the prompt quotes changed (cut, or
parsed: "REACT: <reaction>" told as "reacted by <reaction>") is not known as one, nor is a
short one (a name). The learner cannot know which
slots the answer does not depend on (a status line, a clock): each is a slot, exact or
embedded as its values say, where declared templates name the keywords. So the cut of learned
templates can fall far below declared ones (``benchmarks/bench_learn_replay.py``): export them
(:meth:`TemplateLearner.export`), read them, and declare them with the slots that decide the
answer (``PromptTemplate(keyword_slots=...)``).

Memory is bounded: at most ``max_templates`` frozen templates and ``max_learning`` being
learned (the least recently used evicted, each pool apart, so that a stream of one-off prompts
never evicts a template in use), each holding only its fixed text (prompts over
``max_prompt_chars`` pass through), and the latest ``RECENT_SEEDS`` shadows: at most
``(max_templates + max_learning + RECENT_SEEDS) * max_prompt_chars`` characters of text; a
template being learned also keeps the first
``RUN_WORDS`` words and marks of its recent prompts' long slot values (at most
``RECENT_VALUES * confident_calls`` prompts'), and the learner the model's latest
``RECENT_ANSWERS`` long answers (each at most ``max_prompt_chars``). ``benchmarks/bench_learn.py``
measures it.

A learned template can be exported as prompt files (:meth:`TemplateLearner.export`) that
``TemplateSet.from_folder`` reads: pinned, they keep the same tables (a template's tables are
keyed by its text). A prompt that begins or ends with white space is recognised by the
learner, but a pinned file's prompt is matched stripped (as ``PromptTemplate.fill`` strips it).
"""

from __future__ import annotations

import functools
import logging
import math
import os
import re
import threading
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from itertools import compress, count
from pathlib import Path
from typing import Protocol, cast

from cydifflib import SequenceMatcher
from pydantic import BaseModel, ConfigDict

from ._errors import ConfigurationError
from ._learned_file import SavedTemplate, read_learned, write_learned
from ._site import current_site, names_code
from ._slots import looks_dated
from ._template import COMMENT_MARKER, PromptTemplate
from ._types import CacheOptions, EmbedMode

__all__ = ["LearnedTemplate", "TemplateLearner"]

logger = logging.getLogger("llmcache")

# A line break begins a token of its own, the spaces before it another: "value \n" and
# "value\n" (a labelled line left empty, "Daily plan requirement: \n") break alike.
_TOKEN = re.compile(r"\w+|[^\w\s]|[^\S\n]+|\n\s*")
_WORD = re.compile(r"\w")
_NAMED = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_POSITIONAL = re.compile(r"!<INPUT (\d+)>!")
# Between a system text and the user text: never inside a prompt (a NUL character).
_SEP = "\x00"
# What a text must hold to hold a list (``_listed``): a colon ending a line before an item, or
# a semicolon.
_MAY_LIST = re.compile(r":[^\S\n]*\n\s*(?:[-*\u2022]|\d+[.)])\s|;")
# The marks that begin a list's items ("- ", "* ", "\u2022 "; numbered items are "#").
_BULLETS = frozenset({"-", "*", "\u2022"})

#: Non-space tokens of a template's beginning (and end) it is found by.
SIGNATURE_TOKENS = 2
#: A template learned from more than one prompt keeps at least this share of its fixed words
#: when a prompt joins it (what it loses were words that happened to recur in a slot).
KEEP_SHARE = 0.67
#: A prompt joins a template only when the words they share are at least this share of the
#: prompt's words (and of the first prompt's, for a template seen once): so two templates are
#: taken for one only when a block they share is most of both their prompts.
SHARE = 0.5
#: A prompt that begins and ends with a template's first and last words joins it when they
#: share at least this many fixed words, however long its slot values.
ANCHORED_WORDS = 8
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
#: A labelled line's value of at least this many items joined by semicolons is a list, read
#: as one value (``_listed``).
LIST_ITEMS = 3
#: A line that begins with at most this many words and a colon is a labelled line
#: ("Currently: ...", "Options (JSON list): [...]"): its value is a value, not an instruction
#: (``_label``, ``_line_values``).
LABEL_WORDS = 4
#: A model's answers the learner keeps (``TemplateLearner.heard``), the latest: a prompt that
#: quotes one holds it as a value.
RECENT_ANSWERS = 64
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
    #: The code site it was learned at (``module:function:line``, or the name ``code_site``
    #: gave it; ``None``: a stack with no frame outside the packages that carry calls).
    site: str | None = None

    def shown(self, chars: int = SHOWN_CHARS) -> str:
        """The fixed text on one line, shortened to ``chars``."""
        text = " ".join(self.text.split())
        return text if len(text) <= chars else text[: chars - 1] + "\u2026"


_GAP = object()
_Element = object  # a token (str) or _GAP


class _Whole(str):
    """A span read as one token that equals no other: a value, never fixed text. A list
    (``_listed``), or a model's answer the prompt quotes (``TemplateLearner.heard``).

    An agent's prompt lists memories, observations or statements after a line that ends
    with a colon ("Context from memory:\n- [April 01, 07:50 AM] Tommie is hungry\n- ...");
    the next call lists them again, reordered, one added, one gone. Aligned word by word, two
    such lists share most items, so the shared ones would read as fixed text and an item
    one list holds and the other lacks as another template's text (``RUN_WORDS``), and the
    template is never learned (LangChain's ``summarize_related_memories``). Read as one
    token, a list aligns with nothing and is a slot from the first join. So does a model's
    answer that a later prompt quotes (an agent's summary, an entity named three lines long),
    whose words two answers share in long runs ("The observed entity in the given observation
    is ...") as another template's text would be.

    It compares equal only to itself, hashes by its text (so a list that comes back whole
    is seen as the same value), and holds no line break as a token does (``_breaks``)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    __hash__ = str.__hash__


def _tokens(prompt: str, system: str | None) -> list[str]:
    tokens = [*_TOKEN.findall(system), _SEP] if system is not None else []
    return _listed(tokens + _TOKEN.findall(prompt), prompt, system or "")


def _quoting(text: str, answers: Sequence[str]) -> list[str] | None:
    """A prompt's text (``_Prompt.text``) as tokens, each of ``answers`` it quotes one
    ``_Whole`` token (the first of two that overlap); ``None`` when it quotes none."""
    spans: list[tuple[int, int]] = []
    for answer in answers:
        at = text.find(answer)
        while at >= 0:
            spans.append((at, at + len(answer)))
            at = text.find(answer, at + len(answer))
    if not spans:
        return None
    tokens: list[str] = []
    done = 0
    for start, end in sorted(spans):
        if start < done:
            continue
        tokens.extend(_TOKEN.findall(text[done:start]))
        tokens.append(_Whole(text[start:end]))
        done = end
    return _listed(tokens + _TOKEN.findall(text[done:]), text)


def _item(line: list[str]) -> str | None:
    """A list item's mark ("-", "*", "\u2022", or "#" for "1. " and "1) "), or ``None``."""
    at = next((k for k, t in enumerate(line) if not t.isspace()), len(line))
    rest = [*line[at:], "", "", ""]
    if rest[0] in _BULLETS and rest[1].isspace():
        return rest[0]
    if rest[0].isdigit() and rest[1] in (".", ")") and rest[2].isspace():
        return "#"
    return None


def _colon_ends(line: list[str]) -> bool:
    """Whether a line's last word or mark is a colon."""
    return next((t for t in reversed(line) if not t.isspace()), None) == ":"


def _listed(tokens: list[str], *texts: str) -> list[str]:
    """``tokens`` with each list made one ``_Whole`` token:

    - the item lines after a line that ends with a colon, each beginning with one mark
      ("- ", "* ", "1. "), from the first item to the end of the last (the line break after
      it stays a token);
    - a labelled line's value of items joined by semicolons ("Most recent observations: <the
      newest>; <the one before>; ..."): ``LIST_ITEMS`` or more, ``RUN_WORDS`` words and marks
      or more in all, from its label to the line's end.

    ``texts``: the text the tokens were read from; one that can hold no list (no line that
    ends with a colon before an item, no semicolon) is not read line by line (most prompts:
    the cost of a call filed)."""
    if not any(_MAY_LIST.search(text) for text in texts):
        return tokens
    lines: list[tuple[int, int]] = []  # each line's tokens: [start, end), its break excluded
    start = 0
    for end in compress(count(), map(_breaks, tokens)):
        lines.append((start, end))
        start = end + 1
    lines.append((start, len(tokens)))
    spans: list[tuple[int, int]] = []
    k = 0
    while k < len(lines):
        line = tokens[slice(*lines[k])]
        mark = _item(line)
        if mark is not None and k and _colon_ends(tokens[slice(*lines[k - 1])]):
            last = k
            while last + 1 < len(lines) and _item(tokens[slice(*lines[last + 1])]) == mark:
                last += 1
            spans.append((lines[k][0], lines[last][1]))
            k = last + 1
            continue
        at = _label(line)
        if at is not None and line[at:].count(";") >= LIST_ITEMS - 1:
            marks = [t for t in line[at:] if not t.isspace()]
            if len(marks) >= RUN_WORDS:
                spans.append((lines[k][0] + at, lines[k][1]))
        k += 1
    out: list[str] = []
    done = 0  # tokens[:done] are in out
    for first, end in spans:
        out.extend(tokens[done:first])
        out.append(_Whole("".join(tokens[first:end])))
        done = end
    out.extend(tokens[done:])
    return out


def _words(elements: Sequence[_Element]) -> int:
    return sum(1 for e in elements if isinstance(e, str) and _WORD.search(e))


def _bag(elements: list[_Element] | list[str]) -> Counter[str]:
    """The words a text (or template) is compared by: all its words but a labelled line's value
    ("Currently: <a status>", "Learned traits: <a persona>"), which is a value, not the
    template's text. So two agents' prompts of one template, whose personas are labelled lines,
    share most of what is compared, and two templates' prompts of one agent, alike in persona,
    share little."""
    bag: Counter[str] = Counter()
    for line, _ in _lines(elements):
        at = _label(line)
        bag.update(x for x in line[:at] if isinstance(x, str) and _WORD.search(x))
    return bag


def _lines(elements: Sequence[_Element]) -> list[tuple[list[_Element], _Element | None]]:
    """A text's lines, each with the element that ends it (``None`` for the last)."""
    out: list[tuple[list[_Element], _Element | None]] = []
    start = 0
    # The breaks found in C-level loops (it runs for every text compared, on every element).
    for end in compress(count(), map(_breaks, elements)):
        out.append((list(elements[start:end]), elements[end]))
        start = end + 1
    out.append((list(elements[start:]), None))
    return out


def _lacks_fewer(words: Counter[str], present: Counter[str], limit: int) -> bool:
    """Whether fewer than ``limit`` of ``words`` are not ``present`` (stops at the limit)."""
    lacking = 0
    for w in words:
        if w not in present:
            lacking += 1
            if lacking >= limit:
                return False
    return True


def _shared(a: Counter[str], b: Counter[str], common: set[str] | None = None) -> int:
    """The words two bags share, counted (``(a & b).total()``, without building the bag, in
    C-level loops: it runs for every template a prompt may join). ``common``: their words
    in common, when known."""
    if common is None:
        common = a.keys() & b.keys()
    return sum(map(min, map(a.__getitem__, common), map(b.__getitem__, common)))


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


# ``str.isspace`` for elements that may be a slot (checked first): one C call per element
# where a helper would be two Python calls (it runs for every element of every text aligned).
_isspace = cast(Callable[[object], bool], str.isspace)


def _solid(elements: Sequence[_Element]) -> list[int]:
    """Where a text's words, marks and slots stand (all but its white space)."""
    return [k for k, e in enumerate(elements) if e is _GAP or not _isspace(e)]


class _Matcher(Protocol):
    """``difflib.SequenceMatcher``'s part the learner uses (``cydifflib``'s, compiled, gives
    the same blocks: its tests compare the two)."""

    def set_seq1(self, a: Sequence[_Element]) -> None: ...

    def get_matching_blocks(self) -> Sequence[tuple[int, int, int]]: ...


class _Aligner:
    """A text every template is aligned with: its words and marks found once, and indexed
    once (``SequenceMatcher`` indexes its second text when it is set; a prompt is aligned
    with a template it may join, then with one it may widen)."""

    def __init__(self, tokens: list[_Element] | list[str]) -> None:
        self.tokens = tokens
        self.solid = _solid(tokens)
        self.matcher: _Matcher = SequenceMatcher(
            None, (), [tokens[k] for k in self.solid], autojunk=False
        )

    def blocks(self, template: list[_Element]) -> list[tuple[int, int, int]]:
        """The blocks (template start, prompt start, length) both hold, in order (``_blocks``)."""
        a = _solid(template)
        self.matcher.set_seq1([template[k] for k in a])
        return _whole_blocks(template, a, self.tokens, self.solid, self.matcher)


def _blocks(
    template: list[_Element], tokens: list[_Element] | list[str]
) -> list[tuple[int, int, int]]:
    """The blocks (template start, prompt start, length) both hold, in order. Aligned on the
    words and marks alone: white space recurs everywhere, and aligning on it costs time
    quadratic in a prompt's length; a block is then cut where the white space inside it
    differs, and takes in the white space on its edges where both have the same."""
    return _Aligner(tokens).blocks(template)


def _whole_blocks(
    template: list[_Element],
    a: list[int],
    tokens: list[_Element] | list[str],
    b: list[int],
    matcher: _Matcher,
) -> list[tuple[int, int, int]]:
    """The blocks of ``matcher``'s alignment of the words and marks (at ``a`` in the template,
    ``b`` in the prompt), cut where the white space inside differs, widened over the same
    white space on their edges."""
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
    #: Whether a slot holds labelled lines' labels the other's does not (``_labels``).
    labels: bool = False
    #: The words of its fixed text, counted (``_bag``; ``kept`` is their number).
    bag: Counter[str] = field(default_factory=Counter)

    def apart(self, system: bool) -> bool:
        """Whether the two texts are two templates', not one (the module's rules): one gives
        up an instruction (``RUN_WORDS``) or holds one the other lacks, a slot holds a label
        the other does not, there are too many slots to be a template, or a slot would run
        from a system text (``system``: the texts have one) into the user text."""
        return (
            max(self.lost, self.inserted) >= RUN_WORDS
            or self.labels
            or self.elements.count(_GAP) > MAX_SLOTS
            or (_SEP in self.elements) != system
        )


def _marks(elements: Sequence[_Element]) -> tuple[str, ...]:
    """The words and marks of a span, without its white space and gaps."""
    return tuple(e for e in elements if isinstance(e, str) and not e.isspace())


def _none(span: list[_Element] | list[str]) -> bool:
    """Whether a span holds no text and no slot."""
    return not any(e is _GAP or (isinstance(e, str) and not e.isspace()) for e in span)


def _rest_of_line(*spans: list[_Element] | list[str]) -> bool:
    """Whether each span's text ends on the line it begins on (a line break after it aside):
    a value after a label, not lines of their own."""
    for span in spans:
        end = len(span)
        while end and isinstance(span[end - 1], str) and str(span[end - 1]).isspace():
            end -= 1
        if not _one_line(span[:end]):
            return False
    return True


def _breaks(e: _Element) -> bool:
    """Whether an element ends a line (the system text ends one too; a list read as one
    token does not, though it holds several)."""
    # ``type`` rather than ``isinstance``: a list read as one token (``_Whole``, a str) is
    # not a line break, and this runs for every element of every text compared.
    return type(e) is str and ("\n" in e or e == _SEP)


def _one_line(span: list[_Element] | list[str]) -> bool:
    """Whether a span holds no line break."""
    return not any(_breaks(e) for e in span)


def _label(line: Sequence[_Element]) -> int | None:
    """Where a labelled line's value begins (after its colon and a space), or ``None``: a
    line that begins with one to ``LABEL_WORDS`` words (brackets allowed) and a colon, before
    any slot ("Currently: ...", "Options (JSON list): [...]"). A line's value after its label
    (a status that changes) is a value, however long; an instruction has no label."""
    for k, e in enumerate(line):
        if e is _GAP:
            return None
        if e == ":":
            if _label_like(_marks(line[:k])):
                return k + 1 + (k + 1 < len(line) and _space(line[k + 1]))
            return None
    return None


def _labelled_lines(span: list[_Element] | list[str]) -> bool:
    """Whether every line a span begins (after each of its line breaks) is a labelled line:
    a value that runs on over labelled lines ("Learned traits: ...\nCurrently: ...", an
    agent's persona) is values, where an instruction's lines have no labels."""
    for k, e in enumerate(span):
        if _breaks(e):
            rest = span[k + 1 :]
            end = _line_end(rest)
            if _marks(rest[:end]) and _label(rest[:end]) is None:
                return False
    return True


def _label_like(marks: tuple[str, ...]) -> bool:
    """Whether words and marks could be a line's label: one to ``LABEL_WORDS`` words, with
    brackets at most."""
    return 0 < _words(marks) <= LABEL_WORDS and all(_WORD.search(m) or m in "()" for m in marks)


def _line_start(elements: Sequence[_Element], end: int | None = None) -> int:
    """Where the line that holds ``elements[end - 1]`` begins (the last line by default)."""
    for k in range((len(elements) if end is None else end) - 1, -1, -1):
        if _breaks(elements[k]):
            return k + 1
    return 0


def _value_opens(merged: list[_Element], start: int) -> bool:
    """Whether a slot that begins at the end of ``merged`` (whose last line begins at
    ``start``) is a labelled value: on a labelled line after its label, or on the line after a
    label that stands alone ("Conversation:", then a line that tells one)."""
    if _label(merged[start:]) is not None:
        return True
    if start == 0:
        return False
    return _alone(merged[_line_start(merged, start - 1) : start - 1])


def _block_words(template: list[_Element], blocks: list[tuple[int, int, int]]) -> int:
    """The words the blocks both hold: what a merge of them can keep at most (its fixed text
    is theirs, less the values of its labelled lines)."""
    return sum(_words(template[i : i + n]) for i, _, n in blocks)


def _merge(
    template: list[_Element],
    tokens: list[_Element] | list[str],
    blocks: list[tuple[int, int, int]] | None = None,
) -> _Merged:
    """The template both share (their matching blocks in order, gaps elsewhere), of a template
    and a prompt's tokens, or of two templates. (A full stop or colon alone is kept: it may be
    all that stands between two slots, and one that matched by chance goes at the next
    prompt.)"""
    merged: list[_Element] = []
    at_t = at_p = 0
    lost = 0
    values: list[tuple[str, ...]] = []
    # A slot's value, and the fixed text a template gives up, run on over the short blocks
    # both happen to hold inside them (a name, "of the"): what an instruction was cut into by
    # them is one run again.
    value: list[str] = []
    # Whether that value is a labelled line's (it began after a label and stays on its line):
    # not an instruction, so ``_recurs`` does not compare it.
    labelled = False
    inserted = 0
    labels = relabelled = False
    gone = 0
    start = 0  # where the merged text's current line begins
    # Per labelled line whose value varies (by where it begins in ``merged``): the words and
    # marks of the second text's value.
    lines: dict[int, int] = {}
    # The blocks both hold, then an empty one at both ends: the gap before it is the last.
    if blocks is None:
        blocks = _blocks(template, tokens)
    for i, j, n in [*blocks, (len(template), len(tokens), 0)]:
        if i > at_t or j > at_p:
            span, theirs = template[at_t:i], tokens[at_p:j]
            line = _value_opens(merged, start)
            # The whole of a labelled line's value: from its label (or its line's start, after
            # a label alone) to the line's end.
            whole = (
                line
                and (len(merged) == start or _label(merged[start:]) == len(merged) - start)
                and (n == 0 or _breaks(template[i]))
                and _rest_of_line(span, theirs)
            )
            merged.append(_GAP)
            given_up, held = _marks(span), _marks(theirs)
            if (
                (_none(theirs) or _none(span))
                and not whole
                and not (line and _free(template, at_t) and _free(tokens, at_p))
            ):
                # Text one holds where the other holds none: optional text, or another
                # template's (a reaction's extra field, where a location prompt has none).
                # Not a labelled line's whole value that one left empty ("Daily plan
                # requirement: " of an agent without a plan), nor text inside a labelled
                # value that is free text in both ("Most recent observations: <the newest>;
                # <the older ones>", one observation more in the next call): a value.
                inserted = max(inserted, len(given_up), len(held))
            at_line = start == len(merged) - 1
            labels = labels or _labels(span, at_line) != _labels(theirs, at_line)
            # The template's own fixed text at a line's start, before a colon both hold: a
            # label of its ("Event:", where the other prompt has "Conversation:"). (Where the
            # template has a slot there already, the line's start is a value: a speaker.)
            relabelled = (
                at_line and _GAP not in span and _label_like(given_up) and _label_like(held)
            )
            within = line and _labelled_lines(span) and _labelled_lines(theirs)
            if gone or not within:
                gone += len(given_up)
            if within:
                lines[start] = lines.get(start, 0) + len(held)
            labelled = within if not value else labelled and within
            value.extend(held)
        block = template[i : i + n]
        marks = _marks(block)
        labels = labels or (relabelled and marks[:1] == (":",))
        relabelled = False
        if start in lines:
            lines[start] += len(_marks(block[: _line_end(block)]))
        if len(marks) >= VALUE_BREAK:
            if value and not labelled:
                values.append(tuple(value))
            value, lost, gone = [], max(lost, gone), 0
        else:
            value.extend(marks if value else ())
            gone += len(marks) if gone else 0
            labelled = labelled and _labelled_lines(block)
        merged.extend(block)
        if not _one_line(block):
            start = len(merged) - len(block) + _line_start(block)
        at_t, at_p = i + n, j + n
    lost = max(lost, gone)
    if value and not labelled:
        values.append(tuple(value))
    merged = _line_values(merged, {k for k, held in lines.items() if held >= RUN_WORDS})
    # Two templates' slots may meet: one slot.
    elements = [e for k, e in enumerate(merged) if e is not _GAP or merged[k - 1] is not _GAP]
    bag = _bag(elements)
    return _Merged(elements, bag.total(), lost, values, inserted, labels, bag)


def _free(elements: Sequence[_Element], at: int) -> bool:
    """Whether the labelled line around ``elements[at]`` holds a value of free text:
    ``RUN_WORDS`` or more words and marks after its label (a slot counts as one). A short
    value ("Answer in JSON format: {choice}") is the template's, and text one adds to it is
    another template's field."""
    start = _line_start(elements, at)
    end = next((k for k in range(at, len(elements)) if _breaks(elements[k])), len(elements))
    line = elements[start:end]
    label = _label(line) if line else None
    value = line[label or 0 :]
    return sum(1 for e in value if e is _GAP or (isinstance(e, str) and not e.isspace())) >= (
        RUN_WORDS
    )


def _labels(span: list[_Element] | list[str], at_line: bool) -> set[tuple[str, ...]]:
    """The labels of labelled lines a span holds at a line's start (its own start,
    ``at_line``, included). A label is fixed text of a template, never a value: two texts
    that hold different labels in one slot are two templates (a reaction to an object and one
    to a person, alike but for a few lines). (The same labels on both sides were aligned
    apart: the alignment keeps the longest blocks, not every line.)"""
    found = set()
    for k in range(len(span)):
        if (k == 0 and at_line) or (k > 0 and _breaks(span[k - 1])):
            end = _label(span[k:])
            if end is not None:
                found.add(_marks(span[k : k + end]))
    return found


def _line_end(elements: Sequence[_Element]) -> int:
    """Where the first line of a text ends (its length if it has no line break)."""
    return next((k for k, e in enumerate(elements) if _breaks(e)), len(elements))


def _line_values(merged: list[_Element], free: set[int]) -> list[_Element]:
    """A labelled line whose value is free text that varies ("Currently: <a status>",
    "Options (JSON list): [...]") made one slot from its label to the line's end: words two
    values happen to share ("Liam Oliver is", a comma) would otherwise stay fixed text, and
    the next value without them would fit no template. ``free``: where the lines begin whose
    value is free text (``RUN_WORDS`` or more words and marks): a short value (a name, a time)
    keeps its fixed parts, so that a slot that says whose call it is stays its own, and a line
    that ends in fixed text after its last slot ("Name: {name} likes tea") is kept as it is."""
    out: list[_Element] = []
    previous: list[_Element] = []
    for line, end in _lines(merged):
        at = _label(line) if len(out) in free else None
        if at is None and len(out) in free and _alone(previous):
            at = 0  # the line after a label that stands alone ("Conversation:"): all value
        if at is not None and len(_marks(line[_last_gap(line) + 1 :])) < VALUE_BREAK:
            line = [*line[:at], _GAP]
        out.extend(line)
        previous = line
        if end is not None:
            out.append(end)
    return out


def _alone(line: list[_Element]) -> bool:
    """Whether a line is a label that stands alone, its value on the next line."""
    at = _label(line)
    return at is not None and not _marks(line[at:])


def _held_values(elements: list[_Element]) -> list[_Element]:
    """A template about to be frozen, with each labelled line whose value every prompt it was
    learned from held alike made a slot after its label, where that value cannot be an
    instruction: none ("Daily plan requirement: ", left empty by the first agents' personas)
    or a time or a date ("Current Date: Friday February 13", "Current time: {}, February {},
    2024, {}:{}"). Otherwise the next agent's plan, or the next day or month, fits no
    learned template, or only one widened from it, whose tables are new. (A value of words
    stays fixed text: "Task: rate the event" may be what tells two templates apart.)"""
    out: list[_Element] = []
    for line, end in _lines(elements):
        at = _label(line)
        if at == len(line) and isinstance(end, str) and end[:1] == " " and "\n" in end:
            # "Daily plan requirement: " then the line's end: the space and the line break
            # are one token, the value none; the value goes between them.
            line, end = [*line, " "], end.lstrip(" ")
            at += 1
        if at is not None and at > 0 and _space(line[at - 1]) and line[at:] != [_GAP]:
            # A slot already in it stands as a number: "{}:{}" reads as a time.
            value = "".join(e if isinstance(e, str) else "01" for e in line[at:])
            if not value.strip() or looks_dated(value):
                line = [*line[:at], _GAP]
        out.extend(line)
        if end is not None:
            out.append(end)
    return out


def _last_gap(elements: list[_Element]) -> int:
    return max((k for k, e in enumerate(elements) if e is _GAP), default=-1)


def _recurs(values: list[tuple[str, ...]], recent: deque[tuple[_Value, ...]]) -> bool:
    """Whether one of a prompt's slot values begins with the same ``RUN_WORDS`` words and marks
    as a different value of a recent prompt of the same template: fixed text of
    the template it came from, which this template's slot swallowed. An agent's persona begins
    the prompts of every template of the agent; two templates' prompts joined by it alone part
    where their instructions begin, so a slot then begins with an instruction, and it comes
    back with every prompt of that template. Values that merely share words further on (an
    event told twice, a model's answer quoted in two memories) are not taken for it. Or whether
    one is a long value seen before that the latest prompt did not hold (below)."""
    mine = [_value(v) for v in values if len(v) >= RUN_WORDS]
    if not mine:
        return False
    heads: dict[tuple[str, ...], set[int]] = {}
    for held in recent:
        for o in held:
            heads.setdefault(o.head, set()).add(o.whole)
    # One other value is enough: an instruction swallowed by a slot comes back with every
    # prompt of its template, and ``RECENT_VALUES`` keeps enough prompts to meet it again.
    if any(heads.get(v.head, set()) - {v.whole} for v in mine):
        return True
    # A slot that is a whole instruction comes back whole, after the other template's
    # prompts: a long value seen before that the latest prompt did not hold. (A summary
    # an agent's prompts quote stays until it is made anew; it does not come back.)
    latest = {o.whole for o in recent[-1]} if recent else set()
    return any(v.whole in seen - latest for v in mine for seen in heads.values())


def _constant(joins: list[tuple[_Value, ...]]) -> bool:
    """Whether the long slot values of these joins recur whole: one in every join, or most of
    them the same few. Text that recurs whole is fixed text, in a slot only because the
    template was merged with another template's prompt (two instructions, each a whole slot
    value, five of one then three of the other). Such a template is not yet confident: a value
    that varies shows, or the other instruction comes back (``_recurs``). The price: a slot
    that quotes one long text for many calls (an agent's summary, made anew now and then)
    keeps its template from being learned until the text has changed often enough."""
    if not joins:
        return False
    common = {v.whole for v in joins[0]}
    for held in joins[1:]:
        common &= {v.whole for v in held}
    wholes = [v.whole for held in joins for v in held]
    return bool(common) or (len(wholes) >= 2 and 2 * len(set(wholes)) <= len(wholes))


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
class _Prompt:
    """One prompt as the learner reads it, each form made once: its tokens, its text as a
    frozen template parses it (a system text, the separator, the user text), whether it has
    a system text, the signatures it may be found by, and its words (made when first asked)."""

    tokens: list[str]
    text: str
    system: bool
    heads: list[tuple[str, ...]]
    tails: list[tuple[str, ...]]

    @classmethod
    def of(cls, prompt: str, system: str | None) -> _Prompt:
        tokens = _tokens(prompt, system)
        text = f"{system}{_SEP}{prompt}" if system is not None else prompt
        return cls(tokens, text, system is not None, *_signatures(tokens))

    @functools.cached_property
    def bag(self) -> Counter[str]:
        return _bag(self.tokens)

    @functools.cached_property
    def aligner(self) -> _Aligner:
        return _Aligner(self.tokens)

    def quoting(self, answers: Sequence[str]) -> _Prompt:
        """This prompt with each of ``answers`` it quotes read as one value (``_Whole``)."""
        tokens = _quoting(self.text, answers) if answers else None
        if tokens is None:
            return self
        return _Prompt(tokens, self.text, self.system, self.heads, self.tails)


@dataclass
class _Template:
    elements: list[_Element]
    #: Its fixed words, counted: a prompt sharing too few of them is not aligned at all.
    bag: Counter[str] = field(default_factory=Counter)
    calls: int = 1
    stable: int = 0
    frozen: _Frozen | None = None
    keys: tuple[tuple[str, ...] | None, tuple[str, ...] | None] = (None, None)
    #: The code site its prompts came from (``llmcache/_site.py``): only that site's prompts
    #: join it, and it supersedes only that site's templates.
    site: str | None = None
    #: The long slot values of the prompts that joined it unchanged, latest last (at most
    #: ``RECENT_VALUES * confident_calls`` prompts'): what ``_recurs`` compares a new
    #: prompt's with. A generalised template keeps them: a value begins where it did.
    recent: deque[tuple[_Value, ...]] = field(default_factory=deque)

    @property
    def validated(self) -> bool:
        """Whether its fixed text was found in two or more prompts that differ (it has a slot)."""
        return self.calls >= 2 and _GAP in self.elements


@dataclass
class _Signatures:
    """Templates (by key) by the signatures they are found by (``_keys``): their first
    tokens, their last, or neither (``others``: found by every prompt). ``loose``: the last
    tokens of those that begin with a slot, the only ones a prompt's end finds for filing
    (a frozen template's fixed beginning must begin the prompt)."""

    heads: dict[tuple[str, ...], set[int]] = field(default_factory=dict)
    tails: dict[tuple[str, ...], set[int]] = field(default_factory=dict)
    loose: dict[tuple[str, ...], set[int]] = field(default_factory=dict)
    others: set[int] = field(default_factory=set)

    def add(self, key: int, template: _Template) -> None:
        head, tail = template.keys = _keys(template.elements)
        if head is not None:
            self.heads.setdefault(head, set()).add(key)
        if tail is not None:
            self.tails.setdefault(tail, set()).add(key)
            if head is None:
                self.loose.setdefault(tail, set()).add(key)
        if head is None and tail is None:
            self.others.add(key)

    def discard(self, key: int, template: _Template) -> None:
        head, tail = template.keys
        for index, sig in ((self.heads, head), (self.tails, tail), (self.loose, tail)):
            if sig is not None and sig in index:
                index[sig].discard(key)
                if not index[sig]:
                    del index[sig]
        self.others.discard(key)

    def found(
        self, heads: Sequence[tuple[str, ...]], tails: Sequence[tuple[str, ...]], *, loose: bool
    ) -> set[int]:
        """The templates beginning with one of ``heads`` or ending with one of ``tails``
        (``loose``: of those, only the ones that begin with a slot), and those found by
        neither."""
        found = set(self.others)
        for key in heads:
            found.update(self.heads.get(key, ()))
        for key in tails:
            found.update((self.loose if loose else self.tails).get(key, ()))
        return found


@dataclass
class _Frozen:
    template: PromptTemplate
    runs: list[str]
    lead: bool
    trail: bool
    fixed_chars: int
    names: tuple[str, ...]
    #: Its template's identity (``PromptTemplate.digest``), hashed once: every new template
    #: is checked against every learned one's.
    digest: str
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

    #: The seeds kept after another prompt joined them (the module documentation's
    #: shadows): the latest, at most this many, apart from ``max_learning``.
    max_shadows: int = RECENT_SEEDS

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
        # Each pool's templates by their signatures, apart: a prompt is fitted to the frozen
        # ones and aligned with those being learned, and a long run's 1,000 learned templates
        # that begin alike must not be walked through each time a new one is learned.
        self._frozen_at = _Signatures()
        self._learning_at = _Signatures()
        self._seeds: deque[int] = deque(maxlen=RECENT_SEEDS)
        # Seeds another prompt joined, kept as seeds once (``_learn``): the latest
        # ``RECENT_SEEDS``, apart from the templates being learned (never evicting one).
        self._shadows: OrderedDict[int, _Template] = OrderedDict()
        # The model's recent long answers (``heard``): quoted by a prompt, a value.
        self._answers: deque[str] = deque(maxlen=RECENT_ANSWERS)
        self._next = 0
        #: Calls passed through while their template was being learned (or fitting none).
        self.passed = 0
        #: Calls passed through because they fit two templates equally.
        self.ambiguous = 0
        self.evicted = 0
        #: Templates given up while learned: a slot of theirs held another template's fixed
        #: text (``RUN_WORDS``), so they would have filed two templates' calls together.
        self.refused = 0
        #: Learned templates widened in place: a word or two their first prompts all held by
        #: chance made a slot (``_widen``).
        self.widened = 0
        #: Templates learned (or widened) in this process: a count that changes whenever
        #: prompts passed through before may fit a template now (``llmcache/_late.py``).
        self.learned = 0
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

    def heard(self, answer: str, prompt: str, system: str | None = None) -> None:
        """The model's ``answer`` to ``prompt`` (and ``system``): a later prompt that quotes it
        whole holds it as a value, never as a template's fixed text (an agent's summary, made
        anew now and then, quoted by every prompt after it). Kept when it has ``RUN_WORDS``
        words and marks or more (a shorter one, a name, is found by alignment) and its own
        prompt does not hold it (an answer that echoes its prompt is that prompt's text); the
        latest ``RECENT_ANSWERS``. The caches that learn call this with every answer."""
        text = answer.strip()
        if len(text) > self.max_prompt_chars or text in prompt or text in (system or ""):
            return
        if sum(1 for t in _TOKEN.findall(text) if not t.isspace()) < RUN_WORDS:
            return
        with self._lock:
            if text not in self._answers:
                self._answers.append(text)

    def templates(self) -> list[LearnedTemplate]:
        """The templates learned with confidence, most recently used first."""
        with self._lock:
            frozen = [
                (t.frozen, t.site) for t in reversed(self._frozen.values()) if t.frozen is not None
            ]
            return [
                LearnedTemplate(
                    name=f.template.name,
                    digest=f.digest,
                    text=f.template.prompt,
                    system=f.template.system,
                    slots=f.names,
                    calls=f.filed,
                    site=site,
                )
                for f, site in frozen
            ]

    def held(self) -> int:
        """Templates held: learned, being learned and shadows (at most ``max_templates +
        max_learning + max_shadows``)."""
        with self._lock:
            return len(self._frozen) + len(self._learning) + len(self._shadows)

    def export(self, folder: str | os.PathLike[str]) -> list[Path]:
        """Write each learned template as a prompt file ``<name>.txt`` in ``folder`` (made if
        missing): ``TemplateSet.from_folder(folder)`` recognises the same prompts and files
        them under the same tables. A template with a system text is skipped (a prompt file
        holds the user text only), logged. Returns the files written."""
        root = Path(folder)
        root.mkdir(parents=True, exist_ok=True)
        with self._lock:
            frozen = [(t.frozen, t.site) for t in self._frozen.values() if t.frozen is not None]
        written = []
        for f, site in frozen:
            if f.template.system is not None:
                logger.info("template %s has a system text: not exported", f.template.name)
                continue
            notes = (
                f"Learned by llmcache from the traffic ({f.filed} calls filed)"
                + (f" at {site}" if site else "")
                + f".\nSlots: {', '.join(f.names) or 'none'}.\n"
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
            if frozen is None or frozen.digest in digests:
                continue
            digests.add(frozen.digest)
            frozen.filed = entry.filed
            template = _Template(
                elements, _bag(elements), calls=entry.filed, frozen=frozen, site=entry.site
            )
            key = self._next
            self._next += 1
            self._frozen[key] = template
            self._frozen_at.add(key, template)

    def _save(self) -> None:
        """Write the learned templates to ``path`` (called with the lock held, when one is
        learned: rare, and a reader must not see one half written)."""
        if self.path is None:
            return
        saved = [
            SavedTemplate(tokens=list(_saved_tokens(t.elements)), filed=t.frozen.filed, site=t.site)
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
        read = _Prompt.of(prompt, system)
        # Read outside the lock. Learning joins only its site's templates; a call filed (from
        # any site's template) carries its site for a recording to keep (``_options``).
        site = current_site()
        with self._lock:
            fitting = self._fitting(read.heads, read.tails)
            found = self._fit(fitting, read)
            if found is None and learn:
                # Learning only: a filed prompt is parsed from its text, whatever it quotes.
                read = read.quoting(self._answers)
                found = self._widen(fitting, read, site)
            if found is None:
                if learn:
                    self.passed += 1
                    self._learn(self._candidates(read.heads, read.tails), read, site)
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
        return _options(template, values, agent, site)

    def _widen(
        self, fitting: list[int], read: _Prompt, site: str | None
    ) -> tuple[int, dict[str, str]] | None:
        """A learned template this prompt fits but for fewer than ``VALUE_BREAK`` words (and the
        marks beside them) that every prompt it was learned from happened to hold (an agent's
        name in each of the first observations, the month of the first days): made a slot
        there, in place, and the prompt filed under it. Anything more is left to learning a
        template anew. Such words lie in or beside a slot. Elsewhere in the template's text
        (a new slot) only one name, for a prompt of the code that made the template
        (``names_code``): "the relationship between Tommie and {entity}" where the next
        agent's prompt names Eve, "What is the Tommie doing ...? The Tommie is" where the next
        observation is of a dog. One line of code builds one template, so the name its prompts
        differ in is a value. By the text alone (the proxy), where two templates alike but for
        a word could be one, only a name the prompt fills in as one value in each of its places
        (twice or more), or replaces by another name (held once): ``_each_place``. Other words
        are never widened."""
        present = read.bag
        # Only a template all but a few of whose words the prompt holds can be widened to it:
        # counting the words it lacks rules the rest out before any alignment (a bounded cost;
        # most templates that begin alike lack a few words at once).
        near = [
            key
            for key in fitting
            if (template := self._frozen.get(key)) is not None
            and _lacks_fewer(template.bag, present, VALUE_BREAK)
            and read.system == (_SEP in template.elements)
        ]
        own = names_code(site)
        for key in near[:MAX_ALIGNED]:
            template = self._frozen[key]
            merged = _merge(template.elements, read.tokens, read.aligner.blocks(template.elements))
            # At its own code site, the words given up may be one name (a capitalised word)
            # the template's text holds, however often (an entity's, in the question and in its
            # answer's lead): a value. By the text alone, a name the text holds twice or more,
            # each place (and only those) a slot now: one value filled in twice.
            given = template.bag - merged.bag if template.site == site else Counter()
            places = None if own else _each_place(template.elements, given, merged.elements)
            named = len(given) == 1 and _a_name(given) and (own or places is not None)
            if (
                merged.apart(read.system)
                or (1 if named else template.bag.total() - merged.kept) >= VALUE_BREAK
                or merged.inserted
                or merged.kept < KEEP_SHARE * template.bag.total()
                # A chance word lies in or beside a slot: widening it fuses slots or extends
                # one, never makes a new slot of the template's other text (but in a labelled
                # line's value: "Current time: Monday, ...", the day of the first prompts).
                or (
                    merged.elements.count(_GAP) > template.elements.count(_GAP)
                    and merged.lost > 0
                    and not named
                )
                # Its ends index it: they stay, but at its own code site (re-indexed below),
                # where one at least stays fixed text.
                or (_keys(merged.elements) != template.keys and not named)
                or _keys(merged.elements) == (None, None)
            ):
                continue
            frozen = _frozen(merged.elements, name_of=self._name)
            values = frozen.parse(read.text) if frozen is not None else None
            if frozen is None or values is None:
                continue
            if places is not None:
                # By the text alone: one value in each of the name's places, and a name's
                # (a name held once is another name's place: "between Tommie and", "between
                # Eve and"; a lower-case word there may be an instruction's).
                held = {list(values.values())[k] for k in places}
                if len(held) != 1 or (len(places) == 1 and not _a_name(held.pop().split(" "))):
                    continue
            self._dropped.add(_saved_tokens(template.elements))
            frozen.filed = template.frozen.filed if template.frozen is not None else 0
            self._frozen_at.discard(key, template)
            template.elements, template.bag, template.frozen = (
                merged.elements,
                merged.bag,
                frozen,
            )
            self._frozen_at.add(key, template)
            self._dropped.discard(_saved_tokens(template.elements))
            self.widened += 1
            self.learned += 1
            self._save()
            return key, values
        return None

    def _candidates(self, heads: list[tuple[str, ...]], tails: list[tuple[str, ...]]) -> list[int]:
        """The templates being learned a prompt may join: those beginning or ending as it does
        (and those found by neither)."""
        return sorted(self._learning_at.found(heads, tails, loose=False))

    def _fitting(self, heads: list[tuple[str, ...]], tails: list[tuple[str, ...]]) -> list[int]:
        """The frozen templates a prompt may fit: those beginning as it does, and of those
        that begin with a slot, those ending as it does (a frozen template's fixed beginning
        must begin the prompt, so one indexed by another beginning cannot fit)."""
        return sorted(self._frozen_at.found(heads, tails, loose=True))

    def _fit(
        self, candidates: list[int], read: _Prompt
    ) -> tuple[int, dict[str, str]] | bool | None:
        """The frozen template this prompt fits best, with its values; ``None`` when it fits
        none, ``False`` when it fits two equally."""
        best: list[tuple[int, int, dict[str, str]]] = []
        for key in candidates:
            template = self._frozen.get(key)
            if template is None or template.frozen is None:
                continue
            frozen = template.frozen
            if (frozen.template.system is not None) != read.system:
                continue
            values = frozen.parse(read.text)
            if values is not None:
                best.append((frozen.fixed_chars, key, values))
        if not best:
            return None
        best.sort(key=lambda b: -b[0])
        if len(best) > 1 and best[0][0] == best[1][0]:
            return False
        return best[0][1], best[0][2]

    # -- learning ------------------------------------------------------------------------------

    def _learn(self, candidates: list[int], read: _Prompt, site: str | None) -> None:
        tokens, bag = read.tokens, read.bag
        joined = self._align(candidates, read, site)
        if not joined:
            self._seeds.append(self._add(_Template(list(tokens), bag, site=site)))
            return
        key, merged = max(joined, key=lambda j: j[1].kept)
        shadow = self._shadows.pop(key, None)
        if shadow is not None:
            key = self._add(shadow)  # a shadow joined is a seed again, being learned
        template = self._learning[key]
        if shadow is None and template.calls == 1 and merged.elements != template.elements:
            # A seed joined is also kept as a seed, once (a shadow): two calls a chain makes
            # one after the other from one value (an entity question, then an action question
            # about the same observation) share that value and, as text, look like one
            # template's two calls; the next call of the first kind then still finds its first.
            self._shadows[self._next] = _Template(
                list(template.elements), template.bag, keys=template.keys, site=template.site
            )
            self._next += 1
            while len(self._shadows) > self.max_shadows:
                self._shadows.popitem(last=False)
        self._learning.move_to_end(key)
        template.calls += 1
        if merged.elements == template.elements:
            if _recurs(merged.values, template.recent):
                # Its slot swallowed fixed text of the template this prompt came from: it
                # would file two templates' calls together. Never frozen; learning starts
                # again from this prompt.
                self._learning.pop(key)
                self._learning_at.discard(key, template)
                self.refused += 1
                self._seeds.append(self._add(_Template(list(tokens), bag, site=site)))
                return
            template.stable += 1
            template.recent.append(tuple(_value(v) for v in merged.values if len(v) >= RUN_WORDS))
            while len(template.recent) > RECENT_VALUES * self.confident_calls:
                template.recent.popleft()
        else:
            self._learning_at.discard(key, template)
            template.elements = merged.elements
            template.bag = merged.bag
            template.stable = 0
            self._learning_at.add(key, template)
        if template.stable >= self.confident_calls and not _constant(
            list(template.recent)[-self.confident_calls :]
        ):
            self._freeze(key, template)

    def _align(
        self, candidates: list[int], read: _Prompt, site: str | None
    ) -> list[tuple[int, _Merged]]:
        """The templates being learned that this prompt may join (its code site's), each with
        their merge; or, when it joins none, the shadows it joins."""
        lasting = [(k, self._learning.get(k)) for k in dict.fromkeys([*candidates, *self._seeds])]
        joined: list[tuple[int, _Merged]] = []
        # A shadow (a seed another prompt joined, ``_learn``) is aligned only when no other
        # template joins: it shares a whole prompt's words, and would rank above the template
        # it began.
        for pool in (lasting, list(self._shadows.items())):
            hopeful: list[tuple[int, int, int, _Template]] = []
            for key, template in pool:
                if template is not None and template.site == site:
                    found = _hope(template, read)
                    if found is not None:
                        hopeful.append((found[0], key, found[1], template))
            # The few that keep most are aligned (a bounded cost for a prompt of no template,
            # whatever the templates held).
            hopeful.sort(key=lambda h: h[:3], reverse=True)
            for _, key, need, template in hopeful[:MAX_ALIGNED]:
                merged = self._joins(template, read, need)
                if merged is not None:
                    joined.append((key, merged))
            if joined:
                break
        return joined

    @staticmethod
    def _joins(template: _Template, read: _Prompt, need: int) -> _Merged | None:
        """The merge of a template being learned and a prompt, when the prompt joins it
        (keeps ``need`` words of it, and the rules of the module documentation)."""
        blocks = read.aligner.blocks(template.elements)
        if _block_words(template.elements, blocks) < need:
            return None  # it could not keep enough: the costly rest of the merge is spared
        merged = _merge(template.elements, read.tokens, blocks)
        if merged.kept < need or merged.apart(read.system):
            return None
        if merged.kept < SHARE * read.bag.total() and _keys(merged.elements) != template.keys:
            return None  # joined by its ends alone, the ends must stay fixed
        return merged

    def _add(self, template: _Template) -> int:
        key = self._next
        self._next += 1
        self._learning[key] = template
        self._learning_at.add(key, template)
        while len(self._learning) > self.max_learning:
            old, gone = self._learning.popitem(last=False)
            self._learning_at.discard(old, gone)
            self.evicted += 1
        return key

    def _freeze(self, key: int, template: _Template) -> None:
        del self._learning[key]
        self._learning_at.discard(key, template)
        self._frozen_at.add(key, template)
        self._supersede(key, template)
        held = _held_values(template.elements)
        if held != template.elements:
            self._frozen_at.discard(key, template)
            template.elements, template.bag = held, _bag(held)
            self._frozen_at.add(key, template)
        frozen = _frozen(template.elements, name_of=self._name)
        digests = {t.frozen.digest for t in self._frozen.values() if t.frozen}
        if frozen is None or frozen.digest in digests:
            # Its fixed text would read as slots in a prompt file (its calls keep passing), or
            # the template is learned already: two equal templates would tie on every prompt.
            self._frozen_at.discard(key, template)
            return
        template.frozen = frozen
        self._frozen[key] = template
        self.learned += 1
        self._dropped.discard(_saved_tokens(template.elements))
        while len(self._frozen) > self.max_templates:
            old, gone = self._frozen.popitem(last=False)
            self._frozen_at.discard(old, gone)
            self._dropped.add(_saved_tokens(gone.elements))
            self.evicted += 1
        self._save()

    def _supersede(self, key: int, template: _Template) -> None:
        """Generalise a template about to be frozen with the frozen ones it differs from only
        a little (``KEEP_SHARE``), which it then replaces: an agent whose calls came in a
        burst froze a template with its name as fixed text, and the next agent's calls made
        another; together they are one template whose name slot partitions its table."""
        head, tail = _keys(template.elements)
        near = self._frozen_at.found([head] if head else [], [tail] if tail else [], loose=False)
        # The few that share most words with it (a bounded cost, as in _learn).
        frozen = [
            (self._frozen[k], k)
            for k in near
            if k in self._frozen and self._frozen[k].site == template.site
        ]
        overlap = [(_shared(template.bag, old.bag), other, old) for old, other in frozen]
        overlap.sort(key=lambda o: (-o[0], o[1]))
        for _, other, old in overlap[:MAX_ALIGNED]:
            merged = _merge(old.elements, template.elements)
            most = max(old.bag.total(), template.bag.total())
            if merged.kept < max(KEEP_SHARE * most, MIN_WORDS):
                continue
            if merged.apart(_SEP in template.elements):
                continue
            if _merge(template.elements, old.elements).lost >= RUN_WORDS:
                continue  # the other way round, one would give up an instruction
            if (
                not names_code(template.site)
                and _keys(merged.elements) != template.keys
                and not (_a_name(template.bag - merged.bag) and _a_name(old.bag - merged.bag))
            ):
                # By the text alone, two templates whose ends differ but by a name are two (an
                # entity question, and an action question about the same observation).
                continue
            del self._frozen[other]
            self._frozen_at.discard(other, old)
            self._dropped.add(_saved_tokens(old.elements))
            self._frozen_at.discard(key, template)
            template.elements = merged.elements
            template.bag = merged.bag
            self._frozen_at.add(key, template)

    @staticmethod
    def _name(digest: str) -> str:
        return f"learned_{digest[:10]}"


def _each_place(
    elements: list[_Element], given: Counter[str], merged: list[_Element]
) -> list[int] | None:
    """Whether ``merged`` is ``elements`` with each place of the one word ``given`` made a
    slot, nothing else changed: the slots (their order in ``merged``) that hold the word
    alone (at least two, of a word held twice or more), else ``None``. (A place beside a slot
    joins it: the word was a chance part of that value.)"""
    if len(given) != 1:
        return None
    ((word, times),) = given.items()
    if elements.count(word) != times:
        return None
    slots: list[bool] = []  # per slot of the merge: whether it holds the word alone
    fused: list[_Element] = []
    for e in elements:
        if e is _GAP or e == word:
            if fused and fused[-1] is _GAP:
                slots[-1] = False
                continue
            slots.append(e == word)
            fused.append(_GAP)
        else:
            fused.append(e)
    if fused != merged:
        return None  # other text changed too
    alone = [k for k, held in enumerate(slots) if held]
    return alone if len(alone) >= min(times, 2) else None


def _hope(template: _Template, read: _Prompt) -> tuple[int, int] | None:
    """Whether a prompt may join a template being learned, by the words both hold (cheap,
    before any alignment): its rank (what it would keep less what it would give up: a
    template of the same agent's other prompt shares its persona, but gives up its
    instructions) and the words a join must keep; ``None`` when it cannot keep enough."""
    bag, words = read.bag, read.bag.total()
    fixed = template.bag.total()
    # A template without a slot has seen one prompt (perhaps again and again): its words are
    # that prompt's, slot values included.
    seed = _GAP not in template.elements
    need = SHARE * max(fixed, words) if seed else KEEP_SHARE * fixed
    need = max(need, SHARE * words, MIN_WORDS)
    # A prompt that begins and ends as a template found in two prompts does (its ends are
    # fixed text, not a first prompt's values) may hold more in its slots than the template
    # holds fixed: a question around a long list of memories.
    head, tail = template.keys
    if not seed and head in read.heads and tail in read.tails:
        need = min(need, max(KEEP_SHARE * fixed, ANCHORED_WORDS))
    # Each word one holds and the other lacks is a word fewer they can share: a bound from the
    # words both hold, each counted once (cheap), before they are counted.
    common = template.bag.keys() & bag.keys()
    both = len(common)
    if min(fixed - (len(template.bag) - both), words - (len(bag) - both)) < need:
        return None
    shared = _shared(bag, template.bag, common)
    return (2 * shared - fixed, math.ceil(need)) if shared >= need else None


def _a_name(words: Collection[str]) -> bool:
    """Whether the words (distinct) are a name's: one to three, each a capitalised word
    ("Eve", "Ada Lee", "Person A")."""
    return 0 < len(words) <= 3 and all(w[:1].isupper() and w.isalnum() for w in words)


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
    digest = probe.digest
    template = probe.model_copy(update={"name": name_of(digest)})
    return _Frozen(template, runs, lead, trail, len(fixed), names, digest)


def _saved_tokens(elements: list[_Element]) -> tuple[str | None, ...]:
    """A template's tokens as a file keeps them: a slot is ``None``."""
    return tuple(e if isinstance(e, str) else None for e in elements)


def _options(
    template: PromptTemplate, values: dict[str, str], agent: str, site: str | None
) -> CacheOptions:
    """A learned template's call, filed as a recognised declared template's is; its code site
    in ``metadata`` (``"site"``), which a recording keeps and a replay learns under."""
    options = CacheOptions(
        category=template.name,
        agent=agent,
        template=template.digest,
        slots=values,
        metadata={"site": site} if site is not None else {},
    )
    if not any(v.strip() for v in values.values()):
        # No slot (or only blank ones): the whole, fixed prompt is what it is found by.
        options = options.model_copy(update={"embed": EmbedMode.FULL})
    return options
