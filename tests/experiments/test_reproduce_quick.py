"""``python -m experiments reproduce --profile quick`` from scratch, on the real local models.

The study's end-to-end check: every figure, ``report.md`` and both notebooks executed headless
on the quick profile's output, with the offline default LLM and embedder (marked slow, still
run in CI; its wall time is in experiments/README.md). Skipped only when the local LLM is not
installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from experiments._results import (
    BudgetResult,
    CollectResult,
    CorrelationResult,
    CostResult,
    load_result,
)
from llmcache.llm import DEFAULT_MODEL, LocalServerError, find_llama_server, find_model

pytestmark = pytest.mark.slow


def _missing() -> str | None:
    try:
        find_llama_server()
        find_model(DEFAULT_MODEL)
    except LocalServerError as exc:
        return str(exc)
    return None


FIGURES = (
    "similarity",
    "saturation",
    "observed",
    "correlation",
    "correlation_groups",
    "compare",
    "cost",
    "quality",
    "budget",
)


@pytest.mark.skipif(_missing() is not None, reason=f"local LLM not installed: {_missing()}")
def test_quick_profile_reproduces_everything(tmp_path: Path) -> None:
    out = tmp_path / "quick"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments",
            "reproduce",
            "--profile",
            "quick",
            "--out",
            str(out),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        # Generous: CI machines are shared, and a study slowed by a neighbour must not fail
        # here for its time (CI itself stops at 90 minutes).
        timeout=60 * 60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    print(proc.stdout)  # the summary the README's main command ends in
    for name in FIGURES:
        png = out / "figures" / f"{name}.png"
        assert png.exists() and png.stat().st_size > 1000, name
    report = (out / "report.md").read_text()
    assert "| quantity | study | ours | why they differ |" in report
    for nb in ("saturation", "evaluation"):
        executed = json.loads((out / "notebooks" / f"{nb}.ipynb").read_text())
        outputs = [o for c in executed["cells"] if c["cell_type"] == "code" for o in c["outputs"]]
        assert outputs and not any(o.get("output_type") == "error" for o in outputs), nb

    collect = load_result(CollectResult, out / "collect.json")
    assert len(collect.runs) == 3 and all(r.prompts_kept > 0 for r in collect.runs)
    assert all("smollm2" in r.llm for r in collect.runs)  # the real local model, not a double
    # With per-query schemas the local model makes plans: the data holds plan-making prompts
    # (and the report's per-category table says how each category was answered).
    for category in ("initial plan generation", "plan decomposition"):
        assert all(r.per_category.get(category, 0) > 0 for r in collect.runs), category
    assert "| category | asked | valid at the first try |" in report
    corr = load_result(CorrelationResult, out / "correlation.json")
    assert set(corr.ratings) == {"reference", "llm"} or len(corr.ratings) == 2
    cost = load_result(CostResult, out / "cost.json")
    assert cost.replay["none"].spent_usd > 0
    assert "cost of a held-out run" in proc.stdout and "report:" in proc.stdout
    assert "acceptable answers in serve mode" in proc.stdout
    assert "**Headline**" in report and "pairwise" in report
    # The wrong-hit budget answered the held-out run online, every query accounted for, and
    # the model answered a sample of the served queries again to pair with them.
    budget = load_result(BudgetResult, out / "budget.json")
    held_out = collect.runs[-1].prompts_kept
    assert all(r.groups["all"].queries == held_out for r in budget.runs)
    assert {r.config for r in budget.runs} == {"budget", "audit", "static", "serve", "random"}
    serve = next(r for r in budget.runs if r.config == "serve").groups["all"]
    assert serve.hits > 0 and serve.paired.pairs > 0 and budget.reanswers_asked > 0
    assert "over the model's own second answers" in proc.stdout
    assert "## Wrong-hit budget" in report and "over the model's own variability" in report
