"""Wrong hits at static thresholds and under a wrong-hit budget, on labelled question pairs.

The development set is ``../shared/benchmarks/quora_pairs.jsonl.gz`` (relative to the
repository root; see its README): question pairs ``a``/``b`` labelled duplicate or not. A sample
of pairs is turned into a cache benchmark as that README says: every ``a`` is stored (its answer
names its pair), then every ``b`` is asked through ``CachedLLM`` (online mode, so a miss is
answered and stored like any miss). The answer to ``b`` is its pair's answer when the pair is a
duplicate and an answer of its own when not, so a hit is *correct* when the served answer is
the true one and *wrong* otherwise (its non-duplicate partner, or any other stored question).
Questions joined by duplicate labels, and the same words asked twice, share one answer; two
questions nobody labelled are taken to differ (the labels are incomplete, so a few "wrong" hits
may be right).

Operating points: static cosine thresholds, and ``wrong_hit_budget`` at several δ. The budget
learns as the stream goes (labels from misses, explorations); figures are given over the whole
stream and over the asks after a warm-up. ``explored`` asks were would-be hits also sent to the
LLM (counted as misses: the paid answer is served). Latency is the mean wall time of one hit
and of one miss (the LLM is a fake that answers at once, embeddings are precomputed), so the
difference from a static row is what the budget adds per lookup (a miss also labels its
nearest entry; a miss stores its answer in every row).

Two streams: ``mixed``, the sample as drawn (duplicates and hard non-duplicates), and
``paraphrases``, its duplicate pairs alone (the issue's setting: a wrong hit is then a hit on
another stored question).

With ``--verifier``, operating points that re-score near misses (a nearest entry in the band
``[threshold - band, threshold)``) are added: on the request path (a yes is served as a hit;
under a budget only where the labels of earlier yeses prove it) and, under a budget, off it
(a yes adds the miss's label to the labels of yeses). ``llm`` is
:class:`llmcache.verification.LLMVerifier` on the LLM of ``llmcache.llm.open_llm()`` (the local
server by
default; ``--verifier-model``, else the backend's superior model: a 135M model is no judge);
``oracle`` knows the true answers (the ceiling a perfect verifier would reach, at no cost).
``vf`` counts verifier calls, ``ms/vf`` is one call's mean wall time and ``+ms/look`` the
verifier's time on the request path per lookup: what verification adds to a lookup on average.

Embeddings come from the default local MiniLM model and are kept in the temp directory between
runs. Figures are development figures.

    .venv/bin/python benchmarks/bench_verification.py --pairs 3000 --warmup 1000
    .venv/bin/python benchmarks/bench_verification.py --verifier llm --stream paraphrases
    .venv/bin/python benchmarks/bench_verification.py --verifier llm --stream paraphrases \
        --points "d=0.01 +vf"
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import platform
import random
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from bench_models import header_line, machine_info  # beside this file
from dev_set import QUORA, embed_cached  # beside this file
from numpy.typing import NDArray

from llmcache import CacheConfig, CachedLLM, CacheOptions, Mode, SemanticCache
from llmcache.testing import FakeOpenAI
from llmcache.types import Verdict
from llmcache.verification import LLMVerifier, Verifier

DATA = QUORA
STATIC = (0.80, 0.85, 0.90, 0.95)
BUDGETS = (0.01, 0.02, 0.05)
# Operating points with a verifier: (label, settings). The band reaches down to 0.80, where
# plain cosine still finds the right entry for most paraphrases (issue 12's table).
VERIFIED: tuple[tuple[str, dict[str, Any]], ...] = (
    ("0.95 +vf 0.15", {"threshold": 0.95, "verify_band": 0.15}),
    ("0.90 +vf 0.10", {"threshold": 0.90, "verify_band": 0.10}),
    ("d=0.01 +vf 0.17", {"budget": 0.01, "verify_band": 0.17}),
    ("d=0.01 +vf bg", {"budget": 0.01, "verify_band": 0.17, "verify_path": "background"}),
)

# Makes the verifier of one run from the sample's true answers (only the oracle reads them).
VerifierFactory = Callable[[dict[str, str]], Verifier]


class Timed:
    """A verifier's wall time and calls (the cache counts calls too, but not their time)."""

    def __init__(self, inner: Verifier) -> None:
        self.inner = inner
        self.calls = 0
        self.seconds = 0.0

    def verify(self, query: str, cached: str, *, cosine: float) -> Verdict:
        started = time.perf_counter()
        try:
            return self.inner.verify(query, cached, cosine=cosine)
        finally:
            self.calls += 1
            self.seconds += time.perf_counter() - started


