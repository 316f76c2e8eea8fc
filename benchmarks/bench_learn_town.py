"""Templates learned from the bundled town's traffic, its prompt files withheld.

The town's recording (``docs/results/recording/``: two agents of the three standard runs,
1,345 calls, each prompt as the town sent it, a system message naming the agent and a user
message that begins with the agent's persona) is replayed, in order, through
``TemplateLearner.options`` as ``CachedLLM(learn_templates=True)`` and ``python -m llmcache
proxy --learn-templates`` would see it: no category, no template, no agent. Each call's
category (the prompt file the town filled) is known from the recording and is compared with
what the learner filed it under.

Printed per category (the town's code site): its calls, how many were filed, how many learned
templates they were filed under and the share of the most common one; then the purity (learned
templates that filed two categories' calls, and those calls) and the learner's counters.
Then per run, the share filed when each run is a new process that reads the templates the
runs before it learned from a file (``TemplateLearner(path=...)``), beside one process that
learns from every run. Learning does not depend on the model's answers, so no model runs.

    .venv/bin/python benchmarks/bench_learn_town.py
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from bench_models import header_line, machine_info  # beside this file

from llmcache.replay import read_calls
from llmcache.templates import TemplateLearner

RECORDING = Path(__file__).resolve().parents[1] / "docs" / "results" / "recording"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recording", type=Path, default=RECORDING, help="run*.jsonl.gz folder")
    args = parser.parse_args(argv)
    runs = sorted(args.recording.glob("run*.jsonl*"))
    if not runs:
        print(f"no recording in {args.recording}: run*.jsonl.gz files are needed")
        return 2
    print(header_line(machine_info()), flush=True)
    learner = TemplateLearner()
    calls: Counter[str] = Counter()
    filed: dict[str, Counter[str]] = defaultdict(Counter)
    sources: dict[str, Counter[str]] = defaultdict(Counter)
    started = time.perf_counter()
    for path in runs:
        for call in read_calls(path).calls:
            user = [m["content"] for m in call.messages if m["role"] == "user"]
            system = [m["content"] for m in call.messages if m["role"] == "system"]
            calls[call.category] += 1
            if len(user) != 1 or len(system) > 1:
                continue
            options = learner.options(user[0], system[0] if system else None)
            if options is not None:
                filed[call.category][options.category] += 1
                sources[options.category][call.category] += 1
    seconds = time.perf_counter() - started
    print(f"{sum(calls.values())} calls of {len(runs)} runs, learned in {seconds:.1f} s")
    print(f"{'category':<20} {'calls':>6} {'filed':>12} {'templates':>10} {'most common':>12}")
    for category, n in calls.most_common():
        mine = filed[category]
        done = sum(mine.values())
        top = max(mine.values(), default=0)
        share = f"{100 * top / done:.0f}%" if done else "-"
        print(
            f"{category:<20} {n:>6} {done:>5} ({100 * done / n:3.0f}%) {len(mine):>10} {share:>12}"
        )
    mixed = {t: c for t, c in sources.items() if len(c) > 1}
    crossed = sum(sum(c.values()) - max(c.values()) for c in mixed.values())
    print(
        f"learned templates: {len(sources)}; of them filing two categories' calls: {len(mixed)} "
        f"({crossed} calls under another category's template)"
    )
    print(
        f"passed through: {learner.passed}; ambiguous: {learner.ambiguous}; templates given up "
        f"because a slot held another template's text: {learner.refused}"
    )
    print(kept_between_runs(runs))
    return 0


def _filed(learner: TemplateLearner, path: Path) -> tuple[int, int]:
    """A run's calls through ``learner``: how many, and how many it filed."""
    calls = filed = 0
    for call in read_calls(path).calls:
        user = [m["content"] for m in call.messages if m["role"] == "user"]
        system = [m["content"] for m in call.messages if m["role"] == "system"]
        calls += 1
        if len(user) == 1 and len(system) <= 1:
            filed += learner.options(user[0], system[0] if system else None) is not None
    return calls, filed


def kept_between_runs(runs: list[Path]) -> str:
    """Per run: the share filed by one process that saw every run before it, and by a new
    process per run that read the templates the runs before it kept in a file."""
    one = TemplateLearner()
    lines = [f"{'run':<14} {'calls':>6} {'one process':>12} {'a process per run, file kept':>29}"]
    with tempfile.TemporaryDirectory(prefix="bench-learn-town-") as folder:
        kept = Path(folder) / "learned.json"
        for path in runs:
            calls, by_one = _filed(one, path)
            _, by_new = _filed(TemplateLearner(path=kept), path)
            name = path.name.split(".")[0]
            one_share, new_share = 100 * by_one / calls, 100 * by_new / calls
            lines.append(f"{name:<14} {calls:>6} {one_share:>11.0f}% {new_share:>28.0f}%")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
