"""The public surface of ``experiments``: an ``__all__`` of names that exist (ruff sorts it)."""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
from pathlib import Path

import pytest

import experiments

# Every private module of the package, found rather than listed, so a new one is covered.
MODULES = sorted(
    f"experiments.{info.name}"
    for info in pkgutil.iter_modules(experiments.__path__)
    if info.name.startswith("_") and info.name != "__main__"
)

# The studies (one experiment step each) share pieces through modules of their own, never
# through one another.
STUDIES = {
    "experiments._budget_study",
    "experiments._cost_study",
    "experiments._judged",
    "experiments._quality",
    "experiments._retrieval",
}


def test_package_all_is_unique_and_importable() -> None:
    assert len(set(experiments.__all__)) == len(experiments.__all__)
    for name in experiments.__all__:
        assert hasattr(experiments, name), name


@pytest.mark.parametrize("module", MODULES)
def test_every_module_declares_what_it_exports(module: str) -> None:
    mod = importlib.import_module(module)
    assert mod.__all__, module
    for name in mod.__all__:
        assert hasattr(mod, name), f"{module}.{name}"


def test_profiles() -> None:
    quick = experiments.get_profile("quick")
    assert quick.runs == 3 and quick.judge_tier == "default"
    full = experiments.get_profile("full")
    assert (full.runs, full.days, full.agents) == (5, 15.0, None)
    with pytest.raises(KeyError, match="known"):
        experiments.get_profile("huge")


def test_the_scan_finds_the_modules() -> None:
    assert len(MODULES) > 15 and set(MODULES) >= STUDIES


def test_no_study_imports_another_study() -> None:
    root = Path(experiments.__file__).parent
    offenders = []
    for study in sorted(STUDIES):
        tree = ast.parse((root / f"{study.split('.')[-1]}.py").read_text("utf-8"))
        for node in ast.walk(tree):
            sibling = isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
            if sibling and f"experiments.{node.module}" in STUDIES:
                offenders.append(f"{study} imports {node.module}")
    assert offenders == []


def test_the_notebooks_import_only_public_names_of_experiments() -> None:
    root = Path(experiments.__file__).resolve().parent.parent / "notebooks"
    notebooks = sorted(root.glob("*.ipynb"))
    assert notebooks
    found = []
    for path in notebooks:
        cells = json.loads(path.read_text("utf-8"))["cells"]
        source = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("experiments"):
                names = [node.module or "", *(alias.name for alias in node.names)]
                found += [f"{path.name}: {n}" for n in names if n.split(".")[-1].startswith("_")]
    assert found == []
    plots = importlib.import_module("experiments.plots")
    assert plots.__all__ == sorted(plots.__all__) and all(hasattr(plots, n) for n in plots.__all__)
