"""``python -m llmcache proxy``: serve the proxy with uvicorn until SIGTERM or Ctrl-C.

uvicorn's own shutdown is graceful: on SIGTERM it stops accepting connections, lets every
request it accepted finish (a streamed miss is stored when its stream ends), then runs the
app's shutdown, which closes the cache and so flushes its counters.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path
from types import FrameType

from pydantic import ValidationError

from .. import CacheConfig, Mode, SemanticCache
from ..errors import ConfigurationError, LLMCacheError
from ._app import check_settings, create_app
from ._settings import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_PORT,
    ProxyKey,
    ProxySettings,
    describe,
    parse_keys,
)
from ._upstream import open_upstream

__all__ = ["KEYS_ENV", "proxy_main"]

#: Where the proxy's keys may come from besides --key and --keys-file (comma-separated).
KEYS_ENV = "LLMCACHE_PROXY_KEYS"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m llmcache proxy",
        description=(
            "An OpenAI-compatible HTTP server that caches through llmcache in front of any "
            "upstream. Clients change their base URL to http://HOST:PORT/v1 and send the "
            "proxy's key; cache options travel in the body's 'cache' object or X-LLMCache-* "
            "headers. The upstream's key comes from the environment (OPENAI_API_KEY, "
            "LLMCACHE_API_KEY), never from a client."
        ),
    )
    parser.add_argument(
        "--upstream",
        help="local | openai | url | the base URL of an OpenAI-compatible server "
        "(default: LLMCACHE_LLM and friends, else local)",
    )
    parser.add_argument(
        "--cache", help="cache directory or postgresql:// DSN (default: $LLMCACHE_DIR or .llmcache)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}")
    parser.add_argument(
        "--key",
        action="append",
        default=[],
        metavar="KEY[:NAMESPACE[:AGENT]]",
        help="a client key, optionally bound to a namespace and agent (repeatable; prefer "
        f"--keys-file or ${KEYS_ENV}, which other users of the machine cannot read in ps)",
    )
    parser.add_argument("--keys-file", type=Path, help="client keys, one a line, # comments")
    parser.add_argument(
        "--no-auth", action="store_true", help="serve without keys (loopback addresses only)"
    )
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY_BYTES,
        help=f"largest request body (default {DEFAULT_MAX_BODY_BYTES})",
    )
    parser.add_argument(
        "--templates",
        type=Path,
        help="recognise these prompt templates in requests without cache options",
    )
    parser.add_argument(
        "--learn-templates",
        action="store_true",
        help="learn prompt templates from requests without cache options and cache their "
        "calls once a template is learned (off by default: a prompt passes through until its "
        "template has been seen several times, and answers are only as safe as its slots)",
    )
    parser.add_argument(
        "--learned-templates",
        type=Path,
        metavar="FILE",
        help="keep the templates learned in FILE between runs, so that their calls are cached "
        "from the first (implies --learn-templates)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        help="a CacheConfig file (JSON or TOML, e.g. written by `python -m llmcache tune`); "
        "the options below override its settings",
    )
    parser.add_argument("--mode", choices=[m.value for m in Mode], help="the cache's mode")
    parser.add_argument("--threshold", type=float, help="raw-cosine threshold (default 0.9)")
    parser.add_argument("--wrong-hit-budget", type=float, help="learn thresholds under it")
    parser.add_argument("--ttl-seconds", type=float, help="entries expire this long after")
    parser.add_argument("--max-entries", type=int, help="bound the whole cache")
    parser.add_argument("--upstream-timeout", type=float, default=600.0, help="seconds")
    parser.add_argument("--upstream-retries", type=int, default=2)
    parser.add_argument("--worker-threads", type=int, default=64)
    parser.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="let web pages of this origin call the proxy from a browser (repeatable)",
    )
    parser.add_argument("--access-log", action="store_true", help="log every request line")
    parser.add_argument("--log-level", default="info", help="uvicorn's log level")
    return parser


def _keys(args: argparse.Namespace) -> list[ProxyKey]:
    keys = [ProxyKey.parse(text) for text in args.key]
    if args.keys_file is not None:
        keys += parse_keys(args.keys_file.read_text(encoding="utf-8"))
    keys += parse_keys(os.environ.get(KEYS_ENV, ""))
    return keys


def _settings(args: argparse.Namespace) -> ProxySettings:
    config = {
        name: getattr(args, name)
        for name in ("mode", "threshold", "wrong_hit_budget", "ttl_seconds", "max_entries")
        if getattr(args, name) is not None
    }
    try:
        keys = _keys(args)
        base = CacheConfig() if args.config is None else CacheConfig.from_file(args.config)
        cache_config = base.updated(**config)
    except ValidationError as exc:
        raise ConfigurationError(describe(exc)) from None
    except OSError as exc:
        raise ConfigurationError(f"cannot read {args.keys_file}: {exc.strerror}") from None
    return ProxySettings.build(
        upstream=args.upstream,
        cache=args.cache,
        host=args.host,
        port=args.port,
        keys=tuple(keys),
        no_auth=args.no_auth,
        max_body_bytes=args.max_body_bytes,
        templates=args.templates,
        learn_templates=args.learn_templates,
        learned_templates=args.learned_templates,
        config=cache_config,
        upstream_timeout=args.upstream_timeout,
        upstream_retries=args.upstream_retries,
        worker_threads=args.worker_threads,
        cors_origins=tuple(args.cors_origin),
    )


def _interrupt(signum: int, frame: FrameType | None) -> None:
    # uvicorn shuts down gracefully on SIGTERM and then raises the signal again: this handler
    # makes that a normal exit, as Ctrl-C is.
    raise KeyboardInterrupt


def _log_to_stderr(level: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s:     %(message)s"))
    root = logging.getLogger("llmcache")
    root.addHandler(handler)
    root.setLevel(level.upper())


def proxy_main(argv: list[str]) -> int:
    """Run ``proxy`` with ``argv`` (without the ``proxy`` word); return the exit code."""
    import uvicorn

    args = _parser().parse_args(argv)
    _log_to_stderr(args.log_level)
    # Opened here rather than by the app, so that a configuration that cannot work is one
    # line on stderr, not a traceback of the server's start; the app closes them when it stops.
    try:
        settings = _settings(args)
        check_settings(settings)
        connection = open_upstream(settings.upstream)
    except LLMCacheError as exc:
        sys.stderr.write(f"llmcache proxy: {exc}\n")
        return 2
    try:
        cache = SemanticCache(settings.cache, config=settings.config)
    except (LLMCacheError, OSError) as exc:
        connection.close()
        sys.stderr.write(f"llmcache proxy: {exc}\n")
        return 2
    app = create_app(settings, upstream=connection, cache=cache)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=args.log_level,
        access_log=args.access_log,
        ws="none",  # HTTP only
        lifespan="on",
        server_header=False,
    )
    server = uvicorn.Server(config)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    code = 0
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    except SystemExit as exc:  # uvicorn's own exit when it cannot start (a port in use ...)
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        signal.signal(signal.SIGTERM, previous)
        # Closed by the app's shutdown already, unless it never started; closing is idempotent.
        cache.close()
        connection.close()
    if not server.started:
        return code or 1
    sys.stderr.write("llmcache proxy: stopped\n")
    return code
