"""Damaged index files and a damaged manifest.

Index files are derived data: damaged ones are rebuilt from the store, and even an index that
maps ids to the wrong vectors cannot serve a wrong answer (lookups re-score every candidate by
the vector stored in its entry). A damaged manifest is a clear error, and the command line
says so in one line.
"""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fault_tools import DIM, ask, fill, open_client, run_sql

from llmcache import SemanticCache
from llmcache.__main__ import main
from llmcache._local_backend import LocalBackend
from llmcache.errors import StoreError
from llmcache.index import HnswIndex
from llmcache.testing import HashEmbedder


def _sidecar(cache_dir: Path) -> tuple[Path, dict[str, object]]:
    # {pkey}.json; hnswlib's index files have a {file}.meta.json beside them.
    (path,) = [p for p in (cache_dir / "index").glob("*.json") if p.name.count(".") == 1]
    return path, json.loads(path.read_text(encoding="utf-8"))


def _index_file(cache_dir: Path) -> Path:
    _, sidecar = _sidecar(cache_dir)
    return cache_dir / "index" / str(sidecar["file"])


def _all_hit(cache_dir: Path, made: list[tuple[list[str], str]], **backend: object) -> None:
    location = LocalBackend(cache_dir, **backend) if backend else cache_dir  # type: ignore[arg-type]
    client, fake = open_client(location)
    for keywords, answer in made:
        content, info = ask(client, keywords)
        assert (info.outcome, content) == ("hit", answer)
    assert fake.calls == []
    client.close()


