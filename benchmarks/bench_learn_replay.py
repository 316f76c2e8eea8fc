"""Templates learned from the traffic against templates declared, on the same real traffic
(issue: templates and agents learned from the traffic).

Each bed is replayed twice through the real cache (``llmcache.replay.replay``, the recorded
answers standing in for the model, the static default configuration, the default local
embedder):

- **declared**: each call with the options the code that made it gives (its prompt file's
  category, its agent, its keywords);
- **learned**: each call as agent code that declares nothing sends it (no options at all), the
  cache filing it under a template it learns from the traffic (``CachedLLM(learn_templates=
  True)``, what ``python -m llmcache proxy --learn-templates`` and the LangChain cache do);
  until a template is learned its calls pass through.

Printed per bed: the learner's own time per prompt (to learn from one that passes through,
and to file one). Then per bed and path: the calls, the share filed (not passed through), the
cost cut, the answers served, the excess over the model's own variability with its 95%
interval (points), the agent crossings (hits that served an answer another agent's call
stored), and for the learned path the templates learned and the purity (templates that filed
calls of two of the code's prompt files). Then, per bed and prompt file, the share of its
calls each path filed and served.

The beds (``../shared/benchmarks/``, beside the repository; a bed that is absent is skipped,
said so):

- ``park_4omini_dev``: eight agents of one gpt-4o-mini run of Park et al.'s code, each memory's
  importance rated through Park's two poignancy prompts (``benchmarks/park_calls.py --bed``);
- the same, each call made three times by three agents who differ by their name alone (24
  agents, whose personas are alike: a shared table must keep them apart by the name);
- ``park_demo_isabella``: the shared agent of Park et al.'s published demo run (gpt-3.5-turbo);
- the bundled town's recording (``docs/results/recording/``, SmolLM2: a model that agrees with
  itself on half of its ratings, so its excess is wide), where the persona, status line and
  clock of every prompt are slots the learner cannot know to ignore.

With ``--tune``, each bed but the 24-agent stress is then tuned both ways
(``llmcache.replay.tune``, δ 5 points, split by time, keyword mode at the thresholds
``--thresholds``; learned: ``tune(learn_templates=True)``, each learned template's slots tried
as its keyword slots, a setting that crossed agents refused), and the chosen configuration's
figures on the check part (the second half) are printed per path.

    .venv/bin/python benchmarks/bench_learn_replay.py    # about a minute on 2 cores
    .venv/bin/python benchmarks/bench_learn_replay.py --tune    # about 5 more minutes
"""

from __future__ import annotations

import argparse
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from bench_models import header_line, machine_info, markdown_table  # beside this file
from park_calls import PARK, PARK_4OMINI, bed_calls, park_calls  # beside this file

from llmcache import EmbedMode
from llmcache.embedders import StoredEmbedder, default_embedder
from llmcache.replay import (
    CallResult,
    Figures,
    ReplayCall,
    ReplayReport,
    TuneResult,
    embedding_texts,
    read_calls,
    replay,
    tune,
)
from llmcache.templates import TemplateLearner

RECORDING = Path(__file__).resolve().parents[1] / "docs" / "results" / "recording"


def beds() -> dict[str, list[ReplayCall]]:
    """The beds present on this machine, by name."""
    found: dict[str, list[ReplayCall]] = {}
    if PARK_4OMINI.exists():
        found["park_4omini_dev (8 agents)"] = bed_calls()
        found["the same, 24 agents (3 names each)"] = many_agents(bed_calls())
    else:
        print(f"skipped: {PARK_4OMINI} is absent")
    if PARK.exists():
        found["park_demo_isabella"] = park_calls()
    else:
        print(f"skipped: {PARK} is absent")
    runs = sorted(RECORDING.glob("run*.jsonl*"))
    if runs:
        found["town recording (3 runs)"] = [c for run in runs for c in read_calls(run).calls]
    else:
        print(f"skipped: no recording in {RECORDING}")
    return found


SUFFIXES = ("", " Jr", " III")


def many_agents(calls: list[ReplayCall]) -> list[ReplayCall]:
    """Each call three times, as three agents who differ by their name alone (every name in
    the prompt made anew: "Mei Lin Jr", "Mei Lin III"): more agents than 15, whose personas
    are alike, so that a shared table must keep them apart by their names."""
    names = sorted({c.agent for c in calls}, key=len, reverse=True)
    out = []
    for call in calls:
        for suffix in SUFFIXES:
            messages = []
            for m in call.messages:
                text = str(m["content"])
                for name in names if suffix else ():
                    text = text.replace(name, name + suffix)
                messages.append({**m, "content": text})
            out.append(call.model_copy(update={"agent": call.agent + suffix, "messages": messages}))
    return out


def crossings(results: Sequence[CallResult]) -> int:
    """Hits that served an answer another agent's call stored."""
    return sum(1 for r in results if r.crossed)


def interval(f: Figures) -> str:
    """The excess and its 95% interval, in points."""
    if f.served and None not in (f.excess, f.excess_low, f.excess_upper):
        return f"{f.excess:+.1f} [{f.excess_low:+.1f}, {f.excess_upper:+.1f}]"
    return "- (nothing served)"


