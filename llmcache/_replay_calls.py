"""The calls a replay sends: one model, read from the library's own recording or from a plain
JSONL file of calls (one a line), each with the answer the model really gave."""

from __future__ import annotations

import gzip
import json
import math
from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ._errors import ReplayInputError
from ._recorder import RecordedCall
from ._tokens import count_message_tokens, count_tokens
from ._types import refuse_unknown_fields

__all__ = ["ReplayCall", "ReplayInput", "calls_from_records", "read_calls", "read_recording"]

#: The model a call is priced as when its line names none (PriceTable's fallback prices it).
UNNAMED_MODEL = "unknown"

#: What a refused ``time`` is told to be instead (the message names the forms, not a type).
TIME_FORMS = (
    "epoch seconds as a number (1770969610) or an ISO 8601 string ('2026-02-13T08:00:10Z', "
    "'2026-02-13T08:00:10+01:00'; one without a zone, '2026-02-13 08:00:10', is read as UTC)"
)


def _seconds(value: Any) -> float | None:
    """``time`` as epoch seconds: a number as it is; an ISO 8601 text or a ``datetime`` at
    its zone, and one without a zone as UTC (a recording's clock is rarely the reader's local
    time, and the same file must read the same on every machine)."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if math.isfinite(value):
            return float(value)
    elif isinstance(value, (str, datetime)):
        text = value.strip() if isinstance(value, str) else ""
        if text[-1:] in ("Z", "z"):  # Python 3.10's fromisoformat knows "+00:00", not "Z"
            text = text[:-1] + "+00:00"
        try:
            when = value if isinstance(value, datetime) else datetime.fromisoformat(text)
        except ValueError:
            pass
        else:
            if when.tzinfo is None:
                when = when.replace(tzinfo=timezone.utc)
            return when.timestamp()
    raise PydanticCustomError(
        "replay_time",
        "{given} is not a time: give {forms}",
        {"given": repr(value), "forms": TIME_FORMS},
    )


class ReplayCall(BaseModel):
    """One recorded call: what was asked (``messages``, ``params`` such as ``model`` and
    ``response_format``; ``keywords`` or ``slots`` where the caller gave them), by whom
    (``category``, ``agent``), when (``time``, any clock; ``None``: in stream order) and what
    the model answered (``answer``: the call's true answer). ``prompt_tokens`` and
    ``completion_tokens`` price it; counted from the texts when a line gives none. ``time`` is
    given as epoch seconds or an ISO 8601 string (without a zone: UTC), and kept as seconds.
    ``other_answers`` are the model's further answers to this very prompt, asked again when
    it was recorded (its own spread): a replay answers the call's further requests (twins,
    explorations) from them and from the other calls of the stream with the same prompt, and
    counts each beside ``answer`` as a pair of the model's own agreement."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        data = refuse_unknown_fields(cls, data)
        if not isinstance(data, dict):
            return data
        # Token counts price a call; a line that gives none is counted from its texts.
        messages, answer = data.get("messages"), data.get("answer")
        if (
            not data.get("prompt_tokens")
            and isinstance(messages, list)
            and all(isinstance(m, dict) for m in messages)
        ):
            data = {**data, "prompt_tokens": count_message_tokens(messages)[0]}
        if not data.get("completion_tokens") and isinstance(answer, str):
            data = {**data, "completion_tokens": count_tokens(answer)[0]}
        return data

    category: str = Field(min_length=1)
    agent: str = ""
    messages: list[dict[str, Any]] = Field(min_length=1)
    keywords: list[str] | None = None
    slots: dict[str, str] | None = None
    answer: str
    other_answers: list[str] = Field(default_factory=list)
    time: float | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    #: The code site that made the call (``llmcache.templates.code_site``), where the
    #: recording kept it: a replay that learns templates learns each site apart, as the live
    #: client did. ``None``: the replay's one site (the text alone tells templates apart).
    site: str | None = None
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)

    @field_validator("time", mode="before")
    @classmethod
    def _time_in_seconds(cls, value: Any) -> float | None:
        return _seconds(value)

    @property
    def model(self) -> str:
        return str(self.params.get("model") or UNNAMED_MODEL)

    def prompt_key(self) -> str:
        """What makes two calls the same prompt: their category, messages and output
        parameters (the category too: two categories may grade one text differently)."""
        return json.dumps(
            [self.category, self.messages, self.params], sort_keys=True, ensure_ascii=False
        )


class ReplayInput(BaseModel):
    """Calls read for a replay, and how many lines were left out, by reason."""

    calls: list[ReplayCall]
    skipped: dict[str, int] = Field(default_factory=dict)


