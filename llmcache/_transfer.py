"""Copying a cache between backends: a table built on a laptop seeds a cluster, and back.

``transfer(src, dst)`` copies every entry of every partition of ``src`` into ``dst`` (any two
:class:`~llmcache.storage.CacheBackend` s: a cache directory, a Postgres schema, a fake). Entries
keep
everything but their id, which ``dst`` assigns. The destination must be empty or built with the
same embedder: vectors of different embedders cannot be compared, so a mismatch is refused before
anything is copied. Entries already present in ``dst`` (same partition, text, answer and vector)
are skipped, so running the same transfer twice, or merging two caches, stores nothing twice.

Command line (dispatched from ``python -m llmcache``)::

    python -m llmcache export SOURCE DESTINATION [--stats]
    python -m llmcache import SOURCE DESTINATION [--stats]

Both copy SOURCE into DESTINATION; each is a cache directory or a ``postgresql://`` DSN.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ._errors import ConfigurationError, EmbedderMismatchError, LLMCacheError
from ._manifest import Manifest
from ._progress import ProgressBar
from ._protocols import CacheBackend
from ._types import CacheEntry, Partition

__all__ = ["export_main", "import_main", "transfer"]

logger = logging.getLogger(__name__)

_BATCH = 500


def _first_entry(backend: CacheBackend) -> CacheEntry | None:
    for partition in backend.partitions():
        for entry in backend.iterate(partition.key):
            return entry
    return None


def _fingerprint(entry: CacheEntry) -> str:
    """What makes two entries the same answer to the same question, whatever their ids."""
    parts = [entry.partition.key, entry.embed_text, entry.content, entry.vector_b64]
    return hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()


def _batches(entries: Iterator[CacheEntry], size: int) -> Iterator[list[CacheEntry]]:
    batch: list[CacheEntry] = []
    for entry in entries:
        batch.append(entry)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def transfer(
    src: CacheBackend,
    dst: CacheBackend,
    *,
    stats: bool = False,
    partitions: list[Partition] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Copy the entries of ``src`` into ``dst``; return how many were copied.

    ``partitions`` limits the copy to those tables. ``stats=True`` also adds ``src``'s
    counters to ``dst``'s (counters only add up, so do that once per source). Raises
    :class:`~llmcache.errors.EmbedderMismatchError` before copying anything when ``dst`` was built
    with
    another embedder, or when ``src`` holds vectors of more than one embedder.
    ``progress`` is told ``(entries read, entries in the tables copied)`` after each batch.
    """
    manifest = src.read_manifest()
    if manifest is None:
        first = _first_entry(src)
        if first is not None:
            manifest = Manifest(embedder_id=first.embedder_id, dim=int(first.vector().shape[0]))
    if manifest is not None:
        dst.check_embedder(manifest.embedder_id, manifest.dim)

    copied = seen = 0
    tables = partitions if partitions is not None else src.partitions()
    total = sum(src.count(p.key) for p in tables) if progress is not None else 0
    if progress is not None:
        progress(0, total)
    for partition in tables:
        pkey = partition.key
        present = {_fingerprint(e) for e in dst.iterate(pkey)}
        before = copied
        skipped = 0
        for batch in _batches(src.iterate(pkey), _BATCH):
            fresh: list[CacheEntry] = []
            for entry in batch:
                if manifest is not None and (
                    entry.embedder_id != manifest.embedder_id
                    or entry.vector().shape[0] != manifest.dim
                ):
                    raise EmbedderMismatchError(
                        f"entry {pkey}/{entry.id} of the source was made by "
                        f"{entry.embedder_id!r} (dimension {entry.vector().shape[0]}), not by "
                        f"the source's embedder {manifest.embedder_id!r} ({manifest.dim})"
                    )
                fingerprint = _fingerprint(entry)
                if fingerprint in present:
                    skipped += 1
                    continue
                present.add(fingerprint)
                fresh.append(entry.model_copy(update={"id": -1}))
            dst.add_many(fresh)  # PgBackend: one pipelined transaction per batch
            copied += len(fresh)
            seen += len(batch)
            if progress is not None:
                # An entry evicted after counting is not read: never past the total.
                progress(min(seen, total), total)
        logger.info(
            "copied %d entries of %s/%s (%d already there)",
            copied - before,
            partition.category,
            partition.agent,
            skipped,
        )
    if stats:
        for key, counters in src.read_stats().items():
            dst.add_stats(key, counters)
    return copied


