"""``python -m llmcache serve``: run the local LLM server in the foreground until Ctrl-C.

Other processes (a simulation, a notebook, ``curl``) then use it as an OpenAI-compatible
endpoint; the command prints the environment variables that point llmcache at it.
"""

from __future__ import annotations

import argparse
import signal
import sys
from types import FrameType

from ..errors import ConfigurationError
from ._config import LLMKind, resolve_llm_backend
from ._defaults import DEFAULT_CTX_PER_SLOT, DEFAULT_PARALLEL
from ._errors import LocalServerError
from ._models import MODELS
from ._server import LocalServer

__all__ = ["serve_main"]


def _say(text: str = "", *, err: bool = False) -> None:
    stream = sys.stderr if err else sys.stdout
    stream.write(text + "\n")
    stream.flush()  # a caller piping our output waits for the URL line


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m llmcache serve",
        description=(
            "Start llama.cpp's llama-server on 127.0.0.1 with the default and superior models "
            "and keep it running until Ctrl-C. Defaults come from LLMCACHE_MODEL, "
            "LLMCACHE_SUPERIOR_MODEL and LLMCACHE_LOCAL_* (see llmcache.llm.resolve_llm_backend)."
        ),
    )
    known = ", ".join(MODELS)
    parser.add_argument("--model", help=f"default-tier model: one of {known}, or a .gguf path")
    parser.add_argument("--superior-model", help="escalation/judge model (name or .gguf path)")
    parser.add_argument("--single", action="store_true", help="serve only --model, for both tiers")
    parser.add_argument(
        "--preload-superior", action="store_true", help="load the superior model at start"
    )
    parser.add_argument("--port", type=int, help="port on 127.0.0.1 (default: a free one)")
    parser.add_argument(
        "--parallel", type=int, help=f"slots of the default model (default {DEFAULT_PARALLEL})"
    )
    parser.add_argument(
        "--ctx", type=int, help=f"context tokens per slot (default {DEFAULT_CTX_PER_SLOT})"
    )
    parser.add_argument(
        "--threads", type=_threads, help="llama.cpp threads, or 'auto' (default: every core)"
    )
    parser.add_argument("--log", help="log file (default: under $LLMCACHE_LOG_DIR or temp)")
    return parser


def _threads(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a number nor 'auto'") from None
    if value < 1:
        raise argparse.ArgumentTypeError("threads must be at least 1")
    return value


def _interrupt(signum: int, frame: FrameType | None) -> None:
    # SIGTERM (kill, a CI runner, systemd) takes the same orderly path as Ctrl-C.
    raise KeyboardInterrupt


def serve_main(argv: list[str]) -> int:
    """Run ``serve`` with ``argv`` (without the ``serve`` word); return the exit code."""
    args = _parser().parse_args(argv)
    try:
        backend = resolve_llm_backend(
            kind=LLMKind.LOCAL, model=args.model, superior_model=args.superior_model
        )
    except ConfigurationError as exc:
        _say(f"llmcache serve: {exc}", err=True)
        return 2
    settings = backend.local
    assert settings is not None  # a local backend always has local settings
    threads = settings.threads
    if args.threads is not None:
        threads = None if args.threads == "auto" else int(args.threads)
    server = LocalServer(
        settings.model_ref,
        superior_model=None if args.single else settings.superior_ref,
        parallel=args.parallel or settings.parallel,
        ctx_per_slot=args.ctx or settings.ctx_per_slot,
        threads=threads,
        preload_superior=args.preload_superior,
        port=args.port,
        log_path=args.log,
    )
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        try:
            server.start()
        except LocalServerError as exc:
            _say(f"llmcache serve: {exc}", err=True)
            return 1
        _report(server, preloaded=args.preload_superior)
        code = server.wait()
        _say(f"llmcache serve: llama-server exited with code {code}; last lines of its log:")
        _say(server.log_tail(), err=True)
        return 1
    except KeyboardInterrupt:
        server.stop()
        _say("llmcache serve: stopped")
        return 0
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)


def _report(server: LocalServer, *, preloaded: bool) -> None:
    _say(f"llmcache: local LLM server ready in {server.start_seconds or 0.0:.2f}s")
    _say(f"  base URL : {server.base_url}")
    _say(f"  model    : {_title(server.model)}  ({server.parallel_of()} slots)")
    if server.same_tier:
        _say("  superior : the same model (escalation and judging are not stronger)")
    else:
        when = "loaded" if preloaded else "loaded on its first request"
        _say(f"  superior : {_title(server.superior_model)}, {when}")
    _say(f"  log      : {server.log_path}")
    _say(f"  pid      : {server.pid}")
    _say("Point llmcache in another shell at it with:")
    _say(
        f"  export LLMCACHE_LLM=url LLMCACHE_BASE_URL={server.base_url} "
        f"LLMCACHE_MODEL={server.model} LLMCACHE_SUPERIOR_MODEL={server.superior_model}"
    )
    _say("Press Ctrl-C to stop.")


def _title(name: str) -> str:
    spec = MODELS.get(name)
    return f"{name} ({spec.title})" if spec else name
