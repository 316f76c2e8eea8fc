"""Templates learned from the traffic: the time to learn from and file one prompt, with 1,000
learned templates, and the memory the learner holds.

Builds N synthetic templates (prompts of about 0.5-1.5 KB: instructions of 40-160 words of
their own, the agent's name in one or two slots, an observation and a time; a third begin
with a slot), sends every template's prompts interleaved at random (across templates and
agents) until each is learned, then times ``TemplateLearner.options`` on fresh prompts of
the learned templates (the steady state: recognised and filed) and prints p50/p99 per prompt,
with how many were filed under the template they came from; then learns ``--new`` more
templates beside the learned ones (a new code path's prompts in a long run) and prints the
time of the prompts learned from. The memory is read by
``tracemalloc``: held once the templates are learned, and after a flood of prompts that
share no template (the bound: ``max_templates + max_learning`` templates of at most
``max_prompt_chars`` characters each).

    .venv/bin/python benchmarks/bench_learn.py --templates 1000 --prompts 5000
"""

from __future__ import annotations

import argparse
import random
import resource
import time
import tracemalloc
from collections import Counter

import numpy as np
from bench_models import header_line, machine_info  # beside this file

from llmcache.templates import TemplateLearner

WORDS = [
    *("morning cafe coffee park library painting garden market lunch friends study music",
      "kitchen dinner walk river bridge school office shop bakery evening talk plan idea",
      "paper window chair table book letter phone game story song dream project rain",
      "stove kettle radio lamp door street town house room bed desk shelf clock cup"),
]  # fmt: skip
WORDS = [w for line in WORDS for w in line.split(" ")]
NAMES = ["Isabella Rodriguez", "Klaus Mueller", "Maria Lopez", "Sam Moore", "Ayesha Khan"]


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def make_template(i: int, rng: random.Random) -> list[str]:
    """A template as its fixed pieces, a slot between each two (name, observation, time)."""
    own = f"Task {i}: {sentence(rng, rng.randint(20, 80))}"
    head = "" if i % 3 == 0 else f"Context {i}. {sentence(rng, 6)}\n"
    return [
        head + "Name: ",
        f"\n{own}\nObservation: ",
        "\nCurrent time: ",
        f"\n{sentence(rng, rng.randint(20, 80))}\nWhat should ",
        ' do next? Output format: {"answer": "<text>"}',
    ]


def fill(pieces: list[str], rng: random.Random) -> str:
    name = rng.choice(NAMES)
    clock = f"{rng.randint(1, 12):02d}:{rng.choice(['00', '15', '30'])} {rng.choice('AP')}M"
    values = [name, sentence(rng, rng.randint(3, 20)), clock, name]
    return "".join(p + v for p, v in zip(pieces, [*values, ""], strict=True)).strip()


