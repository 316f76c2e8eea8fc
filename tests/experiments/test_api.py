"""The public surface of ``experiments``: an ``__all__`` of names that exist (ruff sorts it)."""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import subprocess
import sys
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
    "experiments._replay_study",
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
    offenders: list[str] = []
    for study in sorted(STUDIES):
        tree = ast.parse((root / f"{study.split('.')[-1]}.py").read_text("utf-8"))
        for node in ast.walk(tree):
            offenders += [f"{study} imports {name}" for name in _imported(node) if name in STUDIES]
    assert offenders == []


def _imported(node: ast.AST) -> list[str]:
    """The modules an import statement of a module of ``experiments`` names, absolute."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = "experiments" if node.level == 1 else ""
    module = ".".join(part for part in (base, node.module or "") if part)
    # ``from . import _quality`` names modules; ``from ._quality import x`` names one module.
    return [f"{module}.{alias.name}" for alias in node.names] + [module]


def test_the_notebooks_import_only_public_names_of_experiments() -> None:
    root = Path(experiments.__file__).resolve().parent.parent / "notebooks"
    notebooks = sorted(root.glob("*.ipynb"))
    assert notebooks
    imported: list[str] = []
    found: list[str] = []
    for path in notebooks:
        cells = json.loads(path.read_text("utf-8"))["cells"]
        source = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, ast.Import):
                found += [
                    f"{path.name}: import {a.name}" for a in node.names if "experiments." in a.name
                ]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("experiments"):
                if node.module != "experiments":
                    found.append(f"{path.name}: from {node.module}")
                imported += [alias.name for alias in node.names]
                found += [
                    f"{path.name}: {a.name}"
                    for a in node.names
                    if a.name not in experiments.__all__
                ]
    assert found == []
    # What the notebooks draw with is part of the surface, not reached through a private module.
    assert {"load_result", "plot_quality", "plot_budget"} <= set(imported)


def test_the_figures_load_on_first_use_not_with_the_package() -> None:
    # Importing the figures loads matplotlib and sets its headless backend: a reader who only
    # loads results must not get that as a side effect of ``import experiments``.
    code = (
        "import sys, experiments\n"
        "assert 'matplotlib' not in sys.modules, 'import experiments loaded matplotlib'\n"
        "from experiments import plot_quality\n"
        "import experiments._plots as p\n"
        "assert plot_quality is p.plot_quality and 'matplotlib' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_the_package_names_its_figures_and_nothing_else_lazily() -> None:
    plots = importlib.import_module("experiments._plots")
    assert {n for n in experiments.__all__ if n.startswith("plot_")} == set(plots.__all__)
    assert experiments.plot_cost is plots.plot_cost
    assert set(experiments.__all__) <= set(dir(experiments))
    with pytest.raises(AttributeError, match="plot_nothing"):
        _ = experiments.plot_nothing
    with pytest.raises(AttributeError, match="Adapter"):
        _ = experiments.Adapter
