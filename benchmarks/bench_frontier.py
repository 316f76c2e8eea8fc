"""Where the frontier is narrow: which near neighbours of the gpt-4o-mini bed serve a wrong
answer, and what beyond one cosine threshold tells them apart (issue: a wider frontier;
docs/frontier.md).

Four tables, on ``../shared/benchmarks/park_4omini_dev/`` (relative to the repository root;
skipped with a message when absent) and the Quora pairs beside it:

1. **Where the wrong hits are**: all eight agents replayed through the real cache at the
   static default (0.9, keyword mode, "within 1 point"), every served answer sorted by the kind
   of memory its query is (a conversation, "… is conversing about …"; a short one, four words
   or fewer; a planning thought; any other event), with the answers to the very same prompt
   among them.
2. **Rules learned on four agents, reported on the other four**, on *nearest-neighbour labels*:
   each call's nearest earlier call of the same agent (cosine of their keyword embeddings) and
   whether that call's recorded rating is within 1 point of this call's. This is not a replay
   (a served call would not be stored, and a replay would serve from what is); it compares
   rules on the same labels. Each rule serves a call when its nearest earlier call is the very
   same prompt, or when the rule accepts the neighbour; its threshold or cut-off is chosen on
   the tune agents as the one that serves most with an expected excess of at most ``--delta``
   points there (answers to the very same prompt counted at 0, as ``tune`` counts them). Rules:
   one static threshold; a threshold per length of the query (short, under 8 words; medium,
   under 20; long); the first two words exact (``CacheConfig.lead_words``) and a threshold; a
   logistic acceptability model of the cosine, the query's length, how many words the two
   texts do not share, and whether a name or a number is among them.
3. **The issue's table through the real cache**: the check agents replayed at static
   thresholds, with the first two words exact, and under the file ``tune`` writes from the tune
   agents, with one threshold (``--lead-words 0``) and with the leading words tried (its
   default), δ = 5 points as ``bench_savings.py``.
4. **Quora question pairs** (``--quora-pairs``, a pair's cosine, not a replay): at each static
   threshold's count of non-duplicates served, how many duplicates one threshold serves and
   how many the first two words exact serve at no more wrong.

    python benchmarks/bench_frontier.py            # 2 to 3 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_savings import render, row, tuned
from dev_set import QUORA, embed_cached
from park_calls import BED_CHECK_AGENTS, BED_TUNE_AGENTS, bed_calls, bed_embedder

from llmcache import CacheConfig
from llmcache.embedders import StoredEmbedder
from llmcache.replay import ReplayCall, replay

_WORD = re.compile(r"[A-Za-z0-9']+")
EXACT = 0.999
LEAD = 2  # the leading words tune tries (besides none)


def kind(text: str) -> str:
    if "conversing about" in text:
        return "a conversation"
    if len(text.split()) <= 4:
        return "short (4 words or fewer)"
    if text.lower().startswith(("i ", "my ", "planning", "i'm")) or "plan" in text.lower():
        return "planning thoughts"
    return "other events"


def where_wrong(embedder: StoredEmbedder) -> str:
    calls = bed_calls()
    report = replay(calls, CacheConfig(), embedder=embedder)
    rows: dict[str, list[int]] = {}
    for r in report.results:
        row = rows.setdefault(kind(r.query), [0, 0, 0, 0, 0])
        row[0] += 1
        if r.served is not None:
            row[1] += 1
            row[2] += r.identical
            row[3] += not r.acceptable
            row[4] += (not r.acceptable) and r.identical
    lines = [
        f"{'kind of memory':<28} {'calls':>6} {'served':>7} {'same prompt':>12} {'wrong':>6} "
        f"{'wrong, same prompt':>19}"
    ]
    for name, (n, served, same, wrong, wrong_same) in sorted(rows.items(), key=lambda i: -i[1][0]):
        lines.append(f"{name:<28} {n:>6} {served:>7} {same:>12} {wrong:>6} {wrong_same:>19}")
    return "\n".join(lines)


@dataclass
class Label:
    agent: str
    query: str
    near: str
    cosine: float
    same_prompt: bool
    wrong: bool


def labels(embedder: StoredEmbedder, calls: Sequence[ReplayCall]) -> list[Label]:
    out = []
    by_agent: dict[str, list[ReplayCall]] = {}
    for call in calls:
        by_agent.setdefault(call.agent, []).append(call)
    for agent, mine in by_agent.items():
        texts = [c.keywords[0] if c.keywords else "" for c in mine]
        vectors = embedder.embed(texts)
        for i in range(1, len(mine)):
            earlier = [j for j in range(i) if mine[j].category == mine[i].category]
            if not earlier:
                continue
            sims = vectors[earlier] @ vectors[i]
            j = earlier[int(np.argmax(sims))]
            out.append(
                Label(
                    agent=agent,
                    query=texts[i],
                    near=texts[j],
                    cosine=float(np.max(sims)),
                    same_prompt=mine[j].messages == mine[i].messages,
                    wrong=abs(int(mine[i].answer) - int(mine[j].answer)) > 1,
                )
            )
    return out


def features(label: Label) -> list[float]:
    q, n = _WORD.findall(label.query), _WORD.findall(label.near)
    differ = list(
        (
            (Counter(map(str.lower, q)) - Counter(map(str.lower, n)))
            + (Counter(map(str.lower, n)) - Counter(map(str.lower, q)))
        ).elements()
    )
    names = {w.lower() for w in q + n if w[:1].isupper()}
    return [
        1.0,
        10 * (1 - label.cosine),
        math.log(max(len(q), 1)),
        math.log1p(len(differ)),
        float(any(w in names for w in differ)),
        float(any(ch.isdigit() for w in differ for ch in w)),
    ]


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = 1.0) -> np.ndarray:
    w = np.zeros(x.shape[1])
    ridge = l2 * np.diag([0.0] + [1.0] * (x.shape[1] - 1))
    for _ in range(50):  # Newton's method: a few steps converge on these few features
        p = 1 / (1 + np.exp(-x @ w))
        gradient = x.T @ (p - y) + ridge @ w
        hessian = x.T @ (x * (p * (1 - p))[:, None]) + ridge
        w -= np.linalg.solve(hessian, gradient)
    return w


Rule = Callable[[Label, float], bool]


def figures(
    part: Sequence[Label], accept: Callable[[Label], bool], own: float
) -> tuple[int, int, float]:
    """Served, of them near neighbours, and the expected excess in points: the near
    neighbours' wrong rate over ``own`` (the same prompt's), by their share of the served."""
    served = [x for x in part if x.same_prompt or accept(x)]
    near = [x for x in served if not x.same_prompt]
    if not near:
        return len(served), 0, 0.0
    excess = sum(x.wrong for x in near) / len(near) - own
    return len(served), len(near), 100 * excess * len(near) / len(served)


def choose(
    part: Sequence[Label], rule: Rule, settings: Sequence[float], own: float, delta: float
) -> float:
    best, most = settings[-1], -1
    for s in settings:
        served, _, expected = figures(part, lambda x, s=s: rule(x, s), own)
        if expected <= delta and served > most:
            best, most = s, served
    return best


def frontier(embedder: StoredEmbedder, delta: float) -> str:
    tune_labels = labels(embedder, bed_calls(BED_TUNE_AGENTS))
    check_labels = labels(embedder, bed_calls(BED_CHECK_AGENTS))

    def own(part: Sequence[Label]) -> float:
        same = [x for x in part if x.same_prompt]
        return sum(x.wrong for x in same) / len(same)

    grid = [round(0.8 + 0.01 * i, 2) for i in range(20)] + [EXACT]
    rows = []
    for t in (EXACT, 0.95, 0.9):
        rows.append(
            (f"static {t}", figures(check_labels, lambda x, t=t: x.cosine >= t, own(check_labels)))
        )
    static: Rule = lambda x, t: x.cosine >= t  # noqa: E731
    t = choose(tune_labels, static, grid, own(tune_labels), delta)
    rows.append(
        (
            f"one threshold, learned ({t})",
            figures(check_labels, lambda x: static(x, t), own(check_labels)),
        )
    )

    def region(x: Label) -> int:
        words = len(x.query.split())
        return 0 if words < 8 else 1 if words < 20 else 2

    chosen = []
    for r in range(3):
        part = [x for x in tune_labels if region(x) == r]
        chosen.append(choose(part, static, grid, own(tune_labels), delta))
    rows.append(
        (
            f"a threshold per length, learned {tuple(chosen)}",
            figures(check_labels, lambda x: x.cosine >= chosen[region(x)], own(check_labels)),
        )
    )
    fit = [x for x in tune_labels if not x.same_prompt and x.cosine >= 0.8]
    w = fit_logistic(np.array([features(x) for x in fit]), np.array([float(x.wrong) for x in fit]))

    def model(x: Label, cut: float) -> bool:
        return x.cosine >= 0.8 and float(1 / (1 + np.exp(-np.array(features(x)) @ w))) <= cut

    def lead(x: Label, t: float) -> bool:
        return x.cosine >= t and x.query.split()[:LEAD] == x.near.split()[:LEAD]

    t_lead = choose(tune_labels, lead, grid, own(tune_labels), delta)
    rows.append(
        (
            f"the first {LEAD} words exact, threshold learned ({t_lead})",
            figures(check_labels, lambda x: lead(x, t_lead), own(check_labels)),
        )
    )
    cuts = [round(0.05 * i, 2) for i in range(1, 11)]
    cut = choose(tune_labels, model, sorted(cuts, reverse=True), own(tune_labels), delta)
    rows.append(
        (
            f"acceptability model, learned (p(wrong) <= {cut})",
            figures(check_labels, lambda x: model(x, cut), own(check_labels)),
        )
    )
    n = len(check_labels)
    lines = [
        f"check agents' {n} labelled calls; rules learned on the tune agents for an expected "
        f"excess <= {delta:g} points",
        f"{'rule':<52} {'served':>7} {'near':>5} {'expected excess':>16}",
    ]
    for name, (served, near, expected) in rows:
        lines.append(f"{name:<52} {served:>7} {near:>5} {expected:>+16.1f}")
    lines.append(f"acceptability model's weights: {np.round(w, 2).tolist()}")
    return "\n".join(lines)


def replayed(embedder: StoredEmbedder, seed: int) -> str:
    """The issue's table through the real cache: the check agents' calls replayed at static
    thresholds, with the first words exact, and under the file ``tune`` writes from the tune
    agents with and without leading words to try (5 points, as ``bench_savings.py``)."""
    calls = bed_calls(BED_CHECK_AGENTS)
    settings = [
        ("exact repeats only (0.999)", CacheConfig(threshold=EXACT)),
        ("static 0.95", CacheConfig(threshold=0.95)),
        ("static default (0.9)", CacheConfig(threshold=0.9)),
        *(
            (f"the first {LEAD} words exact, {t}", CacheConfig(threshold=t, lead_words=LEAD))
            for t in (0.85, 0.88, 0.9)
        ),
    ]
    rows = [
        row(name, replay(calls, config, embedder=embedder, seed=seed).overall)
        for name, config in settings
    ]
    rows.append(
        row("the file tune writes, one threshold (before)", tuned(embedder, 0.05, seed, (0,)))
    )
    rows.append(
        row(
            f"the file tune writes, 0 or {LEAD} words tried", tuned(embedder, 0.05, seed, (0, LEAD))
        )
    )
    return f"{len(calls)} calls of the check agents, keyword mode, within 1 point\n" + render(rows)


def quora(pairs: int, seed: int) -> str:
    """Labelled Quora question pairs (a pair, not a replay): at each rule's threshold, the
    duplicates it would serve and the non-duplicates it would serve (wrong), compared at the
    static threshold's wrong count."""
    with gzip.open(QUORA, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    random.Random(seed).shuffle(rows)
    rows = [r for r in rows if r["a"].strip() and r["b"].strip()][:pairs]
    _, vectors = embed_cached([t for r in rows for t in (r["a"], r["b"])], "frontier")
    a, b = vectors[0::2], vectors[1::2]
    cosines = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    same_lead = np.array(
        [r["a"].lower().split()[:LEAD] == r["b"].lower().split()[:LEAD] for r in rows]
    )
    duplicate = np.array([bool(r["duplicate"]) for r in rows])
    lines = [
        f"{len(rows)} labelled pairs ({int(duplicate.sum())} duplicates): duplicates served at "
        "equal wrong (non-duplicates served)",
        f"{'static threshold':>17} {'wrong':>6} {'duplicates, one threshold':>26} "
        f"{f'with the first {LEAD} words exact':>30}",
    ]
    for t in (0.95, 0.9, 0.85, 0.8):
        wrong = int(np.sum((cosines >= t) & ~duplicate))
        served = int(np.sum((cosines >= t) & duplicate))
        # The lead rule's loosest threshold with at most as many wrong.
        best = 0
        for u in np.arange(0.5, 1.0, 0.005):
            passed = (cosines >= u) & same_lead
            if np.sum(passed & ~duplicate) <= wrong:
                best = max(best, int(np.sum(passed & duplicate)))
        lines.append(f"{t:>17} {wrong:>6} {served:>26} {best:>30}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delta", type=float, default=2.0, help="points (2)")
    parser.add_argument("--embeddings", type=Path, help="keep the embeddings in this directory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quora-pairs", type=int, default=5000, help="labelled pairs (5000)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    embedder = bed_embedder("bench_frontier", args.embeddings)
    if embedder is None:
        return 2
    print("where the wrong hits are: all eight agents at the static default (0.9), replayed")
    print(where_wrong(embedder))
    print()
    print(frontier(embedder, args.delta))
    print()
    print("through the real cache, check agents:")
    print(replayed(embedder, args.seed))
    print()
    if QUORA.exists():
        print(quora(args.quora_pairs, args.seed))
    else:
        print(f"(no Quora pairs at {QUORA.name}: skipped)")
    embedder.save()
    print(f"\n{time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