def calls_from_records(records: Iterable[RecordedCall]) -> ReplayInput:
    """The replayable calls of a recording: every valid call whose answer the model gave.

    A call the cache answered (``outcome == "hit"``) is left out and counted: its text is an
    earlier answer to another prompt, not the model's answer to this one, and a replay that
    took it for the truth would grade the recorded cache by itself."""
    calls: list[ReplayCall] = []
    skipped: Counter[str] = Counter()
    for record in records:
        if record.kind != "call":
            skipped["a refused attempt, not a call"] += 1
        elif not record.valid or record.response is None:
            skipped["no valid answer"] += 1
        elif record.outcome == "hit":
            skipped["answered from the cache: no answer of the model to it"] += 1
        elif not record.messages:
            skipped["no messages"] += 1
        else:
            params = dict(record.params)
            params.setdefault("model", record.model or UNNAMED_MODEL)
            calls.append(
                ReplayCall(
                    category=record.category,
                    agent=record.agent,
                    messages=record.messages,
                    keywords=record.keywords,
                    answer=record.response,
                    time=record.ts,
                    params=params,
                    site=_site_of(record),
                    prompt_tokens=record.prompt_tokens,
                    completion_tokens=record.completion_tokens,
                )
            )
    return ReplayInput(calls=calls, skipped=dict(skipped))


def _site_of(record: RecordedCall) -> str | None:
    """The code site a learned call was filed from (its options' ``metadata``), if kept."""
    site = record.metadata.get("site")
    return site if isinstance(site, str) and site else None


def _lines(where: Path) -> Iterator[str]:
    if where.suffix == ".gz":
        with gzip.open(where, "rt", encoding="utf-8") as packed:
            yield from packed
    else:
        with where.open(encoding="utf-8") as plain:
            yield from plain


def read_recording(path: str | Path) -> ReplayInput:
    """The replayable calls of a file the library's :class:`~llmcache.recording.Recorder`
    wrote (``.jsonl`` or ``.jsonl.gz``); see :func:`calls_from_records`. A line that is not a
    recorded call (a crash's truncated last line, damage) is skipped and counted."""
    where = Path(path)
    records: list[RecordedCall] = []
    unreadable = 0
    try:
        for line in _lines(where):
            if not line.strip():
                continue
            try:
                records.append(RecordedCall.model_validate_json(line))
            except ValueError:
                unreadable += 1
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise ReplayInputError(str(where), [(0, f"cannot read the file: {exc}")], 0) from None
    read = calls_from_records(records)
    if unreadable:
        read.skipped["unreadable line"] = unreadable
    return read


def _call_of_line(data: Any) -> ReplayCall:
    if not isinstance(data, dict):
        raise ValueError("a line is one JSON object")
    data = dict(data)
    if "prompt" in data:
        if "messages" in data:
            raise ValueError("give 'messages' or 'prompt', not both")
        prompt = data.pop("prompt")
        if not isinstance(prompt, str):
            raise ValueError("'prompt' is a text")
        data["messages"] = [{"role": "user", "content": prompt}]
    if "model" in data:
        data["params"] = {**data.get("params", {}), "model": data.pop("model")}
    for name in ("category", "messages", "answer"):
        if name not in data:
            raise ValueError(f"no {name!r}")
    return ReplayCall.model_validate(data)


def read_calls(path: str | Path, *, strict: bool = True) -> ReplayInput:
    """Calls from a plain JSONL file, one a line::

        {"category": "importance", "agent": "Isabella", "prompt": "Rate ...", "answer": "4",
         "keywords": ["making coffee"], "time": 1676275200}

    ``messages`` (chat messages) may stand for ``prompt``; ``keywords``, ``slots``, ``time``
    (epoch seconds or an ISO 8601 string such as ``"2026-02-13T08:00:10Z"``; without a zone:
    UTC), ``model``/``params``, ``other_answers`` (the model's further answers to the same
    prompt), ``prompt_tokens`` and ``completion_tokens`` are optional; blank lines are
    ignored; a ``.gz`` file is read uncompressed. Every line is read: a malformed one is kept as a
    problem with its number, and with ``strict`` (the default) a
    :class:`~llmcache.errors.ReplayInputError` then names them all; with ``strict=False``
    they are skipped and counted, and the good lines are used."""
    where = Path(path)
    calls: list[ReplayCall] = []
    problems: list[tuple[int, str]] = []
    try:
        text = "".join(_lines(where))
    except (OSError, UnicodeDecodeError, EOFError) as exc:  # a damaged .gz too
        raise ReplayInputError(str(where), [(0, f"cannot read the file: {exc}")], 0) from None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            calls.append(_call_of_line(json.loads(line)))
        except ValidationError as exc:
            first = exc.errors()[0]
            at = ".".join(str(p) for p in first["loc"])
            problems.append((number, f"{at}: {first['msg']}" if at else first["msg"]))
        except ValueError as exc:  # json.JSONDecodeError too
            problems.append((number, str(exc)))
    if problems and strict:
        raise ReplayInputError(str(where), problems, len(calls))
    skipped = {"malformed line": len(problems)} if problems else {}
    return ReplayInput(calls=calls, skipped=skipped)
