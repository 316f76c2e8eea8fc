"""python -m llmcache: stats and tables of a cache directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmcache import CachedLLM, CacheOptions, SemanticCache
from llmcache.__main__ import main
from llmcache.testing import FakeOpenAI, HashEmbedder


def _fill(path: Path) -> None:
    client = CachedLLM(FakeOpenAI(), cache=SemanticCache(path, embedder=HashEmbedder(dim=32)))
    for agent in ("Alice Wilson", "Alice Wilson", "Ethan Wilson"):
        client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": "rate: tree is idle"}],
            cache=CacheOptions(category="importance score", agent=agent, keywords=["tree is idle"]),
        )
    client.close()


def test_stats_prints_a_row_per_table_and_a_total(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _fill(tmp_path / "c")
    assert main(["stats", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = {line.split()[2] + " " + line.split()[3]: line for line in out[2:-1]}
    assert set(rows) == {"Alice Wilson", "Ethan Wilson"}
    alice = rows["Alice Wilson"].split()
    assert alice[4:7] == ["2", "1", "50.0%"]  # lookups, hits, hit rate
    assert out[-1].startswith("(all)") and out[-1].split()[1:4] == ["3", "1", "33.3%"]


def test_stats_json_and_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fill(tmp_path / "c")
    main(["stats", "--json", str(tmp_path / "c")])
    data = json.loads(capsys.readouterr().out)
    assert sum(t["hits"] for t in data["tables"]) == 1
    main(["tables", str(tmp_path / "c")])
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert {(x["agent"], x["entries"]) for x in lines} == {("Alice Wilson", 1), ("Ethan Wilson", 1)}


def test_stats_of_an_empty_cache_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["stats", str(tmp_path / "empty")]) == 0
    assert "no calls recorded yet" in capsys.readouterr().out


def test_serve_reaches_the_llm_runtime(capsys: pytest.CaptureFixture[str]) -> None:
    # `serve` is the one command that loads llmcache.llm; a bad model is refused before any
    # server starts.
    assert main(["serve", "--model", "no-such-model"]) == 2
    assert "unknown local model" in capsys.readouterr().err
