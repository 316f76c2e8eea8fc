"""Fixtures of the town's tests: the bundled world, a deterministic embedder, and a TownLLM
over the ScriptedLLM test double (through a real CachedLLM)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# pytest's default "prepend" import mode puts tests/ on sys.path, where this directory,
# tests/agent_core/, would be found as a namespace package named ``agent_core`` before the
# editable install's finder is asked. The repository root first on the path makes the real
# package win (a regular package always beats a namespace portion).
_ROOT = str(Path(__file__).resolve().parents[2])
if sys.path[:1] != [_ROOT]:
    sys.path.insert(0, _ROOT)

from agent_core import TownLLM, World, load_world, open_town_llm  # noqa: E402
from agent_core.testing import ScriptedLLM  # noqa: E402
from llmcache import Mode  # noqa: E402
from llmcache.testing import HashEmbedder  # noqa: E402

MakeLLM = Callable[..., TownLLM]


@pytest.fixture
def world() -> World:
    return load_world()


@pytest.fixture
def embedder() -> HashEmbedder:
    return HashEmbedder()


@pytest.fixture
def make_llm(tmp_path: Path) -> Iterator[MakeLLM]:
    """``make_llm(mode=Mode.OFF, record=False, **scripted_kwargs)`` → a TownLLM over a fresh
    ScriptedLLM (or over ``client``); every one made is closed afterwards."""
    made: list[TownLLM] = []

    def factory(
        mode: Mode = Mode.OFF,
        record: bool = False,
        threshold: float | None = None,
        concurrency: int = 1,
        client: ScriptedLLM | None = None,
        **kwargs: Any,
    ) -> TownLLM:
        n = len(made)
        llm = open_town_llm(
            client if client is not None else ScriptedLLM(**kwargs),
            model="scripted",
            cache_dir=tmp_path / f"cache{n}",
            mode=mode,
            embedder=HashEmbedder(),
            record_to=tmp_path / f"run{n}.jsonl" if record else None,
            threshold=threshold,
            superior_model="gpt-4o",
            concurrency=concurrency,
        )
        made.append(llm)
        return llm

    yield factory
    for llm in made:
        llm.close()
