"""The public surface of ``experiments``: an ``__all__`` of names that exist (ruff sorts it)."""

from __future__ import annotations

import importlib

import pytest

import experiments

MODULES = [
    "experiments._budget_study",
    "experiments._collect",
    "experiments._cost",
    "experiments._cost_study",
    "experiments._data",
    "experiments._evaluate",
    "experiments._judge",
    "experiments._notebooks",
    "experiments._plots",
    "experiments._profiles",
    "experiments._quality",
    "experiments._rating",
    "experiments._report",
    "experiments._reproduce",
    "experiments._results",
    "experiments._retrieval",
    "experiments._stats",
    "experiments._thesis",
]


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
