"""An append-only JSONL record of every call: the datasets the experiments read.

One line per logical call (``kind == "call"``) holds the validated answer and how it was made.
Every answer the validator refused gets a line of its own (``kind == "invalid_attempt"``,
``resubmission == True``), so a dataset can drop resubmissions as the thesis did while still
counting them.
"""

from __future__ import annotations

import gzip
import logging
import threading
import time
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import BaseModel, Field

from ._types import CacheOptions, CallInfo, Usage

__all__ = ["RecordedCall", "Recorder", "read_records"]

logger = logging.getLogger(__name__)


class RecordedCall(BaseModel):
    """One line of a recorded dataset."""

    kind: Literal["call", "invalid_attempt"] = "call"
    ts: float = Field(default_factory=time.time)
    category: str
    agent: str
    keywords: list[str] | None = None
    options: list[str] | None = None
    embed_text: str | None = None
    messages: list[dict[str, Any]]
    model: str
    params: dict[str, Any] = Field(default_factory=dict)
    constraints: dict[str, Any] = Field(default_factory=dict)  # CacheOptions.constraints
    response: str | None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    usage_source: str = "api"
    attempts: int = 1
    attempt: int | None = None
    resubmission: bool = False
    valid: bool = True
    escalated: bool = False
    error: str | None = None
    outcome: str = "bypass"
    similarity: float | None = None  # raw cosine of the candidate used or rejected
    similarity_normalized: float | None = None  # the thesis's (cos + 1) / 2
    modifier: str | None = None
    entry_id: int | None = None
    cost_usd: float = 0.0
    avoided_usd: float = 0.0
    latency_s: float = 0.0
    metadata: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def from_info(
        cls,
        info: CallInfo,
        *,
        options: CacheOptions,
        messages: list[dict[str, Any]],
        params: dict[str, Any],
        constraints: dict[str, Any],
        response: str | None,
    ) -> RecordedCall:
        """The line of a whole call: how it was answered (``info``, the record the ledger
        counts too) beside what only the recorder writes down: what was asked (the caller's
        options, the prompt as messages, the output-affecting parameters and per-query
        constraints) and the answer's text."""
        usage = info.usage
        similarity = info.similarity
        return cls(
            **_asked(options, messages, params, constraints),
            model=info.model or "",
            embed_text=info.embed_text,
            response=response,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            usage_source=usage.source,
            attempts=info.attempts,
            escalated=info.escalated,
            outcome=info.outcome,
            similarity=similarity.cosine if similarity else None,
            similarity_normalized=similarity.normalized if similarity else None,
            modifier=info.modifier,
            entry_id=info.entry_id,
            cost_usd=info.cost_usd,
            avoided_usd=info.avoided_usd,
            latency_s=info.latency_s,
            # A fallback's text is the caller's, not an answer of the LLM: not a valid one.
            valid=not info.fallback,
            error="no valid answer: the fallback answered" if info.fallback else None,
        )

    @classmethod
    def invalid_attempt(
        cls,
        *,
        options: CacheOptions,
        messages: list[dict[str, Any]],
        params: dict[str, Any],
        constraints: dict[str, Any],
        attempt: int,
        model: str,
        response: str | None,
        usage: Usage,
        error: str,
        outcome: str,
    ) -> RecordedCall:
        """The line of one answer the validator refused, asked as :meth:`from_info`'s call
        was; a resubmission follows it."""
        return cls(
            **_asked(options, messages, params, constraints),
            kind="invalid_attempt",
            model=model,
            response=response,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            usage_source=usage.source,
            attempt=attempt,
            resubmission=True,
            valid=False,
            error=error,
            outcome=outcome,
        )


def _asked(
    options: CacheOptions,
    messages: list[dict[str, Any]],
    params: dict[str, Any],
    constraints: dict[str, Any],
) -> dict[str, Any]:
    """The fields every line of one call shares: what the call asked."""
    return {
        "category": options.category,
        "agent": options.agent,
        "keywords": list(options.keywords) if options.keywords else None,
        "options": list(options.options) if options.options else None,
        "messages": messages,
        "params": params,
        "constraints": constraints,
        "metadata": options.metadata,
    }


class Recorder:
    """Appends :class:`RecordedCall` lines to a JSONL file; safe to share between threads.

    Each line is written with a single ``write`` of a complete line and flushed, so a crash
    leaves at most a truncated last line (``read_records`` skips it).

    Recording never breaks a call: by the time a call is recorded its answer has been paid
    for. A call that cannot be written (a lone surrogate in a message, an object in
    ``metadata``, a full disk) is logged, counted in ``failures`` and left out of the dataset,
    rather than written in an altered form the experiments would then read as real.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._file = self.path.open("a", encoding="utf-8")
        self.failures = 0
        self._torn = False  # a failed write may have left part of a line behind

    def record(self, call: RecordedCall) -> bool:
        """Append one line; ``False`` (logged and counted, never raised) when it cannot."""
        try:
            line = call.model_dump_json() + "\n"
        except Exception as exc:  # PydanticSerializationError and whatever a field's type raises
            return self._failed(call, f"it cannot be written as JSON: {exc}")
        with self._lock:
            try:
                # After a torn write, start on a fresh line so this one stays readable.
                self._file.write(("\n" if self._torn else "") + line)
                self._file.flush()
                self._torn = False
            except (OSError, ValueError) as exc:  # ValueError: the file was closed
                self._torn = True
                return self._failed(call, f"the write failed: {exc}", locked=True)
        return True

    def _failed(self, call: RecordedCall, why: str, *, locked: bool = False) -> bool:
        if locked:
            self.failures += 1
        else:
            with self._lock:
                self.failures += 1
        logger.warning(
            "could not record a %s call of %s/%s to %s: %s",
            call.kind,
            call.category,
            call.agent,
            self.path,
            why[:300],
        )
        return False

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _open_text(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open(encoding="utf-8")


def read_records(path: str | Path, *, include_invalid: bool = False) -> list[RecordedCall]:
    """Read a recorded dataset (``.jsonl``, or ``.jsonl.gz`` as datasets are kept compressed);
    a truncated or malformed line is skipped, not fatal."""
    out: list[RecordedCall] = []
    path = Path(path)
    with _open_text(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rec = RecordedCall.model_validate_json(line)
            except ValueError:
                continue
            if rec.kind == "call" or include_invalid:
                out.append(rec)
    return out
