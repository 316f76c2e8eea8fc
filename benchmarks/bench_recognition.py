"""Template recognition: the time to find which of N templates a prompt was filled from.

Builds N synthetic templates in the style of Park et al.'s prompt files (``!<INPUT n>!`` slots;
many begin with the persona slot, some with a literal; the agent's name repeated across
slots; multi-line persona and plan values), fills each with realistic values to prompts of
1-4 KB, and times ``TemplateSet.recognise`` on every prompt. Prints p50/p99 per prompt and
whether every prompt was recognised exactly (its template, and exactly the values filled in).

    .venv/bin/python benchmarks/bench_recognition.py --templates 100 --prompts 2000
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np
from bench_models import header_line, machine_info  # beside this file

from llmcache import PromptTemplate
from llmcache.templates import TemplateSet

WORDS = [
    *("morning cafe coffee park library painting garden market lunch friends study music",
      "kitchen dinner walk river bridge school office shop bakery evening talk plan idea",
      "paper window chair table book letter phone game story song dream project"),
]  # fmt: skip
WORDS = [w for line in WORDS for w in line.split(" ")]
TASKS = ["rate", "summarise", "decide", "describe", "plan", "choose", "react to", "answer"]


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def make_templates(n: int, rng: random.Random) -> list[PromptTemplate]:
    templates = []
    for i in range(n):
        task = rng.choice(TASKS)
        body = [
            f"Task {i}: {task} the following for !<INPUT 1>!.",
            f"{sentence(rng, 12)}",
            "Here is !<INPUT 1>!'s plan for today:\n!<INPUT 2>!",
            f"Current time: !<INPUT 3>!. {sentence(rng, 8)}",
            "Observation: !<INPUT 4>!",
            f"Question {i}: what should !<INPUT 1>! do next? {sentence(rng, 6)}",
            'Output format: {"answer": "<text>"}',
        ]
        # Most of Park's files begin with the persona (a slot); some with a literal.
        head = "!<INPUT 0>!\n\n" if i % 3 else f"Context for prompt {i}:\n!<INPUT 0>!\n\n"
        notes = "Variables:\n!<INPUT 0>! -- persona\n!<INPUT 1>! -- name\n"
        text = notes + "<commentblockmarker>###</commentblockmarker>\n" + head + "\n".join(body)
        templates.append(PromptTemplate(name=f"prompt_{i}", text=text, agent_slot="1"))
    return templates


def make_values(rng: random.Random) -> list[str]:
    name = rng.choice(["Isabella Rodriguez", "Klaus Mueller", "Maria Lopez", "Sam Moore"])
    persona = "\n".join(
        [f"Name: {name}", f"Age: {rng.randint(20, 70)}"]
        + [f"{k}: {sentence(rng, rng.randint(5, 110))}" for k in ("Innate", "Learned", "Life")]
    )
    plan = "\n".join(f"{h}) {sentence(rng, rng.randint(2, 20))}" for h in range(1, 12))
    time_of_day = f"{rng.randint(1, 12):02d}:{rng.choice(['00', '15', '30'])} {rng.choice('AP')}M"
    return [persona, name, plan, time_of_day, sentence(rng, rng.randint(5, 40))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--templates", type=int, default=100)
    parser.add_argument("--prompts", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    templates = make_templates(args.templates, rng)
    found = TemplateSet(templates)
    cases = []
    for _ in range(args.prompts):
        template = rng.choice(templates)
        cases.append((template, template.fill(*make_values(rng))))
    sizes = [len(f.text.encode()) for _, f in cases]
    for _, filled in cases[:50]:  # warm-up
        found.recognise(filled.text)
    times, exact = [], 0
    for template, filled in cases:
        started = time.perf_counter()
        got = found.recognise(filled.text)
        times.append(time.perf_counter() - started)
        exact += got.template == template and got.slots == filled.slots
    ms = np.asarray(times) * 1000
    print(header_line(machine_info()))
    print(
        f"{args.templates} templates, {args.prompts} prompts of "
        f"{min(sizes) / 1024:.1f}-{max(sizes) / 1024:.1f} KB (median {np.median(sizes) / 1024:.1f})"
    )
    p50, p95, p99 = (np.percentile(ms, q) for q in (50, 95, 99))
    print(f"recognise: p50 {p50:.3f} ms  p95 {p95:.3f} ms  p99 {p99:.3f} ms")
    print(f"recognised exactly: {exact}/{len(cases)}")


if __name__ == "__main__":
    main()
