"""The replay importer's ``time``: epoch seconds or ISO 8601, with or without a zone."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from llmcache.errors import ReplayInputError
from llmcache.replay import ReplayCall, read_calls

# 2026-02-13 08:00:10 UTC
EPOCH = 1770969610.0


def _line(when: Any) -> dict[str, Any]:
    return {"category": "importance", "prompt": "rate it", "answer": "4", "time": when}


def _write(path: Path, times: list[Any]) -> Path:
    path.write_text("".join(json.dumps(_line(t)) + "\n" for t in times))
    return path


@pytest.mark.parametrize(
    ("given", "seconds"),
    [
        (1770969610, EPOCH),
        (1770969610.5, EPOCH + 0.5),
        ("2026-02-13 08:00:10", EPOCH),
        ("2026-02-13T08:00:10", EPOCH),
        ("2026-02-13T08:00:10Z", EPOCH),
        ("2026-02-13T08:00:10z", EPOCH),
        ("2026-02-13T08:00:10+00:00", EPOCH),
        ("2026-02-13T08:00:10+01:00", EPOCH - 3600),
        ("2026-02-13T08:00:10.250-05:30", EPOCH + 5.5 * 3600 + 0.25),
        (None, None),
    ],
)
def test_each_accepted_form_reads_as_epoch_seconds(
    tmp_path: Path, given: Any, seconds: float | None
) -> None:
    (call,) = read_calls(_write(tmp_path / "calls.jsonl", [given])).calls
    assert call.time == seconds


def test_a_time_without_a_zone_is_the_same_time_in_utc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Read where local time is not UTC: a naive time must not take the machine's zone.
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        naive, utc = read_calls(
            _write(tmp_path / "calls.jsonl", ["2026-02-13 08:00:10", "2026-02-13T08:00:10Z"])
        ).calls
    finally:
        monkeypatch.undo()
        time.tzset()
    assert naive.time == utc.time == EPOCH


def test_a_malformed_time_is_refused_with_its_line_and_the_accepted_forms(
    tmp_path: Path,
) -> None:
    path = _write(
        tmp_path / "calls.jsonl",
        [EPOCH, "13/02/2026 08:00", EPOCH, "1770969610", True, "2026-02-30T08:00:10Z"],
    )
    with pytest.raises(ReplayInputError) as caught:
        read_calls(path)
    problems = dict(caught.value.problems)
    assert sorted(problems) == [2, 4, 5, 6]
    assert caught.value.good == 2
    for why in problems.values():
        assert why.startswith("time: ")
        assert "epoch seconds" in why and "ISO 8601" in why and "read as UTC" in why
    assert "'13/02/2026 08:00'" in problems[2]
    message = str(caught.value)
    assert "line 2: time:" in message and "2026-02-13T08:00:10Z" in message
    # Not strict: the good lines are used, the bad ones counted as before.
    read = read_calls(path, strict=False)
    assert [c.time for c in read.calls] == [EPOCH, EPOCH]
    assert read.skipped == {"malformed line": 4}


def test_the_model_takes_the_same_forms_in_code() -> None:
    base: dict[str, Any] = {"category": "c", "messages": [{"role": "user", "content": "x"}]}
    assert ReplayCall(**base, answer="a", time="2026-02-13T09:00:10+01:00").time == EPOCH
    with pytest.raises(ValidationError, match="not a time"):
        ReplayCall(**base, answer="a", time=float("nan"))


def test_the_command_names_the_bad_time_and_how_to_go_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from llmcache.__main__ import main

    path = _write(tmp_path / "calls.jsonl", ["2026-02-13T08:00:10Z", "yesterday", EPOCH + 5])
    common = ["--embedder", "hash", "--embeddings", "none", "--json"]
    assert main(["replay", str(path), *common]) == 1
    err = capsys.readouterr().err
    assert "line 2: time: 'yesterday' is not a time" in err and "ISO 8601" in err
    assert "--skip-malformed to use the 2 good ones" in err
    assert main(["replay", str(path), *common, "--skip-malformed"]) == 0
    assert json.loads(capsys.readouterr().out)["calls"] == 2
