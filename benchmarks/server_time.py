"""Where a local LLM server's time went: a breakdown read from its own log.

    python benchmarks/server_time.py /tmp/llmcache-logs/llama-server-<port>.log

:class:`~llmcache.llm.LocalServer` writes llama-server's log to a file (its ``log_path``; by
default ``<tmp>/llmcache-logs/llama-server-<port>.log``). llama-server logs, per request, when
a slot takes it (``launch_slot_``), how long it spent reading the prompt (``prompt eval time``:
the tokens not already in the slot's prompt cache) and generating (``eval time``), and when it
let the slot go (``release``). From those lines this prints, for a whole run:

- the span from the first request to the last, and how much of it the server was busy (at
  least one slot working) or idle (waiting for the caller: the town's own work, HTTP);
- how long 1, 2, ... slots worked at once (requests in flight share the cores);
- prompt reading: tokens read, their time, tokens per second;
- generation: tokens, their time, milliseconds per token (grammar-constrained sampling
  included: compare with the model's raw speed from ``llama-bench``).

Times of slots working together add up to more than the wall time; the shares of prompt
reading and generation are of the summed slot time. A log holds every server start with its
own clock; give the log of one run (each LocalServer start writes its own file).
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

# "[37423] 33.37.842.140 I slot launch_slot_: id  0 | task 72316 | ..." -- the port of the
# model's own server (the router starts one per model, each with its own clock), then
# minutes.seconds.milliseconds.microseconds since that server started (minutes unbounded, or
# hours.minutes.seconds... on builds that print hours).
_STAMP = r"(?P<stamp>\d+(?:\.\d+){3,4})"
_SLOT = re.compile(
    rf"^(?:\[(?P<port>\d+)\] )?{_STAMP} \w slot +(?P<what>launch_slot_|release): +id +\d+ \| "
)
_PROMPT = re.compile(
    r"^(?:\[(?P<port>\d+)\] )?.*prompt eval time = +(?P<ms>[\d.]+) ms / +(?P<n>\d+) tok"
)
_EVAL = re.compile(
    r"^(?:\[(?P<port>\d+)\] )?.*\| +eval time = +(?P<ms>[\d.]+) ms / +(?P<n>\d+) tok"
)
# Which timing line adds to which figures of a Breakdown.
_TIMINGS = ((_PROMPT, "prompt_tokens", "prompt_s"), (_EVAL, "generated_tokens", "generation_s"))
# The router names the model behind each port: "proxying request to model NAME on port PORT".
_MODEL = re.compile(r"request to model (?P<model>\S+) on port (?P<port>\d+)")


def seconds(stamp: str) -> float:
    """A log stamp (``M.SS.mmm.uuu`` or ``H.MM.SS.mmm.uuu``) in seconds."""
    parts = [int(p) for p in stamp.split(".")]
    *clock, ms, us = parts
    total = 0
    for p in clock:
        total = total * 60 + p
    return total + ms / 1e3 + us / 1e6


@dataclass
class Breakdown:
    span_s: float = 0.0
    busy_s: float = 0.0
    concurrent_s: dict[int, float] = field(default_factory=dict)  # slots working -> seconds
    requests: int = 0
    prompt_tokens: int = 0
    prompt_s: float = 0.0
    generated_tokens: int = 0
    generation_s: float = 0.0

    @property
    def idle_s(self) -> float:
        return self.span_s - self.busy_s


def breakdowns(lines: list[str]) -> dict[str, Breakdown]:
    """Per model (its name, or its port when the log does not name it), the breakdown of one
    server run's log lines."""
    events: dict[str, list[tuple[float, int]]] = defaultdict(list)
    found: dict[str, Breakdown] = defaultdict(Breakdown)
    names: dict[str, str] = {}
    for line in lines:
        model = _MODEL.search(line)
        if model is not None:
            names[model["port"]] = model["model"]
            continue
        slot = _SLOT.search(line)
        if slot is not None:
            port = slot["port"] or ""
            launch = slot["what"] == "launch_slot_"
            events[port].append((seconds(slot["stamp"]), 1 if launch else -1))
            found[port].requests += launch
            continue
        for pattern, tokens, spent in _TIMINGS:
            timing = pattern.search(line)
            if timing is not None:
                row = found[timing["port"] or ""]
                setattr(row, tokens, getattr(row, tokens) + int(timing["n"]))
                setattr(row, spent, getattr(row, spent) + float(timing["ms"]) / 1e3)
                break
    for port, row in found.items():
        _busy(row, events.get(port, []))
    return {names.get(port, f"port {port or '?'}"): row for port, row in found.items()}


def _busy(out: Breakdown, events: list[tuple[float, int]]) -> None:
    if not events:
        return
    # A release logged in the same microsecond as a launch sorts first: nothing overlaps.
    events.sort()
    concurrent: dict[int, float] = defaultdict(float)
    working, last = 0, events[0][0]
    for t, change in events:
        concurrent[working] += t - last
        working, last = max(0, working + change), t
    out.span_s = events[-1][0] - events[0][0]
    out.concurrent_s = {k: v for k, v in sorted(concurrent.items()) if k > 0 and v > 0}
    out.busy_s = sum(out.concurrent_s.values())


def render(b: Breakdown) -> list[str]:
    def share(part: float, whole: float) -> str:
        return f"{100 * part / whole:.0f}%" if whole > 0 else "n/a"

    slot_s = b.prompt_s + b.generation_s
    lines = [
        f"requests: {b.requests}; span {b.span_s:.0f} s; server busy {b.busy_s:.0f} s "
        f"({share(b.busy_s, b.span_s)}), idle {b.idle_s:.0f} s ({share(b.idle_s, b.span_s)})",
        "slots working at once: "
        + ", ".join(f"{k}: {v:.0f} s ({share(v, b.busy_s)})" for k, v in b.concurrent_s.items()),
        f"prompt reading: {b.prompt_tokens} tokens in {b.prompt_s:.0f} slot-s "
        f"({b.prompt_tokens / b.prompt_s:.0f} tokens/s; {share(b.prompt_s, slot_s)} of slot time)"
        if b.prompt_s > 0
        else "prompt reading: none logged",
        f"generation: {b.generated_tokens} tokens in {b.generation_s:.0f} slot-s "
        f"({1e3 * b.generation_s / b.generated_tokens:.1f} ms per token; "
        f"{share(b.generation_s, slot_s)} of slot time)"
        if b.generated_tokens > 0
        else "generation: none logged",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("log", type=Path, help="a llama-server log written by LocalServer")
    args = parser.parse_args()
    text = args.log.read_text(encoding="utf-8", errors="replace").splitlines()
    print(f"# {args.log.name}")
    for model, row in breakdowns(text).items():
        print(f"\n{model}")
        for line in render(row):
            print(f"  {line}")


if __name__ == "__main__":
    main()
