"""Copying caches between backends: embedded → Postgres → embedded, the CLI, refusals.

Tests that need Postgres use the ``pg_backends`` fixture and skip without the [pg] extra; the
rest run against cache directories only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray
from pg_support import PgBackends

from llmcache._errors import EmbedderMismatchError
from llmcache._local_backend import LocalBackend
from llmcache._protocols import CacheBackend
from llmcache._transfer import export_main, import_main, transfer
from llmcache._types import CacheEntry, EmbedMode, Partition, Usage

DIM = 16
EMBEDDER = "test-embedder-v1"
PARTS = [
    Partition(category="importance", agent="Liam Oliver", params_hash="h0", model="m"),
    Partition(category="importance", agent="Ada Lee", params_hash="h0", model="m"),
    Partition(category="plan", agent="", params_hash="h1", model="m"),
]


def unit(seed: int) -> NDArray[np.float32]:
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return (v / np.linalg.norm(v)).astype(np.float32)


def make_entry(partition: Partition, seed: int) -> CacheEntry:
    text = f"{partition.agent} is idle {seed}"
    return CacheEntry(
        partition=partition,
        embed_text=text,
        embed_mode=EmbedMode.KEYWORD,
        embedder_id=EMBEDDER,
        vector_b64=CacheEntry.encode_vector(unit(seed)),
        keywords=tuple(text.split()),
        messages=[{"role": "user", "content": text}],
        content=f'{{"rating": {seed % 10}}}',
        completion={"id": f"c{seed}", "choices": [{"message": {"content": str(seed)}}]},
        usage=Usage(prompt_tokens=seed, completion_tokens=3),
        metadata={"sim_time": seed},
    )


def filled(path: Path) -> LocalBackend:
    """A cache directory with three tables, one entry evicted."""
    backend = LocalBackend(path)
    backend.check_embedder(EMBEDDER, DIM)
    for i in range(45):
        entry_id = backend.add(make_entry(PARTS[i % 3], i))
        if i == 10:
            backend.evict(PARTS[1].key, entry_id)
    backend.add_stats(PARTS[0].key, {"lookups": 5, "max_sim": 0.9})
    return backend


def contents(backend: CacheBackend) -> dict[str, list[str]]:
    """Every table's entries without their ids, sorted: what a copy must preserve."""
    return {
        p.key: sorted(
            e.model_copy(update={"id": -1}).model_dump_json() for e in backend.iterate(p.key)
        )
        for p in backend.partitions()
    }


def test_embedded_to_postgres_and_back(tmp_path: Path, pg_backends: PgBackends) -> None:
    src = filled(tmp_path / "laptop")
    expected = contents(src)
    assert sum(map(len, expected.values())) == 44
    cluster = pg_backends.make()
    assert transfer(src, cluster) == 44
    assert contents(cluster) == expected
    assert {p.key for p in cluster.partitions()} == {p.key for p in PARTS}
    # The copy answers lookups like the original.
    for seed in (0, 22, 44):
        part = PARTS[seed % 3]
        best = cluster.search(part, unit(seed), 1)[0]
        assert cluster.get(part.key, best[0]).embed_text == f"{part.agent} is idle {seed}"  # type: ignore[union-attr]
        assert best[1] == pytest.approx(1.0, abs=1e-5)

    back = LocalBackend(tmp_path / "back")
    try:
        assert transfer(cluster, back) == 44
        assert contents(back) == expected
        assert back.read_manifest().embedder_id == EMBEDDER  # type: ignore[union-attr]
    finally:
        back.close()
        src.close()


def test_a_destination_with_another_embedder_is_refused_before_copying(
    tmp_path: Path, pg_backends: PgBackends
) -> None:
    src = filled(tmp_path / "laptop")
    cluster = pg_backends.make()
    cluster.check_embedder("another-embedder", 384)
    try:
        with pytest.raises(EmbedderMismatchError, match="another-embedder"):
            transfer(src, cluster)
        assert cluster.partitions() == []
    finally:
        src.close()


def test_transfer_twice_copies_nothing_new(tmp_path: Path) -> None:
    src = filled(tmp_path / "a")
    dst = LocalBackend(tmp_path / "b")
    try:
        assert transfer(src, dst) == 44
        assert transfer(src, dst) == 0
        src.add(make_entry(PARTS[2], 1000))
        assert transfer(src, dst) == 1  # a merge brings only what is new
        assert contents(dst) == contents(src)
    finally:
        src.close()
        dst.close()


def test_counters_are_copied_only_when_asked(tmp_path: Path) -> None:
    src = filled(tmp_path / "a")
    plain, with_stats = LocalBackend(tmp_path / "b"), LocalBackend(tmp_path / "c")
    try:
        transfer(src, plain)
        assert plain.read_stats() == {}
        transfer(src, with_stats, stats=True)
        assert with_stats.read_stats() == {PARTS[0].key: {"lookups": 5.0, "max_sim": 0.9}}
    finally:
        for backend in (src, plain, with_stats):
            backend.close()


class _NoManifest:
    """A backend that keeps no embedder record (a third-party backend may not)."""

    def __init__(self, inner: LocalBackend) -> None:
        self._inner = inner

    def read_manifest(self) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_the_embedder_is_taken_from_the_entries_when_not_recorded(tmp_path: Path) -> None:
    src = filled(tmp_path / "a")
    dst = LocalBackend(tmp_path / "b")
    dst.check_embedder("another-embedder", DIM)
    try:
        with pytest.raises(EmbedderMismatchError):
            transfer(_NoManifest(src), dst)  # type: ignore[arg-type]
        assert dst.partitions() == []
    finally:
        src.close()
        dst.close()


def test_export_and_import_commands(
    tmp_path: Path, pg_backends: PgBackends, capsys: pytest.CaptureFixture[str]
) -> None:
    filled(tmp_path / "laptop").close()
    schema = pg_backends.make().schema
    export = [str(tmp_path / "laptop"), pg_backends.dsn, "--dest-schema", schema, "--stats"]
    assert export_main(export) == 0
    out = capsys.readouterr().out
    assert "copied 44 entries" in out and "44 entries in 3 tables" in out
    assert "postgresql://" not in out  # the DSN may hold a password
    code = import_main(
        [pg_backends.dsn, str(tmp_path / "back"), "--source-schema", schema, "--stats"]
    )
    assert code == 0
    assert "copied 44 entries" in capsys.readouterr().out
    back, laptop = LocalBackend(tmp_path / "back"), LocalBackend(tmp_path / "laptop")
    try:
        assert contents(back) == contents(laptop)
        assert back.read_stats() == laptop.read_stats()
    finally:
        back.close()
        laptop.close()


def test_a_missing_source_directory_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert export_main([str(tmp_path / "typo"), str(tmp_path / "out")]) == 1
    assert "not an llmcache cache directory" in capsys.readouterr().err
    assert not (tmp_path / "typo").exists()
    assert not (tmp_path / "out").exists()
