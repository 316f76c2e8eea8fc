"""What the caching proxy adds to a hit, and how many hits a second it serves, in one run.

Starts a fake OpenAI-compatible upstream on 127.0.0.1 (a uvicorn thread of this process; it
answers only the misses that fill the cache) and the real ``python -m llmcache proxy`` in front
of it, as a subprocess with its defaults (the local MiniLM embedder, memoised). Then:

- **added latency**: the same hits asked alternately through the proxy (plain HTTP/1.1 on one
  keep-alive connection, as a game engine's client would) and through the in-process library
  (``CachedLLM.chat.completions.create_with_info`` over the same cache directory, with the same
  memoised embedder): p50 / p99 of each, and what the proxy adds at each percentile;
- **throughput**: ``--clients`` threads, each on its own keep-alive connection, ask hits for
  ``--seconds``: hits per second, and their latency under that load.

Clients, proxy and upstream share the machine's cores, as they would on a developer's machine.

    .venv/bin/python benchmarks/bench_proxy.py
    .venv/bin/python benchmarks/bench_proxy.py --prompts 200 --rounds 5 --clients 8 --seconds 20
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import openai
import uvicorn
from bench_models import header_line, machine_info  # beside this file
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from llmcache import CachedLLM, CacheOptions, SemanticCache

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-bench-proxy-key"
MODEL = "gpt-4o-mini"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _chat(request: Request) -> JSONResponse:
    body = await request.json()
    text = f"answer to: {body['messages'][-1]['content']}"
    return JSONResponse(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42},
        }
    )


@contextlib.contextmanager
def upstream() -> Iterator[str]:
    """The fake upstream on a free port, in a thread; yields its base URL (with /v1)."""
    app = Starlette(routes=[Route("/v1/chat/completions", _chat, methods=["POST"])])
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", ws="none")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(30)


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process so far (Linux's /proc; ``None`` elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def proxy(upstream_url: str, cache_dir: Path, extra: list[str]) -> Iterator[tuple[int, int]]:
    """``python -m llmcache proxy`` on a free port; yields its port and process id."""
    port = _free_port()
    command = [
        sys.executable, "-m", "llmcache", "proxy", "--upstream", upstream_url,
        "--cache", str(cache_dir), "--port", str(port), "--key", KEY, "--log-level", "warning",
        *extra,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(command, env=env)
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                raise SystemExit(f"the proxy exited with {process.returncode}")
            with contextlib.suppress(OSError):
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                connection.request("GET", "/health")
                if connection.getresponse().status == 200:
                    break
            if time.monotonic() > deadline:
                raise SystemExit("the proxy did not start")
            time.sleep(0.1)
        yield port, process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)


def messages(i: int) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "You rate how important a memory is, 1-10."},
        {"role": "user", "content": f"Memory: villager {i} waters the garden."},
    ]


def options(i: int) -> dict[str, Any]:
    # A table per villager: each prompt is stored once, and hit only by itself.
    return {"category": "importance", "agent": f"villager {i}", "keywords": [f"villager {i}"]}


def body(i: int) -> bytes:
    return json.dumps({"model": MODEL, "messages": messages(i), "cache": options(i)}).encode()


class Client:
    """One keep-alive HTTP/1.1 connection to the proxy."""

    def __init__(self, port: int) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}

    def ask(self, payload: bytes) -> str:
        self.connection.request("POST", "/v1/chat/completions", payload, self.headers)
        response = self.connection.getresponse()
        response.read()
        if response.status != 200:
            raise SystemExit(f"the proxy answered {response.status}")
        return response.getheader("x-llmcache") or ""


def ms(values: list[float], q: float) -> float:
    return 1e3 * float(np.percentile(np.asarray(values), q))


def added_latency(port: int, library: CachedLLM, prompts: int, rounds: int) -> dict[str, float]:
    """The same hits, alternately through the proxy and in-process; seconds per hit."""
    client = Client(port)
    payloads = [body(i) for i in range(prompts)]
    via_proxy: list[float] = []
    in_process: list[float] = []
    create = library.chat.completions.create_with_info
    for r in range(rounds):
        for i in range(prompts):
            # Alternate which goes first, so that neither always meets a warmer machine.
            order = ("proxy", "library") if (r + i) % 2 == 0 else ("library", "proxy")
            for which in order:
                started = time.perf_counter()
                if which == "proxy":
                    outcome = client.ask(payloads[i])
                    via_proxy.append(time.perf_counter() - started)
                else:
                    _, info = create(
                        model=MODEL, messages=messages(i), cache=CacheOptions(**options(i))
                    )
                    in_process.append(time.perf_counter() - started)
                    outcome = info.outcome
                if outcome != "hit":
                    raise SystemExit(f"expected a hit, got {outcome}")
    # The same hit's two times side by side: what the proxy added to that very hit.
    added = [p - q for p, q in zip(via_proxy, in_process, strict=True)]
    return {
        "added_p50": ms(added, 50),
        "added_p99": ms(added, 99),
        "proxy_p50": ms(via_proxy, 50),
        "proxy_p99": ms(via_proxy, 99),
        "library_p50": ms(in_process, 50),
        "library_p99": ms(in_process, 99),
        "n": float(len(via_proxy)),
    }


def throughput(port: int, pid: int, prompts: int, clients: int, seconds: float) -> dict[str, float]:
    payloads = [body(i) for i in range(prompts)]
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors: list[str] = []
    start = threading.Barrier(clients + 1)
    stop = threading.Event()

    def work(n: int) -> None:
        client = Client(port)
        start.wait()
        i = n
        while not stop.is_set():
            t = time.perf_counter()
            outcome = client.ask(payloads[i % prompts])
            latencies[n].append(time.perf_counter() - t)
            if outcome != "hit":
                errors.append(outcome)
            i += clients

    threads = [threading.Thread(target=work, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    start.wait()
    began, cpu_before = time.perf_counter(), cpu_seconds(pid)
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(60)
    elapsed, cpu_after = time.perf_counter() - began, cpu_seconds(pid)
    every = [x for per in latencies for x in per]
    if errors:
        raise SystemExit(f"{len(errors)} requests were not hits")
    cpu = cpu_after - cpu_before if cpu_before is not None and cpu_after is not None else 0.0
    return {
        "proxy_cpu_ms_per_hit": 1e3 * cpu / max(1, len(every)),
        "proxy_cores": cpu / elapsed,
        "hits_per_s": len(every) / elapsed,
        "p50": ms(every, 50),
        "p99": ms(every, 99),
        "hits": float(len(every)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=200, help="distinct hits (a table each)")
    parser.add_argument("--rounds", type=int, default=5, help="passes over them, each way")
    parser.add_argument("--clients", type=int, default=8, help="threads for the throughput")
    parser.add_argument("--seconds", type=float, default=20.0, help="throughput measured for")
    parser.add_argument(
        "--proxy-arg", action="append", default=[], help="passed to the proxy (repeatable)"
    )
    args = parser.parse_args()
    print(header_line(machine_info()), flush=True)
    with tempfile.TemporaryDirectory() as tmp, upstream() as upstream_url:
        cache_dir = Path(tmp) / "cache"
        with proxy(upstream_url, cache_dir, args.proxy_arg) as (port, pid):
            filler = Client(port)
            t = time.perf_counter()
            misses = sum(filler.ask(body(i)) == "miss" for i in range(args.prompts))
            print(
                f"filled {misses} entries through the proxy in {time.perf_counter() - t:.1f} s",
                flush=True,
            )
            # The library in this process, over the same directory, its embeddings memoised
            # as the proxy's are (one pass of hits warms them; not timed).
            library = CachedLLM(
                openai.OpenAI(base_url=upstream_url, api_key="unused"),
                cache=SemanticCache(cache_dir),
            )
            for i in range(args.prompts):  # warm both memos
                library.chat.completions.create_with_info(
                    model=MODEL, messages=messages(i), cache=CacheOptions(**options(i))
                )
                filler.ask(body(i))
            latency = added_latency(port, library, args.prompts, args.rounds)
            library.close()
            load = throughput(port, pid, args.prompts, args.clients, args.seconds)
    print(
        f"added latency on a hit ({int(latency['n'])} hits each way, alternated, "
        "one keep-alive connection):"
    )
    print(f"{'':>22} {'p50 ms':>8} {'p99 ms':>8}")
    for name, which in (("in-process library", "library"), ("through the proxy", "proxy")):
        print(f"{name:>22} {latency[which + '_p50']:>8.3f} {latency[which + '_p99']:>8.3f}")
    added50 = latency["proxy_p50"] - latency["library_p50"]
    added99 = latency["proxy_p99"] - latency["library_p99"]
    print(f"{'difference':>22} {added50:>8.3f} {added99:>8.3f}")
    print(
        f"{'added, hit by hit':>22} {latency['added_p50']:>8.3f} {latency['added_p99']:>8.3f}"
        "   (goal: <= 3 ms at p50)"
    )
    print(
        f"throughput: {load['hits_per_s']:.0f} hits/s with {args.clients} clients for "
        f"{args.seconds:g} s ({int(load['hits'])} hits; p50 {load['p50']:.2f} ms, "
        f"p99 {load['p99']:.2f} ms)   (goal: >= 500 hits/s)"
    )
    print(
        f"the proxy's process meanwhile: {load['proxy_cpu_ms_per_hit']:.2f} ms of CPU a hit, "
        f"{load['proxy_cores']:.2f} cores busy (the clients and other work share the rest)"
    )


if __name__ == "__main__":
    main()
