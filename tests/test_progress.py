"""Long commands show a one-line bar on a terminal, and nothing when piped or under --json."""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from llmcache import EmbedMode
from llmcache._local_backend import LocalBackend
from llmcache._progress import ProgressBar, shows_progress
from llmcache._transfer import export_main, transfer
from llmcache._types import CacheEntry, Partition, Usage
from llmcache.embedders import StoredEmbedder
from llmcache.replay import ReplayCall, tune
from llmcache.testing import HashEmbedder

ROOT = Path(__file__).resolve().parents[1]


class FakeTTY(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


class Ticks:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _calls(n: int = 60) -> list[ReplayCall]:
    rng = random.Random(3)
    names = ["coffee", "tea", "reading", "painting", "running", "cooking"]
    return [
        ReplayCall(
            category="importance",
            agent=f"agent {i % 2}",
            messages=[{"role": "user", "content": f"rate {names[i % 6]} {rng.randint(0, 3)}"}],
            keywords=[names[i % 6]],
            answer=str(i % 6),
            time=float(i),
        )
        for i in range(n)
    ]


def _write_calls(path: Path) -> None:
    lines = [
        {"category": c.category, "agent": c.agent, "prompt": c.messages[0]["content"],
         "keywords": c.keywords, "answer": c.answer, "time": c.time}
        for c in _calls()
    ]  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def _filled(path: Path, n: int = 7) -> LocalBackend:
    backend = LocalBackend(path)
    part = Partition(category="c", agent="a", params_hash="h", model="m")
    backend.check_embedder("e", 4)
    for i in range(n):
        backend.add(
            CacheEntry(
                partition=part,
                embed_text=f"t{i}",
                embed_mode=EmbedMode.KEYWORD,
                embedder_id="e",
                vector_b64=CacheEntry.encode_vector(np.eye(4, dtype=np.float32)[i % 4]),
                messages=[{"role": "user", "content": f"t{i}"}],
                content=str(i),
                completion={"id": f"c{i}", "choices": [{"message": {"content": str(i)}}]},
                usage=Usage(prompt_tokens=1, completion_tokens=1),
            )
        )
    return backend


def test_the_bar_draws_label_count_rate_and_eta_on_a_terminal_and_ends_its_line() -> None:
    stream, clock = FakeTTY(), Ticks()
    with ProgressBar("embedding texts", stream, clock=clock, interval=0.0) as bar:
        bar(0, 40)
        clock.now += 2.0
        bar(10, 40)
        clock.now += 2.0
        bar(40, 40)
    text = stream.getvalue()
    frames = text.split("\r")[1:]
    assert len(frames) == 4  # three reports and the last state, redrawn on close
    assert frames[0].startswith("embedding texts [") and "0/40" in frames[0]
    # 10 texts in 2 s: 5 a second, 30 left, 6 s to go.
    assert "10/40" in frames[1] and "5.0/s" in frames[1] and "ETA 0:06" in frames[1]
    assert "40/40" in frames[2] and "ETA 0:00" in frames[2] and "#" * ProgressBar.WIDTH in frames[2]
    assert text.endswith("\n") and text.count("\n") == 1


def test_redraws_are_throttled_but_the_last_state_is_always_drawn() -> None:
    stream, clock = FakeTTY(), Ticks()
    bar = ProgressBar("copying", stream, clock=clock, interval=1.0)
    for done in range(0, 100):
        bar(done, 100)
        clock.now += 0.001
    assert stream.getvalue().count("\r") == 1  # the first only: 0.1 s passed
    bar.close()
    assert "99/100" in stream.getvalue().split("\r")[-1]
    assert stream.getvalue().endswith("\n")
    bar.close()  # closing twice adds nothing
    assert stream.getvalue().count("\n") == 1


def test_no_bar_on_a_pipe_a_file_or_when_disabled() -> None:
    plain = io.StringIO()
    assert not shows_progress(plain)
    with ProgressBar("x", plain) as bar:
        bar(0, 3)
        bar(3, 3)
    assert plain.getvalue() == ""
    tty = FakeTTY()
    with ProgressBar("x", tty, enabled=False) as bar:
        bar(0, 3)
        bar(3, 3)
    assert tty.getvalue() == ""
    with ProgressBar("x", tty) as bar:
        bar(0, 0)  # nothing to do: no bar
    assert tty.getvalue() == ""


def test_warm_tune_and_transfer_report_from_zero_to_their_totals(tmp_path: Path) -> None:
    calls = _calls()
    embedder = StoredEmbedder(HashEmbedder(), None)
    seen: list[tuple[int, int]] = []
    texts = [c.messages[0]["content"] for c in calls]
    embedder.warm(texts, batch=4, progress=lambda d, t: seen.append((d, t)))
    unique = len(set(texts))
    assert seen[0] == (0, unique) and seen[-1] == (unique, unique)
    assert len(seen) == 1 + -(-unique // 4)
    seen.clear()
    thresholds = [0.9, 0.95, 0.99]
    tune(
        calls,
        thresholds=thresholds,
        embeds=[EmbedMode.KEYWORD, EmbedMode.FULL],
        embedder=embedder,
        progress=lambda d, t: seen.append((d, t)),
    )
    # Every candidate (keyword mode with no leading words and with two, full mode), and the
    # confirming replay.
    total = 3 * len(thresholds) + 1
    assert seen == [(d, total) for d in range(total + 1)]

    src = _filled(tmp_path / "src")
    dst = LocalBackend(tmp_path / "dst")
    seen.clear()
    try:
        assert transfer(src, dst, progress=lambda d, t: seen.append((d, t))) == 7
    finally:
        src.close()
        dst.close()
    assert seen[0] == (0, 7) and seen[-1] == (7, 7)


def test_the_commands_draw_on_a_terminal_and_stay_quiet_under_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from llmcache.__main__ import main

    path = tmp_path / "calls.jsonl"
    _write_calls(path)
    common = ["--embedder", "hash", "--embeddings", "none"]
    tty = FakeTTY()
    monkeypatch.setattr(sys, "stderr", tty)
    out = tmp_path / "tuned.json"
    assert main(["tune", str(path), *common, "--thresholds", "0.9,0.99", "--out", str(out)]) == 0
    drawn = tty.getvalue()
    assert "embedding texts [" in drawn and "replaying settings [" in drawn
    # 2 thresholds x (keyword mode with no leading words and with two, full mode), and the
    # confirming replay.
    assert "7/7" in drawn
    assert drawn.endswith("\n")
    assert "written" in capsys.readouterr().out

    tty.seek(0)
    tty.truncate()
    assert main(["replay", str(path), *common]) == 0
    assert "replaying 60 calls [" in tty.getvalue()
    assert "\r" not in capsys.readouterr().out  # the bar is on stderr, never in the output

    tty.seek(0)
    tty.truncate()
    assert main(["replay", str(path), *common, "--json"]) == 0
    tuned = ["tune", str(path), *common, "--thresholds", "0.9", "--out", str(out), "--json"]
    assert main(tuned) == 0
    assert tty.getvalue() == ""
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 2 and all(json.loads(line) for line in printed)

    _filled(tmp_path / "cache").close()
    assert export_main([str(tmp_path / "cache"), str(tmp_path / "copy")]) == 0
    assert "export: copying entries [" in tty.getvalue() and "7/7" in tty.getvalue()
    assert tty.getvalue().endswith("\n")


def test_piped_stderr_gets_no_bar(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    _write_calls(path)
    done = subprocess.run(
        [sys.executable, "-m", "llmcache", "tune", str(path), "--embedder", "hash",
         "--embeddings", "none", "--thresholds", "0.9", "--out", str(tmp_path / "t.json")],
        capture_output=True, text=True, cwd=ROOT, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "written" in done.stdout
    assert "\r" not in done.stderr and "[" not in done.stderr


class _Stop(Exception):
    """Ends a study's step before it runs: the test needs only what the study was given."""


def test_the_study_draws_its_bars_on_a_terminal_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import logging

    import experiments.__main__ as cli

    given: list[bool] = []

    class _Study:
        def __init__(self, *args: object, progress: bool, **kwargs: object) -> None:
            given.append(progress)

        def step(self, name: str) -> None:
            raise _Stop

        def close(self) -> None:
            pass

    monkeypatch.setattr(cli, "Study", _Study)
    # The study's command quietens these loggers for its own run: set them back after.
    for name in ("httpx", "httpx2", "openai", "llmcache", "agent_core"):
        logger = logging.getLogger(name)
        monkeypatch.setattr(logger, "level", logger.level)
    argv = ["similarity", "--out", str(tmp_path)]
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # a pipe or a log file
    with pytest.raises(_Stop):
        cli.main(argv)
    monkeypatch.setattr(sys, "stderr", FakeTTY())
    with pytest.raises(_Stop):
        cli.main(argv)
    with pytest.raises(_Stop):
        cli.main([*argv, "--quiet"])
    assert given == [False, True, False]