# -- index files -------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete", "garbage-sidecar"])
def test_a_damaged_index_file_is_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    made = fill(tmp_path / "c", 30)
    index = _index_file(tmp_path / "c")
    if damage == "truncate":
        index.write_bytes(index.read_bytes()[: index.stat().st_size // 2])
    elif damage == "flip":
        # A changed vector still loads as a valid .npy file: only the checksum notices.
        data = bytearray(index.read_bytes())
        data[-5] ^= 0x10
        index.write_bytes(bytes(data))
    elif damage == "delete":
        index.unlink()
    else:
        _sidecar(tmp_path / "c")[0].write_text('{"file": 12', encoding="utf-8")
    with caplog.at_level(logging.INFO, logger="llmcache"):
        _all_hit(tmp_path / "c", made)
    assert "rebuilding" in caplog.text or "ignoring unreadable index sidecar" in caplog.text
    # Rebuilt and saved again: the new files match the checksums of the new sidecar.
    _, sidecar = _sidecar(tmp_path / "c")
    assert sidecar["count"] == 30 and isinstance(sidecar["sha256"], dict)
    for name, digest in sidecar["sha256"].items():
        data = (tmp_path / "c" / "index" / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == digest


def test_a_damaged_hnsw_file_never_reaches_hnswlib(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # hnswlib's loader trusts the sizes written in its file; a flipped size byte can make it
    # allocate wildly or crash. The checksum in the sidecar is checked first.
    made = fill(tmp_path / "c", 20)
    with LocalBackend(tmp_path / "c", index_factory=HnswIndex) as backend:
        client, _ = open_client(backend)
        ask(client, ["one", "more", "question"])  # rebuilt as HNSW, saved on close
        client.close()
    index = _index_file(tmp_path / "c")
    assert (index.parent / (index.name + ".meta.json")).exists()
    data = bytearray(index.read_bytes())
    data[8] ^= 0x7F  # inside the header's element counts
    index.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="llmcache"):
        _all_hit(tmp_path / "c", made, index_factory=HnswIndex)
    assert "does not match its checksum" in caplog.text


def test_an_index_from_before_checksums_still_loads(tmp_path: Path) -> None:
    made = fill(tmp_path / "c", 10)
    path, sidecar = _sidecar(tmp_path / "c")
    del sidecar["sha256"]
    path.write_text(json.dumps(sidecar), encoding="utf-8")
    with LocalBackend(tmp_path / "c") as backend:
        backend.check_embedder(f"hash-v1-{DIM}", DIM)
        (partition,) = backend.partitions()
        state = backend._state(partition.key, DIM)
        assert state.indexed_upto == 10  # loaded, not rebuilt
    _all_hit(tmp_path / "c", made)


def test_an_index_mapping_ids_to_the_wrong_vectors_never_serves_a_wrong_answer(
    tmp_path: Path,
) -> None:
    made = fill(tmp_path / "c", 12)
    index = _index_file(tmp_path / "c")
    record = np.load(index, allow_pickle=False)
    record["id"] = np.roll(record["id"], 1)  # every vector now claims its neighbour's id
    with open(index, "wb") as f:
        np.save(f, record, allow_pickle=False)
    # An index file from before checksums (or written by a buggy writer): it loads as it is.
    path, sidecar = _sidecar(tmp_path / "c")
    del sidecar["sha256"]
    path.write_text(json.dumps(sidecar), encoding="utf-8")
    client, _ = open_client(tmp_path / "c")
    for keywords, answer in made:
        content, info = ask(client, keywords)
        if info.outcome == "hit":
            assert content == answer  # re-scored by the entry's own vector: never a neighbour's
        else:
            assert info.similarity is None or info.similarity.cosine < 0.9
    client.close()


# -- the manifest ------------------------------------------------------------------------------


def _damage_manifest(cache_dir: Path, how: str) -> None:
    if how == "garbage":
        run_sql(cache_dir, "UPDATE Cache SET value = 'garbage' WHERE key = 'manifest'")
    elif how == "not-utf8":
        run_sql(
            cache_dir,
            "UPDATE Cache SET value = CAST(? AS TEXT) WHERE key = 'manifest'",
            (b'{"embedder_id": "\xff\xfe',),
        )
    elif how == "wrong-shape":
        run_sql(cache_dir, """UPDATE Cache SET value = '{"dim": "many"}' WHERE key = 'manifest'""")
    elif how == "db-garbage":
        db = cache_dir / "store" / "cache.db"
        db.write_bytes(b"this is not a database at all " * 300)
    else:  # truncated database file
        db = cache_dir / "store" / "cache.db"
        db.write_bytes(db.read_bytes()[:1024])


MANIFEST_DAMAGE = ["garbage", "not-utf8", "wrong-shape", "db-garbage", "db-truncated"]


@pytest.mark.parametrize("how", MANIFEST_DAMAGE)
def test_a_damaged_manifest_is_a_clear_error(tmp_path: Path, how: str) -> None:
    fill(tmp_path / "c", 3)
    _damage_manifest(tmp_path / "c", how)
    with pytest.raises(StoreError) as err:
        SemanticCache(tmp_path / "c", embedder=HashEmbedder(dim=DIM))
    message = str(err.value)
    assert "\n" not in message and str(tmp_path / "c") in message


@pytest.mark.parametrize("how", MANIFEST_DAMAGE)
def test_stats_of_a_damaged_cache_prints_one_line_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    fill(tmp_path / "c", 3)
    _damage_manifest(tmp_path / "c", how)
    assert main(["stats", str(tmp_path / "c")]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("llmcache stats: ")
    assert "Traceback" not in err


def test_the_stats_command_exits_non_zero_with_one_line(tmp_path: Path) -> None:
    fill(tmp_path / "c", 1)
    _damage_manifest(tmp_path / "c", "garbage")
    done = subprocess.run(
        [sys.executable, "-m", "llmcache", "stats", str(tmp_path / "c")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert "manifest" in line and "damaged" in line


def test_a_store_that_fails_mid_lookup_answers_without_the_cache(tmp_path: Path) -> None:
    # A disk failing under an open database cannot be made for real in a test: injected.
    from unittest import mock

    made = fill(tmp_path / "c", 2)
    client, fake = open_client(tmp_path / "c")
    failing = StoreError("cannot read 'e:…' in the cache: disk I/O error")
    with mock.patch.object(client.cache.backend, "search", side_effect=failing):
        content, info = ask(client, made[0][0])
    assert content and info.outcome == "miss" and info.store_failed and len(fake.calls) == 1
    assert client.cache.stats().total.store_failures == 1
    client.close()