def _new_beside_learned(
    learner: TemplateLearner, first: int, n: int, rng: random.Random
) -> np.ndarray:
    """The times (ms) of the prompts learned from while ``n`` new templates are learned, their
    prompts interleaved, beside the templates learned already (the steady state of a long
    run: a new code path's prompts, while the rest are filed)."""
    templates = [make_template(first + i, rng) for i in range(n)]
    times: list[float] = []
    for _ in range(40):
        order = list(range(n))
        rng.shuffle(order)
        passed = 0
        for i in order:
            prompt = fill(templates[i], rng)
            started = time.perf_counter()
            filed = learner.options(prompt)
            if filed is None:
                times.append(time.perf_counter() - started)
                passed += 1
        if not passed:
            break
    return np.asarray(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--templates", type=int, default=1000)
    parser.add_argument("--prompts", type=int, default=5000, help="prompts timed once learned")
    parser.add_argument("--flood", type=int, default=5000, help="prompts of no template")
    parser.add_argument(
        "--new", type=int, default=20, help="templates learned once the others are learned"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--memory",
        action="store_true",
        help="trace the memory held (tracemalloc: every allocation slower, so the times too)",
    )
    args = parser.parse_args()
    rng = random.Random(args.seed)
    templates = [make_template(i, rng) for i in range(args.templates)]
    learner = TemplateLearner(max_templates=args.templates, max_learning=args.templates)
    if args.memory:
        tracemalloc.start()
    # Learning: every template's prompts, interleaved, until each is learned (or 40 rounds).
    learning_times: list[float] = []
    # Of those, the prompts learned from (passed through) and those already filed.
    passed_times: list[float] = []
    sent = 0
    for _ in range(40):
        if len(learner.templates()) >= args.templates:
            break
        order = list(range(args.templates))
        rng.shuffle(order)
        for i in order:
            prompt = fill(templates[i], rng)
            started = time.perf_counter()
            filed_now = learner.options(prompt)
            learning_times.append(time.perf_counter() - started)
            if filed_now is None:
                passed_times.append(learning_times[-1])
            sent += 1
    learned = len(learner.templates())
    passed_learning = learner.passed
    held_learned, _ = tracemalloc.get_traced_memory()
    # The steady state: fresh prompts of the learned templates, filed.
    cases = [
        (i, fill(templates[i], rng)) for i in rng.choices(range(args.templates), k=args.prompts)
    ]
    times: list[float] = []
    by_template: dict[int, Counter[str | None]] = {}
    for i, prompt in cases:
        started = time.perf_counter()
        options = learner.options(prompt)
        times.append(time.perf_counter() - started)
        by_template.setdefault(i, Counter())[options.template if options else None] += 1
    new_ms = _new_beside_learned(learner, args.templates, args.new, rng)
    filed = sum(n for c in by_template.values() for k, n in c.items() if k is not None)
    owners: dict[str, Counter[int]] = {}
    for i, c in by_template.items():
        for k, n in c.items():
            if k is not None:
                owners.setdefault(k, Counter())[i] += n
    mixed = sum(sum(c.values()) - max(c.values()) for c in owners.values())
    # A flood of prompts of no template: the learner stays within its bound.
    for _ in range(args.flood):
        learner.options(sentence(rng, rng.randint(30, 200)))
    held_flood, peak = tracemalloc.get_traced_memory()
    if args.memory:
        tracemalloc.stop()
    ms = np.asarray(times) * 1000
    learn_ms = np.asarray(learning_times) * 1000
    print(header_line(machine_info()))
    print(
        f"{args.templates} templates learned {learned} after {sent} prompts "
        f"({sent / args.templates:.1f} per template; passed through while learning: "
        f"{passed_learning})"
    )
    passed_ms = np.asarray(passed_times) * 1000
    print(
        f"learning phase: p50 {np.percentile(learn_ms, 50):.3f} ms  "
        f"p99 {np.percentile(learn_ms, 99):.3f} ms per prompt; of them the {len(passed_ms)} "
        f"learned from (passed through): p50 {np.percentile(passed_ms, 50):.3f} ms  "
        f"p99 {np.percentile(passed_ms, 99):.3f} ms"
    )
    print(
        f"learned ({learned} templates): p50 {np.percentile(ms, 50):.3f} ms  "
        f"p95 {np.percentile(ms, 95):.3f} ms  p99 {np.percentile(ms, 99):.3f} ms per prompt"
    )
    print(f"filed: {filed}/{len(cases)}; filed under another template's: {mixed}")
    if len(new_ms):
        print(
            f"{args.new} new templates learned beside {learned} learned ones: "
            f"{len(new_ms)} prompts learned from (passed through): p50 "
            f"{np.percentile(new_ms, 50):.3f} ms  p99 {np.percentile(new_ms, 99):.3f} ms"
        )
    most = learner.max_templates + learner.max_learning + learner.max_shadows
    bound = most * learner.max_prompt_chars
    # The text the learner holds (its templates' fixed text), and the process's peak size.
    held = [*learner._frozen.values(), *learner._learning.values(), *learner._shadows.values()]
    chars = sum(len(e) for t in held for e in t.elements if isinstance(e, str))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    traced = (
        f"{held_learned / 2**20:.1f} MiB traced once learned, {held_flood / 2**20:.1f} MiB after "
        f"the flood (peak {peak / 2**20:.1f} MiB); "
        if args.memory
        else ""
    )
    print(
        f"memory: {traced}{chars / 1e6:.2f} M characters of template text held after "
        f"{args.flood} prompts of no template; process peak {rss:.0f} MiB; "
        f"{learner.held()} templates held (bound {learner.max_templates} + "
        f"{learner.max_learning} + {learner.max_shadows} shadows, each at most "
        f"{learner.max_prompt_chars} characters: "
        f"{bound / 1e6:.0f} M characters)"
    )


if __name__ == "__main__":
    main()