class Oracle:
    """The verifier that knows each question's true answer: the ceiling of verification."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers

    def verify(self, query: str, cached: str, *, cosine: float) -> Verdict:
        return Verdict(same=self.answers.get(query) == self.answers.get(cached, ""))


class Precomputed:
    """The MiniLM vectors of the sample, computed once: the benchmark times the cache, not the
    model."""

    def __init__(self, model_id: str, table: dict[str, NDArray[np.float32]]) -> None:
        self.model_id = model_id
        self.table = table
        self.dim = len(next(iter(table.values())))

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        return np.stack([self.table[t] for t in texts])


def load_pairs(path: Path, n: int, seed: int) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        pairs = [json.loads(line) for line in f]
    # Stripped as the cache strips keywords (its embedding text); a blank question is no prompt.
    pairs = [
        {**p, "a": p["a"].strip(), "b": p["b"].strip()}
        for p in pairs
        if p["a"].strip() and p["b"].strip()
    ]
    return random.Random(seed).sample(pairs, n)


def embeddings(texts: list[str]) -> tuple[str, dict[str, NDArray[np.float32]]]:
    unique = sorted(set(texts))
    model_id, vectors = embed_cached(unique, "verification")
    return model_id, dict(zip(unique, vectors, strict=True))


def _answers(pairs: list[dict[str, Any]]) -> dict[str, str]:
    """The true answer of every question of the sample: questions joined by a duplicate label
    (directly or through others) share one, every other question has its own."""
    parent: dict[str, str] = {}

    def root(q: str) -> str:
        parent.setdefault(q, q)
        while parent[q] != q:
            parent[q] = parent[parent[q]]
            q = parent[q]
        return q

    for pair in pairs:
        a, b = root(pair["a"]), root(pair["b"])
        if pair["duplicate"] and a != b:
            parent[b] = a
    return {q: f"the answer to {root(q)!r}" for q in parent}


def run(
    pairs: list[dict[str, Any]],
    embedder: Precomputed,
    warmup: int,
    *,
    threshold: float | None = None,
    budget: float | None = None,
    verifier: VerifierFactory | None = None,
    verify_band: float = 0.1,
    verify_path: str = "request",
) -> dict[str, Any]:
    # The fake LLM knows each question's true answer by the id in its message. One answer per
    # question, shared by its labelled duplicates and by the same words asked again (a question
    # that is word for word another pair's is the same question, and hitting it is right).
    answers = _answers(pairs)
    truth: dict[str, str] = {}
    for i, pair in enumerate(pairs):
        truth[f"{i}a"] = answers[pair["a"]]
        truth[f"{i}b"] = answers[pair["b"]]

    def answer(request: dict[str, Any]) -> str:
        return truth[request["messages"][0]["content"].rsplit("#", 1)[1]]

    timed = Timed(verifier(answers)) if verifier is not None else None
    config = CacheConfig(
        threshold=threshold if threshold is not None else 0.9,
        wrong_hit_budget=budget,
        verifier=timed,
        verify_band=verify_band,
        verify_path=verify_path,
    )
    with tempfile.TemporaryDirectory() as tmp:
        cache = SemanticCache(Path(tmp) / "c", embedder=embedder, config=config)
        client = CachedLLM(FakeOpenAI(answer), cache=cache)

        def ask(question: str, ident: str, mode: Mode | None = None) -> tuple[str, Any]:
            response, info = client.chat.completions.create_with_info(
                model="gpt-4o-mini",
                messages=[{"role": "user", "content": f"{question}\n#{ident}"}],
                cache=CacheOptions(category="qqp", keywords=[question], mode=mode),
            )
            return response.choices[0].message.content or "", info

        for i, pair in enumerate(pairs):
            ask(pair["a"], f"{i}a", Mode.COLLECT)
        rows: list[tuple[str, bool, float, bool]] = []
        on_path = 0.0  # the verifier's time inside the asks (request path only)
        for i, pair in enumerate(pairs):
            before = timed.seconds if timed is not None and verify_path == "request" else 0.0
            started = time.perf_counter()
            content, info = ask(pair["b"], f"{i}b")
            elapsed = time.perf_counter() - started
            if timed is not None and verify_path == "request":
                on_path += timed.seconds - before
            kind = "miss"
            if info.outcome == "hit":
                kind = "correct" if content == truth[f"{i}b"] else "wrong"
            rows.append((kind, info.explored, elapsed, info.outcome == "hit"))
        # Off the path, what is still queued is verified before the figures are read (or
        # dropped and counted when it takes longer than this).
        cache.wait_for_verifications(timeout=600)
        stats = cache.stats().tables[0]
        cache.close()

    def tally(part: list[tuple[str, bool, float, bool]]) -> dict[str, Any]:
        counts = {k: sum(r[0] == k for r in part) for k in ("correct", "wrong", "miss")}
        hits = counts["correct"] + counts["wrong"]
        return {
            **counts,
            "explored": sum(r[1] for r in part),
            "wrong_rate": counts["wrong"] / hits if hits else 0.0,
            "ms_hit": 1000 * float(np.mean([r[2] for r in part if r[3]] or [np.nan])),
            "ms_miss": 1000 * float(np.mean([r[2] for r in part if not r[3]] or [np.nan])),
        }

    calls = timed.calls if timed is not None else 0
    return {
        "all": tally(rows),
        "after": tally(rows[warmup:]),
        "threshold": stats.threshold_in_force if budget is not None else threshold,
        "labels": stats.labels,
        "vf_calls": calls,
        "vf_yes": stats.verified_yes,
        "vf_dropped": stats.verify_dropped,
        # The labels of the verifier's yeses (answers compared) and, under a budget, the cosine
        # a yes must reach to be served.
        "vf_labels": stats.verified_labels,
        "vf_wrong": stats.verified_labels_wrong,
        "vf_threshold": stats.verified_threshold,
        "ms_vf": 1000 * timed.seconds / calls if timed is not None and calls else float("nan"),
        "ms_added": 1000 * on_path / len(rows) if rows else 0.0,
    }


def report(
    name: str,
    pairs: list[dict[str, Any]],
    embedder: Precomputed,
    warmup: int,
    verifier: VerifierFactory | None = None,
    only: str | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    duplicates = sum(p["duplicate"] for p in pairs)
    print(f"\n{name}: {len(pairs)} pairs ({duplicates} duplicates), warm-up {warmup} asks")
    header = (
        f"{'operating point':<15} {'thresh':>6} | {'correct':>7} {'wrong':>5} {'miss':>5} "
        f"{'wrong%':>6} {'expl':>4} | after warm-up {'correct':>7} {'wrong':>5} {'miss':>5} "
        f"{'wrong%':>6} {'expl':>4} | {'ms/hit':>6} {'ms/miss':>7}"
    )
    if verifier is not None:
        header += (
            f" | {'vf':>5} {'yes':>5} {'drop':>4} {'ms/vf':>7} {'+ms/look':>8} | "
            f"{'yes lab':>7} {'wrong':>5} {'y-thr':>6}"
        )
    print(header)
    print("-" * len(header))
    points: list[tuple[str, dict[str, Any]]] = [
        (f"cos >= {t:.2f}", {"threshold": t}) for t in STATIC
    ] + [(f"budget d={d:.2f}", {"budget": d}) for d in BUDGETS]
    if verifier is not None:
        points += [(label, {**kwargs, "verifier": verifier}) for label, kwargs in VERIFIED]
    if only is not None:
        points = [(label, kwargs) for label, kwargs in points if only in label]
    results: list[tuple[str, dict[str, Any]]] = []
    for label, kwargs in points:
        result = run(pairs, embedder, warmup, **kwargs)
        results.append((label, result))
        a, w = result["all"], result["after"]
        line = (
            f"{label:<15} {result['threshold']:>6.3f} | {a['correct']:>7} {a['wrong']:>5} "
            f"{a['miss']:>5} {100 * a['wrong_rate']:>5.1f}% {a['explored']:>4} | "
            f"{'':>13} {w['correct']:>7} {w['wrong']:>5} {w['miss']:>5} "
            f"{100 * w['wrong_rate']:>5.1f}% {w['explored']:>4} | "
            f"{a['ms_hit']:>6.2f} {a['ms_miss']:>7.2f}"
        )
        if verifier is not None and "verifier" not in kwargs:
            line += f" | {'-':>5} {'-':>5} {'-':>4} {'-':>7} {'-':>8} | {'-':>7} {'-':>5} {'-':>6}"
        elif verifier is not None:
            vthr = result["vf_threshold"]
            line += (
                f" | {result['vf_calls']:>5} {result['vf_yes']:>5} {result['vf_dropped']:>4} "
                f"{result['ms_vf']:>7.1f} {result['ms_added']:>8.2f} | "
                f"{result['vf_labels']:>7} {result['vf_wrong']:>5} "
                f"{'-' if vthr is None else f'{vthr:.3f}':>6}"
            )
        print(line)
        sys.stdout.flush()
    return results


def plot(streams: dict[str, list[tuple[str, dict[str, Any]]]], path: Path, title: str) -> None:
    """Wrong-hit rate against hit rate, one panel per stream: static thresholds as a curve,
    budgets and verified operating points as labelled markers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(streams), figsize=(6 * len(streams), 4.6), squeeze=False)
    for ax, (name, results) in zip(axes[0], streams.items(), strict=True):
        static = [(lbl, r["all"]) for lbl, r in results if lbl.startswith("cos")]
        asks = {lbl: sum(r["all"][k] for k in ("correct", "wrong", "miss")) for lbl, r in results}

        def xy(
            label: str, tally: dict[str, Any], asks: dict[str, int] = asks
        ) -> tuple[float, float]:
            hits = tally["correct"] + tally["wrong"]
            return 100 * hits / asks[label], 100 * tally["wrong_rate"]

        if static:
            points = [xy(lbl, t) for lbl, t in static]
            ax.plot(*zip(*points, strict=True), "o-", color="tab:gray", label="static threshold")
            for (lbl, _), (x, y) in zip(static, points, strict=True):
                ax.annotate(lbl.removeprefix("cos >= "), (x, y), fontsize=8, xytext=(4, 4),
                            textcoords="offset points")  # fmt: skip
        # Points that fall on one spot (every budget that served nothing sits at 0, 0) share
        # one label.
        spots: dict[tuple[float, float], list[str]] = {}
        for lbl, r in results:
            if lbl.startswith("cos"):
                continue
            x, y = xy(lbl, r["all"])
            verified = "vf" in lbl
            ax.plot(
                x,
                y,
                "D" if verified else "s",
                color="tab:orange" if verified else "tab:blue",
                label="with a verifier" if verified else "wrong-hit budget",
            )
            # Within a point of each other on both axes counts as one spot.
            spot = next((k for k in spots if abs(k[0] - x) < 1 and abs(k[1] - y) < 1), (x, y))
            spots.setdefault(spot, []).append(lbl)
        for (x, y), labels in spots.items():
            ax.annotate("\n".join(labels), (x, y), fontsize=7, xytext=(5, 3),
                        textcoords="offset points", va="bottom")  # fmt: skip
        handles, names = ax.get_legend_handles_labels()
        unique = dict(zip(names, handles, strict=True))
        ax.set_xlabel("hits, % of lookups")
        ax.set_ylabel("wrong hits, % of hits")
        ax.set_title(f"{name} ({asks[results[0][0]]} lookups)")
        ax.grid(alpha=0.3)
        ax.legend(unique.values(), unique.keys(), loc="upper left", fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"figure: {path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--pairs", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--verifier",
        choices=("none", "llm", "oracle"),
        default="none",
        help="add operating points that verify near misses (llm: llmcache.llm.open_llm())",
    )
    parser.add_argument(
        "--verifier-model",
        help="the LLM verifier's model (default: the backend's superior model)",
    )
    parser.add_argument(
        "--stream", choices=("both", "mixed", "paraphrases"), default="both", help="which streams"
    )
    parser.add_argument(
        "--figure", type=Path, help="also draw wrong-hit rate against hit rate to this PNG"
    )
    parser.add_argument(
        "--points", help="only the operating points whose label contains this (e.g. 'd=0.01 +vf')"
    )
    args = parser.parse_args()
    if not args.data.exists():
        print(
            f"skipped: the development set is absent ({args.data}); it lives in "
            "../shared/benchmarks/ beside the repository"
        )
        return 0
    pairs = load_pairs(args.data, args.pairs, args.seed)
    model_id, table = embeddings([p[k] for p in pairs for k in ("a", "b")])
    embedder = Precomputed(model_id, table)
    print(header_line(machine_info()))
    print(
        f"bench_verification: Python {platform.python_version()}; {model_id}; "
        f"sample seed {args.seed}. Development figures."
    )
    with contextlib.ExitStack() as stack:
        verifier: VerifierFactory | None = None
        if args.verifier == "oracle":
            verifier = Oracle
        elif args.verifier == "llm":
            from llmcache.llm import open_llm

            conn = stack.enter_context(open_llm())
            judge = LLMVerifier(conn.client, args.verifier_model or conn.backend.superior_model)
            print(f"verifier: LLMVerifier, model {judge.model} at {conn.base_url}")

            def verifier(answers: dict[str, str]) -> Verifier:
                return judge

        streams: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        if args.stream in ("both", "mixed"):
            streams["mixed"] = report("mixed", pairs, embedder, args.warmup, verifier, args.points)
        paraphrases = [p for p in pairs if p["duplicate"]]
        if args.stream in ("both", "paraphrases"):
            warmup = min(args.warmup, len(paraphrases) // 3)
            streams["paraphrases"] = report(
                "paraphrases", paraphrases, embedder, warmup, verifier, args.points
            )
    if args.figure is not None and streams:
        plot(
            streams,
            args.figure,
            f"bench_verification {datetime.now(timezone.utc):%Y-%m-%d}, {model_id}, "
            f"verifier {args.verifier}, sample seed {args.seed}: development figures",
        )
    print(
        "\nthresh: the static threshold, or the budget's learned one at the end of the stream "
        "(1.000: exact repeats only); expl: would-be hits explored (paid, served as misses)"
        + (
            "; vf: verifier calls, yes: its yeses, drop: dropped unverified (off the path), "
            "ms/vf: one call, +ms/look: verifier time on the request path per lookup; yes lab / "
            "wrong: labels of the verifier's yeses (answers compared) and how many were wrong, "
            "y-thr: the cosine a yes must reach to be served under a budget (2.000: none is)"
            if args.verifier != "none"
            else ""
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