def row(bed: str, path: str, report: ReplayReport, learner: TemplateLearner | None) -> list[str]:
    f = report.overall
    results = report.results
    filed = sum(1 for r in results if r.filed_under is not None)
    templates = purity = "-"
    if learner is not None:
        files: dict[str, set[str]] = defaultdict(set)
        for r in results:
            if r.filed_under is not None:
                files[r.filed_under].add(r.category)
        mixed = sum(1 for categories in files.values() if len(categories) > 1)
        templates = str(len(files))
        purity = f"{len(files) - mixed}/{len(files)}"
    return [
        bed,
        path,
        str(f.calls),
        f"{filed / f.calls:.0%}" if f.calls else "-",
        f"{f.cost_cut:.1%}",
        str(f.served),
        interval(f),
        str(crossings(results)),
        templates,
        purity,
    ]


HEADER = [
    "bed",
    "path",
    "calls",
    "filed",
    "cost cut",
    "served",
    "excess, points [95%]",
    "agent crossings",
    "templates",
    "pure",
]


def per_category(bed: str, reports: dict[str, ReplayReport]) -> list[list[str]]:
    """Per prompt file: its calls, and per path the share filed and the share served."""
    rows = []
    calls = Counter(r.category for r in next(iter(reports.values())).results)
    for category, n in calls.most_common():
        cells = [bed, category, str(n)]
        for report in reports.values():
            mine = [r for r in report.results if r.category == category]
            filed = sum(1 for r in mine if r.filed_under is not None)
            served = sum(1 for r in mine if r.outcome == "hit")
            cells.append(f"{filed / n:.0%} / {served / n:.0%}")
        rows.append(cells)
    return rows


def learner_times(calls: Sequence[ReplayCall]) -> str:
    """The learner alone over a bed's prompts, in order: the time to learn from a prompt that
    passes through and to file one, per prompt."""
    learner = TemplateLearner()
    passed: list[float] = []
    filed: list[float] = []
    for call in calls:
        user = [str(m["content"]) for m in call.messages if m.get("role") == "user"]
        system = [str(m["content"]) for m in call.messages if m.get("role") == "system"]
        started = time.perf_counter()
        options = learner.options(user[-1] if user else "", system[0] if system else None)
        (passed if options is None else filed).append((time.perf_counter() - started) * 1000)

    def pct(times: list[float]) -> str:
        if not times:
            return "-"
        return f"p50 {np.percentile(times, 50):.2f} ms, p99 {np.percentile(times, 99):.2f} ms"

    return (
        f"learned from (passed through) {len(passed)}: {pct(passed)}; "
        f"filed {len(filed)}: {pct(filed)}"
    )


TUNED_HEADER = [
    "bed",
    "path",
    "categories cached",
    "check-part calls",
    "cost cut",
    "served",
    "excess, points [95%]",
    "bound",
    "agent crossings",
    "seconds",
]


def tuned_row(bed: str, path: str, result: TuneResult) -> list[str]:
    """A tuned configuration's figures on the check part (the calls it was confirmed on)."""
    f = result.check.overall
    cached = sum(1 for c in result.choices.values() if c.setting is not None)
    return [
        bed,
        path,
        f"{cached} of {len(result.choices)}",
        str(f.calls),
        f"{f.cost_cut:.1%}",
        str(f.served),
        interval(f),
        "-" if f.bound is None else f"{f.bound:+.1f}",
        str(crossings(result.check.results)),
        f"{result.seconds:.0f}",
    ]


def _thresholds(text: str) -> list[float]:
    return [float(part) for part in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tune", action="store_true", help="tune each bed both ways as well")
    parser.add_argument(
        "--thresholds", type=_thresholds, default=[0.85, 0.9, 0.95, 0.999], help="for --tune"
    )
    args = parser.parse_args(argv)
    print(header_line(machine_info()), flush=True)
    found = beds()
    if not found:
        return 2
    embedder = StoredEmbedder(default_embedder())
    embedder.warm(
        embedding_texts([c for calls in found.values() for c in calls], [EmbedMode.KEYWORD])
    )
    rows: list[list[str]] = []
    categories: list[list[str]] = []
    for bed, calls in found.items():
        started = time.perf_counter()
        learner = TemplateLearner()
        reports = {
            "declared": replay(calls, embedder=embedder),
            "learned": replay(calls, embedder=embedder, learn_templates=learner),
        }
        rows.append(row(bed, "declared", reports["declared"], None))
        rows.append(row(bed, "learned", reports["learned"], learner))
        categories.extend(per_category(bed, reports))
        print(f"{bed}: {len(calls)} calls, both paths in {time.perf_counter() - started:.0f} s")
        print(f"  the learner alone: {learner_times(calls)}")
    print()
    print(markdown_table(HEADER, rows))
    print("\nper prompt file, filed / served:")
    print(markdown_table(["bed", "prompt file", "calls", "declared", "learned"], categories))
    if args.tune:
        print()
        print(markdown_table(TUNED_HEADER, tuned_rows(found, embedder, args.thresholds)))
    return 0


def tuned_rows(
    found: dict[str, list[ReplayCall]], embedder: StoredEmbedder, thresholds: list[float]
) -> list[list[str]]:
    """Each bed but the stress tuned declared and learned: the check part's figures."""
    rows = []
    for bed, calls in found.items():
        if bed.startswith("the same"):
            continue
        for path, learn in (("declared, tuned", False), ("learned, tuned", True)):
            result = tune(
                calls,
                thresholds=thresholds,
                embeds=[EmbedMode.KEYWORD],
                lead_words=[0],
                embedder=embedder,
                learn_templates=learn,
            )
            rows.append(tuned_row(bed, path, result))
            print(f"{bed}, {path}: {result.seconds:.0f} s", flush=True)
            for name, choice in sorted(result.choices.items()):
                print(f"  {name}: {choice.setting.describe() if choice.setting else 'uncached'}")
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
