"""How often a table whose true excess is over the budget gets a threshold proven anyway.

A table re-decides after every label, at every bin edge that holds labels, so a bound that is
loose at small counts is met by chance early. For a model that samples, the credit for its
self-disagreement made that happen in about half of the streams below, after a handful of
labels. The rules on that credit (``CREDIT_MIN_PAIRS`` pairs and ``CREDIT_MIN_LABELS`` labels
before any, and a credited bound proving at one-sided 99%) bring it close to what a single
one-sided 95% test promises.

Run as a script for the whole table, with and without those rules::

    python tests/test_budget_false_proof.py [--streams 200] [--labels 300]
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Iterator
from contextlib import contextmanager
from statistics import median

import llmcache._budget as budget_module
from llmcache._budget import Labels, decide

BUDGET = 0.05


def _first_proof(seed: int, wrong: float, disagree: float, labels: int) -> int | None:
    """The label after which a table is first proven, or None. Cosines are uniform in
    [0.8, 1) and every label is wrong with probability ``wrong`` whatever its cosine (the
    excess is the same at every threshold); every other label comes with a pair of fresh
    answers that differ with probability ``disagree``."""
    rng = random.Random(seed)
    table = Labels()
    for i in range(labels):
        table.add(rng.uniform(0.8, 1.0), rng.random() >= wrong)
        if i % 2 == 0:
            table.add_pair(rng.random() >= disagree)
        if decide(table, BUDGET).proven:
            return i + 1
    return None


def _proven(wrong: float, disagree: float, *, streams: int, labels: int) -> list[int]:
    found = (_first_proof(seed, wrong, disagree, labels) for seed in range(streams))
    return [n for n in found if n is not None]


@contextmanager
def _without_credit_rules() -> Iterator[None]:
    """The bound as first written: credit from the first pair and label, proving at 95%."""
    names = ("CREDIT_MIN_PAIRS", "CREDIT_MIN_LABELS", "_Z_CREDITED")
    saved = [getattr(budget_module, name) for name in names]
    budget_module.CREDIT_MIN_PAIRS = budget_module.CREDIT_MIN_LABELS = 0
    budget_module._Z_CREDITED = budget_module._Z_ONE_SIDED
    try:
        yield
    finally:
        for name, value in zip(names, saved, strict=True):
            setattr(budget_module, name, value)


def test_a_sampling_table_over_budget_is_rarely_proven() -> None:
    # 15 points over a 5-point budget at every threshold, at 40% self-disagreement; and
    # 10 points over at 70%.
    assert len(_proven(0.55, 0.40, streams=60, labels=200)) <= 6  # 10% of 60
    assert len(_proven(0.80, 0.70, streams=60, labels=200)) <= 6
    with _without_credit_rules():  # what the rules are for
        assert len(_proven(0.55, 0.40, streams=60, labels=200)) >= 18


def test_a_sampling_table_within_budget_still_earns_its_threshold() -> None:
    # 40% self-disagreement, 30% wrong: 10 points *under* the model's own rate.
    assert len(_proven(0.30, 0.40, streams=30, labels=300)) >= 24  # 80% of 30


def test_a_deterministic_table_is_untouched_by_the_credit_rules() -> None:
    # No pair ever disagrees: no credit, with or without the rules on it.
    with_rules = _proven(0.02, 0.0, streams=20, labels=150)
    with _without_credit_rules():
        assert _proven(0.02, 0.0, streams=20, labels=150) == with_rules


def test_too_few_pairs_to_prove_are_still_enough_to_keep_a_table_open() -> None:
    # 4 of 10 labels wrong near the top, and the model disagrees with itself in 5 of 10 pairs:
    # too little to prove a threshold, and no evidence of an excess either. Read without its
    # credit, the 40% wrong rate alone would show the table over budget and close it.
    table = Labels()
    for i in range(10):
        table.add(0.99, ok=i >= 4)
        table.add_pair(same=i >= 5)
    decision = decide(table, BUDGET)
    assert not decision.proven
    assert decision.threshold == budget_module.STRICT_THRESHOLD


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--labels", type=int, default=300)
    args = parser.parse_args()
    cases = [
        (0.0, 0.08),
        (0.0, 0.10),
        (0.4, 0.55),
        (0.4, 0.45),
        (0.7, 0.8),
        (0.4, 0.40),
        (0.4, 0.30),
    ]
    print(f"δ = {BUDGET}, {args.streams} streams of {args.labels} labels, a pair every 2nd label")
    print("| self-disagreement | wrong | excess | rule | proven | median labels at first proof |")
    print("|---|---|---|---|---|---|")
    for disagree, wrong in cases:
        for rule in ("as first written", "with the credit rules"):
            if rule == "as first written":
                with _without_credit_rules():
                    firsts = _proven(wrong, disagree, streams=args.streams, labels=args.labels)
            else:
                firsts = _proven(wrong, disagree, streams=args.streams, labels=args.labels)
            at = f"{median(firsts):g}" if firsts else "-"
            print(
                f"| {disagree:.2f} | {wrong:.2f} | {wrong - disagree:+.2f} | {rule} "
                f"| {len(firsts) / args.streams:.1%} | {at} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
