"""Two town workers in separate processes share one Postgres-backed cache (issue: scale-out).

Each worker is a real ``python -m agent_core run`` process with the scripted test double as its
LLM; what is measured is the cache, not the model.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmcache.recording import read_records

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def _run_worker(cache: str, seed: int, out: Path) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable, "-m", "agent_core", "run", "--days", "0.5", "--seed", str(seed),
        "--llm", "scripted", "--embedder", "hash", "--cache-mode", "online",
        "--cache-dir", cache, "--out", str(out), "--quiet",
    ]  # fmt: skip
    log = out.with_suffix(".log").open("wb")
    return subprocess.Popen(
        cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=log, stderr=log
    )


def _finish(proc: subprocess.Popen[bytes]) -> None:
    code = proc.wait(timeout=600)
    out = Path(proc.args[proc.args.index("--out") + 1])  # type: ignore[index,union-attr]
    assert code == 0, out.with_suffix(".log").read_text()[-3000:]


def _hits(path: Path) -> tuple[int, int, set[int]]:
    calls = [r for r in read_records(path) if r.outcome in ("hit", "miss")]
    hits = [r for r in calls if r.outcome == "hit"]
    return len(hits), len(calls), {r.entry_id for r in hits if r.entry_id is not None}


def _stored(path: Path) -> set[int]:
    return {r.entry_id for r in read_records(path) if r.outcome == "miss" and r.entry_id}


def test_second_worker_reuses_the_first_workers_entries(pg_dsn: str, tmp_path: Path) -> None:
    # Two workers at once, in separate processes, feeding one cache ...
    first = _run_worker(pg_dsn, 1, tmp_path / "w1.jsonl")
    second = _run_worker(pg_dsn, 2, tmp_path / "w2.jsonl")
    _finish(first)
    _finish(second)
    # ... then a third worker (seed 3) on the shared cache, and the same worker alone.
    _finish(_run_worker(pg_dsn, 3, tmp_path / "shared.jsonl"))
    _finish(_run_worker(str(tmp_path / "alone"), 3, tmp_path / "alone.jsonl"))

    shared_hits, shared_lookups, used = _hits(tmp_path / "shared.jsonl")
    alone_hits, alone_lookups, _ = _hits(tmp_path / "alone.jsonl")
    earlier = _stored(tmp_path / "w1.jsonl") | _stored(tmp_path / "w2.jsonl")
    # Hits change what agents do next, so the two runs differ in length: compare rates.
    assert shared_lookups > 0 and alone_lookups > 0
    assert shared_hits / shared_lookups > alone_hits / alone_lookups, (shared_hits, alone_hits)
    # The extra hits are answers the earlier workers stored.
    assert used & earlier
    # Concurrent writers lost nothing and duplicated nothing: ids are unique across workers.
    w1, w2 = _stored(tmp_path / "w1.jsonl"), _stored(tmp_path / "w2.jsonl")
    assert w1 and w2 and not (w1 & w2)
    print(
        f"\nseed 3 hit rate: shared cache {shared_hits}/{shared_lookups} "
        f"({shared_hits / shared_lookups:.1%}), alone {alone_hits}/{alone_lookups} "
        f"({alone_hits / alone_lookups:.1%}); {len(used & earlier)} distinct earlier entries reused"
    )
