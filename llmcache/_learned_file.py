"""Learned templates kept in a file, so that the next process files their calls from its first
call rather than passing eight of each through again (``TemplateLearner(path=...)``).

The file is JSON: a version and, per learned template, its text as the learner aligns it (its
tokens, a slot as ``null``) and the calls it filed. It is written whole, to a temporary file
beside it and then renamed over it, whenever a template is learned, so a reader never sees half
of one. Several processes may share one: each writes what it has learned merged with what the
file holds when it writes (by the template's text), so one process's templates are not lost
to another's writes, except when two write at the same instant (the later rename wins; the
other's templates are learned again). A file that cannot be read is moved aside
(``<name>.damaged-<time>``), logged, and the learner starts empty: it is a store of what can be
learned again, and nothing in it is worth refusing to start over.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Collection, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

__all__ = ["SavedTemplate", "read_learned", "write_learned"]

logger = logging.getLogger("llmcache")

#: The file's format; a file of another version is read as damaged (moved aside).
VERSION = 1


class SavedTemplate(BaseModel):
    """One learned template as the file keeps it: its tokens, ``None`` for a slot."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tokens: list[str | None]
    filed: int = 0
    #: The code site it was learned at (``llmcache/_site.py``); ``None`` in files written
    #: before sites were kept.
    site: str | None = None


class _LearnedFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int
    templates: list[SavedTemplate]


def read_learned(path: Path) -> list[SavedTemplate]:
    """The templates the file at ``path`` holds (none when it does not exist); a file that
    cannot be read is moved aside and logged, and nothing is read from it."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        return _aside(path, str(exc))
    try:
        saved = _LearnedFile.model_validate_json(text)
    except ValidationError as exc:
        return _aside(path, f"{exc.error_count()} errors, the first: {exc.errors()[0]['msg']}")
    if saved.version != VERSION:
        return _aside(path, f"version {saved.version}, not {VERSION}")
    return saved.templates


def write_learned(
    path: Path,
    templates: Sequence[SavedTemplate],
    *,
    dropped: Collection[tuple[str | None, ...]] = (),
    limit: int | None = None,
) -> None:
    """Write ``templates`` to ``path``, merged with those the file holds now (by their tokens;
    ours win; ``dropped``, templates this process replaced, are left out), at most ``limit``
    (ours first), atomically. An error is logged, never raised: a call must not fail for it."""
    try:
        mine = {tuple(t.tokens): t for t in templates}
        theirs = [
            t
            for t in read_learned(path)
            if tuple(t.tokens) not in mine and tuple(t.tokens) not in dropped
        ]
        kept = [*mine.values(), *theirs][:limit]
        body = _LearnedFile(version=VERSION, templates=kept)
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(body.model_dump_json())
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except OSError:
        logger.warning("cannot write the learned templates to %s", path, exc_info=True)


def _aside(path: Path, why: str) -> list[SavedTemplate]:
    aside = path.with_name(f"{path.name}.damaged-{int(time.time())}")
    try:
        os.replace(path, aside)
    except OSError:
        aside = path
    logger.warning(
        "the learned templates in %s cannot be read (%s): kept as %s, learning starts afresh",
        path,
        why,
        aside,
    )
    return []
