"""Embedder throughput and latency: the local MiniLM (int8 ONNX) against the hash test double.

    python benchmarks/bench_embedder.py [--threads N] [--texts N] [--latency-samples N]
                                        [--callers 8]

Measures the model's load time, throughput (texts/s) on short prompts (~8 words, like the
thesis's keyword strings) and on ~200-token texts (like full-mode prompts) at several call
batch sizes, and the p50/p99 latency of embedding one short text. Texts are all distinct and
generated from a fixed seed, so runs are comparable.

Then concurrent callers: ``--callers`` threads each embed one short text per call (as agents
asking at once do), through the model directly and through ``BatchingEmbedder``; the ratio of
the two throughputs, measured in one run, is what micro-batching buys.
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from bench_models import header_line, machine_info  # beside this file

from llmcache.embedders import BatchingEmbedder, Embedder, MiniLMEmbedder
from llmcache.testing import HashEmbedder

NAMES = [
    "Isabella Rodriguez",
    "Klaus Mueller",
    "Maria Lopez",
    "Liam Oliver",
    "Sam Moore",
    "Ayesha Khan",
    "Tom Moreno",
    "Yuriko Yamamoto",
]
VERBS = [
    "is idle at",
    "is reading in",
    "is cooking in",
    "is cleaning",
    "is walking to",
    "is talking in",
    "is sleeping in",
    "is writing at",
]
PLACES = [
    "Hobbs Cafe",
    "the library",
    "Victoria Park",
    "the kitchen",
    "Johnson Park",
    "the pharmacy",
    "the dorm room",
    "the town hall",
]
FILLER_TEXT = (
    "planned the day carefully, remembered a conversation from yesterday about the "
    "upcoming election, noticed that the stove was still on, and decided to invite a "
    "neighbour to the Valentine's Day party"
)
FILLER = FILLER_TEXT.split(" ")


def short_texts(n: int, rng: random.Random) -> list[str]:
    """~8-word observation strings, each distinct."""
    return [
        f"{rng.choice(NAMES)} {rng.choice(VERBS)} {rng.choice(PLACES)} at hour {i}"
        for i in range(n)
    ]


def long_texts(n: int, rng: random.Random) -> list[str]:
    """~200-word-piece texts, each distinct."""
    out = []
    for i in range(n):
        words = [f"Day {i}:"]
        while len(words) < 150:
            words += [rng.choice(NAMES), *rng.sample(FILLER, 12), rng.choice(PLACES) + "."]
        out.append(" ".join(words))
    return out


def mean_word_pieces(texts: Sequence[str]) -> float:
    from tokenizers import Tokenizer

    path = Path(__file__).resolve().parents[1] / "llmcache" / "data" / "minilm-tokenizer.json"
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return statistics.fmean(len(e.ids) for e in tokenizer.encode_batch(list(texts)))


def throughput(embedder: Embedder, texts: list[str], batch: int) -> float:
    """Texts per second when the caller hands over ``batch`` texts per call."""
    embedder.embed(texts[:batch])  # warm-up: first-run allocations are not steady state
    start = time.perf_counter()
    for i in range(0, len(texts), batch):
        embedder.embed(texts[i : i + batch])
    return len(texts) / (time.perf_counter() - start)


def one_text(embedder: Embedder) -> Callable[[str], object]:
    return lambda text: embedder.embed([text])


def latencies_ms(embed_one: Callable[[str], object], texts: list[str]) -> tuple[float, float]:
    embed_one(texts[0])
    samples = []
    for text in texts:
        start = time.perf_counter()
        embed_one(text)
        samples.append((time.perf_counter() - start) * 1000)
    p50, p99 = np.percentile(samples, [50, 99])
    return float(p50), float(p99)


def concurrent_throughput(embedder: Embedder, texts: list[str], callers: int) -> float:
    """Texts per second when ``callers`` threads each embed their share one text per call."""
    shares = [texts[i::callers] for i in range(callers)]
    start_line = threading.Barrier(callers + 1)

    def caller(share: list[str]) -> None:
        start_line.wait()
        for text in share:
            embedder.embed([text])

    threads = [threading.Thread(target=caller, args=(share,)) for share in shares]
    for t in threads:
        t.start()
    start_line.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    return len(texts) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None, help="onnxruntime intra-op threads")
    parser.add_argument("--texts", type=int, default=256, help="texts per throughput run")
    parser.add_argument("--latency-samples", type=int, default=300)
    parser.add_argument("--batch-sizes", default="1,32,64")
    parser.add_argument("--callers", type=int, default=8, help="threads asking at once")
    args = parser.parse_args()
    batches = [int(b) for b in args.batch_sizes.split(",")]

    rng = random.Random(0)
    short = short_texts(args.texts, rng)
    long = long_texts(max(args.texts // 2, max(batches)), rng)
    one_by_one = short_texts(args.latency_samples, random.Random(1))

    start = time.perf_counter()
    minilm = MiniLMEmbedder(intra_op_threads=args.threads)
    minilm.load()
    first_load = time.perf_counter() - start
    start = time.perf_counter()
    MiniLMEmbedder(intra_op_threads=args.threads).load()
    second_load = time.perf_counter() - start

    print(header_line(machine_info()))
    print(
        f"{platform.python_implementation()} "
        f"{platform.python_version()}; MiniLM intra-op threads: {minilm.intra_op_threads}"
    )
    print(
        f"short texts: {len(short)}, mean {statistics.fmean(len(t.split()) for t in short):.1f}"
        f" words / {mean_word_pieces(short):.0f} word pieces"
    )
    print(f"long texts:  {len(long)}, mean {mean_word_pieces(long):.0f} word pieces")
    print(f"MiniLM load: {first_load:.2f} s first (incl. imports), {second_load:.2f} s again")
    print()
    header = f"{'embedder':<30} {'texts':<6} " + " ".join(f"{'b=' + str(b):>10}" for b in batches)
    print(header + "   (texts/s)")
    print("-" * len(header))
    results: dict[str, dict[str, list[float]]] = {}
    for embedder in (minilm, HashEmbedder()):
        rows: dict[str, list[float]] = {}
        for kind, texts in (("short", short), ("~200t", long)):
            rows[kind] = [throughput(embedder, texts, b) for b in batches]
            cells = " ".join(f"{v:>10.0f}" for v in rows[kind])
            print(f"{embedder.model_id:<30} {kind:<6} {cells}")
        results[embedder.model_id] = rows
    print()
    for embedder in (minilm, HashEmbedder()):
        p50, p99 = latencies_ms(one_text(embedder), one_by_one)
        print(f"{embedder.model_id:<30} one short text: p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    m = results[minilm.model_id]
    print()
    print(
        f"MiniLM batching gain (short, b={batches[-1]} vs b={batches[0]}): "
        f"{m['short'][-1] / m['short'][0]:.1f}x; short/long speed ratio at b={batches[-1]}: "
        f"{m['short'][-1] / m['~200t'][-1]:.1f}x"
    )
    print()
    crowd = short_texts(args.texts, random.Random(2))
    concurrent_throughput(minilm, crowd[: args.callers * 2], args.callers)  # warm-up
    alone = concurrent_throughput(minilm, crowd, args.callers)
    batching = BatchingEmbedder(minilm)
    together = concurrent_throughput(batching, crowd, args.callers)
    print(
        f"{args.callers} callers, one short text per call: {alone:.0f} texts/s each on their "
        f"own, {together:.0f} texts/s through BatchingEmbedder ({together / alone:.1f}x; "
        f"{batching.texts / max(batching.calls, 1):.1f} texts per model call)"
    )


if __name__ == "__main__":
    main()
