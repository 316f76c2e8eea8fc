"""The replay benchmark's choice of recorded calls (the replay itself needs llama-server)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_replay as br  # noqa: E402  (a script beside the benchmarks, not a package)


def _write(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_picks_the_first_calls_of_each_chosen_category(tmp_path: Path) -> None:
    message = [{"role": "user", "content": "hi"}]
    records: list[dict[str, object]] = [
        {"kind": "run", "seed": 1},
        *({"kind": "call", "category": "a", "messages": message, "n": i} for i in range(4)),
        *({"kind": "call", "category": "b", "messages": message, "n": i} for i in range(4)),
        {"kind": "call", "category": "c", "messages": message, "n": 0},
        {"kind": "call", "category": "a", "messages": None, "n": 99},  # nothing to resend
    ]
    dataset = _write(tmp_path / "run.jsonl", records)

    picked = br.load_calls(dataset, ["a", "b"], per_category=2)
    assert [(r["category"], r["n"]) for r in picked] == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]

    every = br.load_calls(dataset, [], per_category=1)
    assert [(r["category"], r["n"]) for r in every] == [("a", 0), ("b", 0), ("c", 0)]


def test_constraints_replace_only_the_response_format() -> None:
    import pytest

    schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}
    record: dict[str, object] = {"constraints": {"response_format": schema, "max_tokens": 40}}
    assert br.request_constraints(record, "recorded") == {
        "response_format": schema,
        "max_tokens": 40,
    }
    assert br.request_constraints(record, "json_object") == {
        "response_format": {"type": "json_object"},
        "max_tokens": 40,
    }
    assert br.request_constraints(record, "none") == {"max_tokens": 40}
    assert record["constraints"] == {"response_format": schema, "max_tokens": 40}  # untouched
    with pytest.raises(ValueError, match="one of"):
        br.request_constraints(record, "grammar")