# -- command line ---------------------------------------------------------------------------------


def _is_dsn(location: str) -> bool:
    return location.startswith(("postgresql://", "postgres://"))


def _open(location: str, schema: str | None, *, must_exist: bool) -> CacheBackend:
    if _is_dsn(location):
        try:
            from ._pg import PgBackend
        except ImportError as exc:  # pragma: no cover - _pg imports without the extra
            raise ConfigurationError(f"cannot load the Postgres backend: {exc}") from exc
        backend: CacheBackend = (
            PgBackend(location, schema=schema) if schema else PgBackend(location)
        )
        return backend
    if schema:
        raise ConfigurationError(f"--*-schema applies to postgresql:// DSNs, not to {location}")
    path = Path(location)
    if must_exist and not (path / "store").is_dir():
        # Opening a directory creates it: a typo must not "export" an empty new cache.
        raise ConfigurationError(f"{location} is not an llmcache cache directory")
    from ._local_backend import LocalBackend

    return LocalBackend(path)


def _parser(command: str) -> argparse.ArgumentParser:
    verb = {"export": "Export", "import": "Import"}.get(command, "Copy")
    parser = argparse.ArgumentParser(
        prog=f"python -m llmcache {command}",
        description=(
            f"{verb} a cache: copy every entry of SOURCE into DESTINATION. Each is a cache "
            "directory or a postgresql:// DSN. Entries already in DESTINATION are skipped; a "
            "DESTINATION built with another embedder is refused."
        ),
    )
    parser.add_argument("source", help="cache directory or postgresql:// DSN to read")
    parser.add_argument("destination", help="cache directory or postgresql:// DSN to write")
    parser.add_argument("--source-schema", help="Postgres schema of SOURCE (default: llmcache)")
    parser.add_argument("--dest-schema", help="Postgres schema of DESTINATION (default: llmcache)")
    parser.add_argument(
        "--stats",
        action="store_true",
        help="also add SOURCE's counters (lookups, hits, dollars) to DESTINATION's; once only",
    )
    return parser


def _main(command: str, argv: list[str] | None) -> int:
    args = _parser(command).parse_args(argv)
    opened: list[Any] = []
    try:
        src = _open(args.source, args.source_schema, must_exist=True)
        opened.append(src)
        dst = _open(args.destination, args.dest_schema, must_exist=False)
        opened.append(dst)
        with ProgressBar(f"{command}: copying entries") as bar:
            copied = transfer(src, dst, stats=args.stats, progress=bar)
        rows = [(p, dst.count(p.key)) for p in dst.partitions()]
    except LLMCacheError as exc:
        sys.stderr.write(f"{command}: {exc}\n")
        return 1
    finally:
        for backend in reversed(opened):
            backend.close()
    total = sum(n for _, n in rows)
    sys.stdout.write(
        f"{command}: copied {copied} entries from {_describe(args.source)} to "
        f"{_describe(args.destination)}; it now holds {total} entries in {len(rows)} tables\n"
    )
    return 0


def _describe(location: str) -> str:
    if _is_dsn(location):
        from ._pg import describe_dsn

        return describe_dsn(location)
    return os.fspath(location)


def export_main(argv: list[str] | None = None) -> int:
    """``python -m llmcache export SOURCE DESTINATION``."""
    return _main("export", argv)


def import_main(argv: list[str] | None = None) -> int:
    """``python -m llmcache import SOURCE DESTINATION``."""
    return _main("import", argv)
