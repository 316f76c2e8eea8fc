"""``python -m experiments``: the thesis's chapter-3 caching study on our town.

    python -m experiments reproduce --profile quick      # everything (wall times: README.md)
    python -m experiments collect --profile quick        # only the simulation runs
    python -m experiments saturation --profile quick     # one experiment (runs cached)
    python -m experiments report --profile quick         # figures + report.md from the JSONs
    python -m experiments replay-study --out DIR         # the replay study alone (no LLM)

The LLM is chosen as everywhere in llmcache, by ``llmcache.llm.open_llm`` (``LLMCACHE_LLM``,
``LLMCACHE_BASE_URL``, ...; default: the bundled local models, no network). Results go to
``results/<profile>/``. The LLM judges can be any OpenAI-compatible model of their own::

    LLMCACHE_JUDGE_API_KEY=... python -m experiments compare \
        --judge-base-url https://api.example.com/v1 --judge-model some-model

(the key from ``LLMCACHE_JUDGE_API_KEY``, else ``OPENAI_API_KEY``; never on the command line,
never written to any file the study makes).
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from ._judge_endpoint import JudgeEndpoint, redact_argv
from ._profiles import PROFILES, Profile, get_profile
from ._replay_report import headline as replay_headline
from ._report import write_report
from ._reproduce import EXPERIMENTS, JUDGE_PROTOCOLS, Study, reproduce
from ._results import (
    BudgetResult,
    CostResult,
    QualityResult,
    ReplayStudyResult,
    SaturationResult,
    load_result,
)


def _summary(out: Path, report: Path, seconds: float | None) -> None:
    """The quick cost-reduction study in a few lines: what the README's main command ends in."""
    if seconds is not None:
        print(f"\nchapter-3 study reproduced in {seconds / 60:.1f} min")
    _summary_cost(out)
    replay_path = out / "replay_study.json"
    if replay_path.exists():
        top = replay_headline(load_result(ReplayStudyResult, replay_path))
        if top is not None:
            print(f"replay study, the report's headline: {top}")
    _summary_quality(out, headline=not replay_path.exists())
    _summary_budget(out)
    _summary_saturation(out)
    print(f"figures: {out / 'figures'}")
    print(f"report:  {report}")


def _summary_cost(out: Path) -> None:
    cost_path = out / "cost.json"
    if cost_path.exists():
        cost = load_result(CostResult, cost_path)
        rows = {row.mode: row for row in cost.summary()}
        priced = cost.models.get("llm", "the study's")
        print(
            f"cost of a held-out run ({24 * cost.sim_days:g} simulated hours) at {priced} prices:"
        )
        print(f"  {'':14} {'study model (chars/4)':24} CachedLLM replay (LLM tokens counted)")
        none = rows["none"]
        print(f"  {'no cache':14} ${none.study.total_usd:<23.4f} ${none.replay.spent_usd:.4f}")
        for mode in ("full", "keyword"):
            row = rows[mode]
            study = f"${row.study.total_usd:.4f} ({100 * (row.study.reduction or 0):.1f}% less)"
            print(
                f"  {mode + ' cache':14} {study:24} ${row.replay.spent_usd:.4f} "
                f"({100 * (row.replay_saving or 0):.1f}% less, "
                f"{row.replay.hits}/{row.replay.calls} hits)"
            )


def _summary_quality(out: Path, *, headline: bool) -> None:
    quality_path = out / "quality.json"
    if quality_path.exists():
        quality = load_result(QualityResult, quality_path)
        said = ", the report's headline" if headline else ""
        print(f"acceptable answers in serve mode (95% interval){said}:")
        for mode in quality.curves:
            point = quality.serve(mode)
            if point is None or point.acceptable.rate is None:
                continue
            a = point.acceptable
            share = point.acceptable.rate
            print(
                f"  {mode + ' cache':14} {100 * share:.1f}% [{100 * a.low:.0f}%, "
                f"{100 * a.high:.0f}%] of {a.answers} answers, "
                f"{100 * (point.cost_reduction or 0):.1f}% cost cut"
            )
        rnd = quality.random.get("all")
        if rnd is not None and rnd.rate is not None:
            print(
                f"  {'random answer':14} {100 * rnd.rate:.1f}% [{100 * rnd.low:.0f}%, "
                f"{100 * rnd.high:.0f}%] of {rnd.answers} answers"
            )
        own = quality.reanswer.get("all")
        if own is not None and own.rate is not None:
            print(
                f"  {'LLM re-answer':14} {100 * own.rate:.1f}% [{100 * own.low:.0f}%, "
                f"{100 * own.high:.0f}%] of {own.answers} pairs of answers to one query"
            )


