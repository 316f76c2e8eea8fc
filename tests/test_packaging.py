"""What a built wheel installs: the library, and nothing else at the top level.

`pip install llmcache` must not put packages named `agent_core` or `experiments` into a user's
site-packages; the town and the study are the repository's (scripts/setup.sh installs them as a
development install). The wheel is built from a copy of the tracked files, so that nothing a
build left in the checkout (a stale build/ directory) can hide what the configuration selects.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tracked(root: Path) -> list[str]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    return [name for name in out.decode().split("\0") if name]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    source = tmp_path_factory.mktemp("source")
    for name in _tracked(ROOT):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"),
            *("-w", str(out), str(source)),
        ],
        check=True,
        capture_output=True,
    )
    (built,) = out.glob("llmcache-*.whl")
    with zipfile.ZipFile(built) as archive:
        return archive.namelist()


def test_the_wheel_holds_only_the_library(wheel: list[str]) -> None:
    top = {name.split("/", 1)[0] for name in wheel}
    info = {t for t in top if t.endswith(".dist-info")}
    assert len(info) == 1
    assert top - info == {"llmcache"}


def test_the_wheel_holds_the_whole_library_and_its_data(wheel: list[str]) -> None:
    names = set(wheel)
    assert {"llmcache/__init__.py", "llmcache/py.typed", "llmcache/llm/__init__.py"} <= names
    tracked = {
        name
        for name in _tracked(ROOT)
        if name.startswith("llmcache/") and (name.endswith(".py") or "/data/" in name)
    }
    assert tracked and tracked <= names
    metadata = next(n for n in wheel if n.endswith(".dist-info/METADATA"))
    assert metadata  # built with its metadata


def test_the_repository_only_needs_are_groups_not_extras() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    extras = set(project["project"].get("optional-dependencies", {}))
    groups = set(project["dependency-groups"])
    # A user's extras are the library's own; the town, the study and the tools are groups.
    assert {"dev", "experiments", "town"} <= groups
    assert not extras & groups
    assert "pg" in extras
