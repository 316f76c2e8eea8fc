"""Progress of a long command on the command line: a one-line bar on a terminal, nothing else.

Library functions that may run for minutes (``StoredEmbedder.warm``, ``tune``, ``transfer``)
take an optional ``progress`` callback, called with ``(done, total)``; they never write
anything themselves. The commands pass a :class:`ProgressBar`, which draws
``label [#####-----] done/total  rate/s  ETA m:ss`` on one line, redrawn with ``\\r``, and
only when its stream is a terminal: a log file or a pipe (and ``--json``) gets no control
characters mixed into what a program reads.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import Protocol, TextIO

__all__ = ["Progress", "ProgressBar", "shows_progress"]


class Progress(Protocol):
    """What a long library function reports to: ``done`` of ``total`` steps so far (called
    with ``done == 0`` before the first, so the caller can show that work has begun)."""

    def __call__(self, done: int, total: int) -> None: ...


def shows_progress(stream: TextIO) -> bool:
    """Whether a bar belongs on ``stream``: only a terminal, where a person reads it."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except ValueError:  # a closed stream
        return False


def _clock(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class ProgressBar:
    """A :class:`Progress` that draws a one-line bar on ``stream`` (default: ``sys.stderr``
    when the bar is made) if ``enabled`` and the stream is a terminal; otherwise it does
    nothing. Redraws are at most every ``interval`` seconds (the first and the last always):
    a bar must not cost the work it reports on. :meth:`close` (or leaving a ``with`` block)
    ends a drawn bar's line with a newline."""

    WIDTH = 24

    def __init__(
        self,
        label: str,
        stream: TextIO | None = None,
        *,
        enabled: bool = True,
        interval: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.stream = sys.stderr if stream is None else stream
        self.enabled = enabled and shows_progress(self.stream)
        self.interval = interval
        self._clock = clock
        self._started: float | None = None
        self._drawn_at: float | None = None
        self._shown = 0  # the width of the line drawn last, to blank a longer one
        self._last: tuple[int, int] | None = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total <= 0:  # nothing to do (all embedded already): no bar
            return
        now = self._clock()
        if self._started is None:
            self._started = now
        self._last = (done, total)
        finished = total > 0 and done >= total
        if self._drawn_at is not None and not finished and now - self._drawn_at < self.interval:
            return
        self._draw(done, total, now)

    def line(self, done: int, total: int, elapsed: float) -> str:
        """The bar's text for ``done`` of ``total`` after ``elapsed`` seconds."""
        share = min(1.0, done / total) if total > 0 else 0.0
        filled = int(share * self.WIDTH)
        bar = "#" * filled + "-" * (self.WIDTH - filled)
        text = f"{self.label} [{bar}] {done}/{total}"
        if done > 0 and elapsed > 0:
            rate = done / elapsed
            shown_rate = f"{rate:.1f}/s" if rate < 10 else f"{rate:.0f}/s"
            left = max(0, total - done) / rate
            text += f"  {shown_rate}  ETA {_clock(left)}"
        else:
            text += f"  {_clock(elapsed)} elapsed"
        return text

    def _draw(self, done: int, total: int, now: float) -> None:
        started = now if self._started is None else self._started
        text = self.line(done, total, now - started)
        pad = " " * max(0, self._shown - len(text))
        self.stream.write(f"\r{text}{pad}")
        self.stream.flush()
        self._shown = len(text)
        self._drawn_at = now

    def close(self) -> None:
        """Draw the last state reported (a throttled one may not have been) and end the line."""
        if not self.enabled or self._last is None:
            return
        self._draw(*self._last, self._clock())
        self.stream.write("\n")
        self.stream.flush()
        self._last = None
        self._drawn_at = None
        self._shown = 0
        self._started = None

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()