def _summary_budget(out: Path) -> None:
    budget_path = out / "budget.json"
    if budget_path.exists():
        budget = load_result(BudgetResult, budget_path)
        print(
            "served answers' excess of unacceptable ones over the model's own second answers "
            "(points, 95% interval), online:"
        )
        for run in budget.runs:
            total = run.groups.get("all")
            if total is None:
                continue
            if run.config == "budget":
                name = f"δ = {run.budget:g}" + ("" if run.pooled else " alone")
            elif run.config == "static":
                name = f"static {run.threshold:g}"
            else:
                name = run.config
            p = total.paired
            excess = (
                f"{100 * p.excess:+.1f} [{100 * (p.low or 0):+.1f}, {100 * (p.high or 0):+.1f}]"
                f" on {p.pairs} pairs"
                if p.excess is not None
                else "nothing served to pair"
            )
            print(
                f"  {run.mode:8} {name:16} {total.hits:5d} served, excess {excess}, "
                f"{100 * (total.cost_reduction or 0):.1f}% cost cut"
            )


def _summary_saturation(out: Path) -> None:
    sat_path = out / "saturation.json"
    if sat_path.exists():
        sat = load_result(SaturationResult, sat_path)
        print(
            "saturation: mean best similarity of run 1's prompts against a table of the other "
            "runs, by simulated hours of data in it:"
        )
        for mode, curves in sat.curves.items():
            comb = curves[-1]
            step = max(1, len(comb.mean) // 10)  # at most ~10 points on a line
            pts = "  ".join(
                # Tenths of an hour: a short profile's thresholds are not whole hours apart.
                f"{round(24 * t, 1):g}h {m:.3f}"
                for t, m in list(zip(sat.thresholds_days, comb.mean, strict=True))[::step]
            )
            print(f"  {mode:8} {pts}")


def _meta(out: Path, study: Study, profile: Profile, command: str, fresh: bool) -> dict[str, Any]:
    """Who made the results and how long each step took: kept beside them for ``report``."""
    path = out / "study.json"
    if fresh or not path.exists():
        meta: dict[str, Any] = {
            "llm": study.conn.backend.description if study.connected else _recorded_llm(out),
            "judge_model": study.judge_description
            if study.connected or study.judge is not None
            else f"{profile.judge_tier} tier",
            "timings": study.timings,
            "command": command,
        }
        path.write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        return meta
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def _record_rerun(out: Path, step: str, seconds: float, command: str) -> None:
    """A step run again on its own replaces its wall time in ``study.json`` and its command is
    listed, so that the report says what made each result and how long it took."""
    path = out / "study.json"
    if not path.exists():
        return
    meta: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    meta.setdefault("timings", {})[step] = seconds
    meta["reruns"] = [*meta.get("reruns", []), command]
    path.write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")


def _recorded_llm(out: Path) -> str:
    from ._results import CollectResult

    path = out / "collect.json"
    if not path.exists():
        return "unknown (no collect.json)"
    runs = load_result(CollectResult, path).runs
    return runs[0].llm if runs else "unknown"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m experiments", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "command",
        choices=[*EXPERIMENTS, "replay-study", "reproduce", "report", "notebooks"],
        help="one experiment, all of them (reproduce), or figures + report from saved results",
    )
    parser.add_argument("--profile", default="quick", choices=sorted(PROFILES))
    parser.add_argument("--out", help="results directory (default: results/<profile>)")
    parser.add_argument("--force", action="store_true", help="recompute cached results")
    parser.add_argument("--no-notebooks", action="store_true", help="reproduce: skip notebooks")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument(
        "--runs",
        help="a directory of recorded runs (run<n>.jsonl[.gz] and run<n>.summary.json) to read "
        "instead of simulating, e.g. docs/results/standard/data",
    )
    parser.add_argument(
        "--recording",
        help="replay study: a directory of run<n>.jsonl.gz ReplayCall lines and a "
        "provenance.json (default: docs/results/recording; absent: the town runs' own answers)",
    )
    parser.add_argument(
        "--town-runs",
        help="replay study: the town runs the recording's prompts came from (default: "
        "docs/results/standard/data)",
    )
    parser.add_argument(
        "--judge-base-url",
        help="an OpenAI-compatible server (…/v1) for the LLM judges; the key is read from "
        "LLMCACHE_JUDGE_API_KEY, else OPENAI_API_KEY (needs --judge-model)",
    )
    parser.add_argument(
        "--judge-model",
        help="the LLM judges' model (default: the profile's tier on the study's own LLM)",
    )
    parser.add_argument(
        "--judge-protocol",
        choices=JUDGE_PROTOCOLS,
        default="rank",
        help="rank: all candidates at once, in a seeded order and its reverse (default); "
        "pairwise: two at a time, both orders, the model's A/B odds where logprobs are served; "
        "score: each answer scored alone, the expected digit; answer-first: the judge answers "
        "the task itself and the closest candidate wins",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "replay-study":
        args.command = "replay_study"
    if args.judge_base_url and not args.judge_model:
        parser.error("--judge-base-url needs --judge-model")
    judge = (
        JudgeEndpoint.from_env(args.judge_model, args.judge_base_url) if args.judge_model else None
    )
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for name in ("httpx", "httpx2", "openai", "llmcache"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # The town logs every call that fell back; collect.json counts them per run instead.
    logging.getLogger("agent_core").setLevel(logging.ERROR)
    profile = get_profile(args.profile)
    out = Path(args.out or f"results/{profile.name}")
    out.mkdir(parents=True, exist_ok=True)
    runs = Path(args.runs) if args.runs else None
    study = Study(
        profile,
        out,
        # Bars only where a person reads them: a log file or a pipe gets no carriage returns.
        progress=not args.quiet and sys.stderr.isatty(),
        force=args.force,
        runs=runs,
        judge=judge,
        judge_protocol=args.judge_protocol,
    )
    if args.recording:
        study.recording = Path(args.recording)
    if args.town_runs:
        study.town_runs = Path(args.town_runs)
    started = time.perf_counter()
    # Recorded in study.json and the report: a URL's user info or query could hold a secret.
    given = sys.argv[1:] if argv is None else argv
    command = "python -m experiments " + shlex.join(redact_argv(given))
    try:
        if args.command == "reproduce":
            reproduce(study)
        elif args.command in EXPERIMENTS:
            study.force = True
            study.step(args.command)
            if (out / "study.json").exists():
                _record_rerun(out, args.command, study.timings[args.command], command)
            else:  # the first step run in this directory: it starts the record
                _meta(out, study, profile, command, fresh=True)
        if args.command in ("reproduce", "report"):
            from ._plots import plot_all

            plot_all(out)
            meta = _meta(out, study, profile, command, args.command == "reproduce")
            report = write_report(
                out,
                profile,
                llm=meta["llm"],
                judge_model=meta["judge_model"],
                embedder=study.embedder.model_id,
                timings=meta["timings"],
                command="`, then `".join([meta["command"], *meta.get("reruns", [])]),
            )
            if args.command == "reproduce" and not args.no_notebooks:
                from ._notebooks import execute_notebooks

                execute_notebooks(out, out / "notebooks")
            _summary(
                out,
                report,
                time.perf_counter() - started if args.command == "reproduce" else None,
            )
        if args.command == "notebooks":
            from ._notebooks import execute_notebooks

            for p in execute_notebooks(out, out / "notebooks"):
                print(p)
    finally:
        study.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
