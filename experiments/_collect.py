"""``collect``: simulate the town R times on a real LLM and keep every run's dataset.

Runs are cached: a run whose dataset and summary exist for the same settings is not simulated
again, so re-plotting or re-running one experiment never re-simulates. The settings include a
digest of the town's code and data (:func:`town_fingerprint`), so a study is never made of runs
that different versions of the town recorded. A run interrupted half way (dataset without
summary) is simulated again from scratch.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import logging
import os
from collections import Counter, defaultdict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import agent_core
from agent_core import Simulation
from agent_core.llm import open_town_llm
from agent_core.persona import load_agents
from agent_core.sim import RunSummary
from agent_core.templates import CATEGORIES, template
from llmcache import Mode
from llmcache.embedders import Embedder
from llmcache.llm import cpu_model, vector_isa
from llmcache.recording import RecordedCall, read_records

from ._data import load_run
from ._profiles import Profile
from ._results import CategoryCounts, CollectResult, RunInfo

__all__ = ["collect", "dataset_paths", "recorded", "run_paths", "town_fingerprint"]

logger = logging.getLogger("experiments")


def run_paths(out: Path, run: int) -> tuple[Path, Path]:
    """The dataset and the summary of run ``run`` (1-based) under a results directory."""
    return dataset_paths(out / "data", run)


def dataset_paths(data: Path, run: int) -> tuple[Path, Path]:
    """The dataset and the summary of run ``run`` in a directory of recorded runs: the dataset
    as recorded (``run<n>.jsonl``) or compressed for committing (``run<n>.jsonl.gz``)."""
    dataset = data / f"run{run}.jsonl"
    packed = data / f"run{run}.jsonl.gz"
    if not dataset.exists() and packed.exists():
        dataset = packed
    return dataset, data / f"run{run}.summary.json"


@functools.cache
def town_fingerprint() -> str:
    """A digest of the town's code and data (every file of the ``agent_core`` package): runs
    recorded by another version of the town are simulated again, not mixed into one study."""
    root = Path(agent_core.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _settings(profile: Profile, run: int, llm: dict[str, Any]) -> dict[str, Any]:
    return {
        "town": town_fingerprint(),
        "seed": run,
        "days": profile.days,
        "agents": profile.agents,
        "max_attempts": profile.max_attempts,
        "escalate": profile.escalate,
        "rating_batch": profile.rating_batch,
        "llm": llm.get("description"),
    }


def collect(
    profile: Profile,
    out: Path,
    *,
    client: Any,
    model: str,
    superior_model: str | None,
    llm_report: dict[str, Any],
    embedder: Embedder,
    progress: bool = True,
) -> CollectResult:
    """Simulate ``profile.runs`` runs (seeds 1..R) unless already recorded; describe them."""
    todo: list[int] = []
    summaries: dict[int, RunSummary] = {}
    for run in range(1, profile.runs + 1):
        cached = _cached_summary(run_paths(out, run)[1], _settings(profile, run, llm_report))
        if cached is None:
            todo.append(run)
        else:
            summaries[run] = cached

    def simulate(run: int, position: int) -> RunSummary:
        dataset, summary_path = run_paths(out, run)
        dataset.parent.mkdir(parents=True, exist_ok=True)
        dataset.unlink(missing_ok=True)
        logger.info("collect: simulating run %d of %d", run, profile.runs)
        llm = open_town_llm(
            client,
            model=model,
            mode=Mode.OFF,
            record_to=dataset,
            max_attempts=profile.max_attempts,
            superior_model=superior_model if profile.escalate else None,
            concurrency=profile.concurrency,
            rating_batch=profile.rating_batch,
            # Every call samples at a seed drawn from the run's: a run is the same town on
            # every machine whose server gives the same tokens (see TownLLM).
            seed=run,
        )
        try:
            seeds = load_agents(names=profile.agents) if profile.agents else None
            sim = Simulation(llm, embedder=embedder, seeds=seeds, seed=run)
            summary = sim.run(profile.days, progress=progress, desc=f"run {run}", position=position)
        finally:
            llm.close()
        payload = {
            "settings": _settings(profile, run, llm_report),
            "summary": summary.model_dump(mode="json"),
            # Not a setting (a run is reused on another machine), but its wall time is this
            # machine's: the report names it per run.
            "machine": machine_description(),
        }
        summary_path.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
        return summary

    if profile.parallel_runs > 1 and len(todo) > 1:
        # Runs are independent towns; against one server they keep its slots busy together.
        # Each run's own prompts stay in its order, so a run's data does not depend on this.
        with ThreadPoolExecutor(min(profile.parallel_runs, len(todo))) as pool:
            futures = {run: pool.submit(simulate, run, i) for i, run in enumerate(todo)}
            summaries.update({run: f.result() for run, f in futures.items()})
    else:
        summaries.update({run: simulate(run, 0) for run in todo})
    infos = [
        _describe(run, *run_paths(out, run), summaries[run], llm_report)
        for run in range(1, profile.runs + 1)
    ]
    return CollectResult(profile=profile.name, runs=infos)


def recorded(profile: Profile, data: Path) -> CollectResult:
    """The runs recorded in ``data`` (datasets, plain or compressed, and their summaries), read
    as they are: nothing is simulated, and runs recorded by another version of the town are
    used all the same (the report names the town each run was recorded by)."""
    infos = []
    for run in range(1, profile.runs + 1):
        dataset, summary_path = dataset_paths(data, run)
        if not dataset.exists() or not summary_path.exists():
            raise FileNotFoundError(
                f"{data} holds no recorded run {run} (run{run}.jsonl[.gz] and its summary)"
            )
        payload = json.loads(summary_path.read_text(encoding="utf-8"))
        settings = payload.get("settings", {})
        if settings.get("town") != town_fingerprint():
            logger.info(
                "collect: run %d in %s was recorded by town %s (this one is %s); used as it is",
                run,
                data,
                settings.get("town"),
                town_fingerprint(),
            )
        summary = RunSummary.model_validate(payload["summary"])
        infos.append(
            _describe(run, dataset, summary_path, summary, {"description": settings.get("llm")})
        )
    return CollectResult(profile=profile.name, runs=infos, recorded_in=str(data))


def _cached_summary(path: Path, settings: dict[str, Any]) -> RunSummary | None:
    if not path.exists():
        return None
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if payload.get("settings") != settings:
        logger.info("collect: %s was recorded with other settings; simulating again", path)
        return None
    return RunSummary.model_validate(payload["summary"])


def machine_description() -> str:
    """When and on what a run was simulated: date, CPU, its vector instructions, cores."""
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")
    return f"{date}, {cpu_model()} ({vector_isa()}), {os.cpu_count() or 1} cores"


def _machine(summary_path: Path) -> str:
    try:
        machine = json.loads(summary_path.read_text(encoding="utf-8")).get("machine")
    except (OSError, ValueError, AttributeError):
        return ""
    return machine if isinstance(machine, str) else ""


def _flaws(calls: Iterable[RecordedCall]) -> defaultdict[str, list[int]]:
    """Per category: the accepted answers that echo their format's placeholder, and the
    degenerate ones (runs recorded before the town refused them hold some)."""
    counts: defaultdict[str, list[int]] = defaultdict(lambda: [0, 0])
    for call in calls:
        if call.response is None or call.category not in CATEGORIES:
            continue
        echo, broken = template(call.category).flaws(call.response)
        counts[call.category][0] += echo
        counts[call.category][1] += broken
    return counts


def _describe(
    run: int, dataset: Path, summary_path: Path, summary: RunSummary, llm: dict[str, Any]
) -> RunInfo:
    calls = read_records(dataset)
    kept = load_run(dataset, run)
    failed = sum(summary.failed.values())
    recorded = len(calls) + failed
    # A call needed resubmission when its first answer was refused; a failed call (no valid
    # answer at all) needed it too. Escalated: the superior model answered or was tried last.
    resubmitted = sum(1 for c in calls if c.attempts > 1) + failed
    escalated = sum(summary.escalated.values())
    flawed = _flaws(calls)
    return RunInfo(
        run=run,
        seed=summary.seed,
        days=summary.days,
        agents=summary.agents,
        dataset=str(dataset.name),
        wall_seconds=summary.wall_seconds,
        prompts_recorded=recorded,
        prompts_kept=len(kept),
        per_category=dict(sorted(Counter(p.category for p in kept).items())),
        resubmitted=resubmitted,
        resubmission_rate=resubmitted / recorded if recorded else 0.0,
        escalated=escalated,
        superior_rate=escalated / recorded if recorded else 0.0,
        failed=failed,
        llm=str(llm.get("description", "")),
        machine=_machine(summary_path),
        categories={
            c: CategoryCounts(
                asked=n,
                first_try=summary.first_try.get(c, 0),
                resubmitted=summary.resubmitted.get(c, 0),
                escalated=summary.escalated.get(c, 0),
                fell_back=summary.failed.get(c, 0),
                batched=summary.batched.get(c, 0),
                batches=summary.batches.get(c, 0),
                echoes=flawed[c][0],
                degenerate=flawed[c][1],
            )
            for c, n in sorted(summary.calls.items())
        },
    )
