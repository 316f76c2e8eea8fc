"""Command line: ``python -m llmcache stats DIR``, ``prune DIR``, ``serve``, ``proxy``,
``replay RECORDING``, ``tune RECORDING`` and ``templates FILE``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ._budget import table_stats
from ._cache import open_backend
from ._config import Limits
from ._errors import ConfigurationError, LLMCacheError
from ._ledger import CacheStats, untabled_counts
from ._protocols import BoundedBackend


def _stats(args: argparse.Namespace) -> int:
    backend = open_backend(args.location)
    try:
        counters = backend.read_stats()
        tables = table_stats(counters)
        stats = CacheStats(tables=tables, **untabled_counts(counters))
        if isinstance(backend, BoundedBackend):
            entries, size = backend.usage()
            limits = backend.read_limits() or Limits()
            stats = stats.model_copy(update={"limits": limits, "entries": entries, "bytes": size})
    finally:
        backend.close()
    if args.json:
        sys.stdout.write(stats.model_dump_json(indent=2) + "\n")
    elif not tables:
        sys.stdout.write(f"{args.location}: no calls recorded yet\n")
    else:
        sys.stdout.write(stats.render() + "\n")
    return 0


def _prune(args: argparse.Namespace) -> int:
    backend = open_backend(args.location)
    try:
        if not isinstance(backend, BoundedBackend):
            raise ConfigurationError(f"{type(backend).__name__} cannot be bounded")
        given = {
            name: getattr(args, name)
            for name in Limits.model_fields
            if getattr(args, name) is not None
        }
        # The options given replace those recorded for this pass; the rest are kept.
        stored = backend.read_limits() or Limits()
        limits = Limits(**{**stored.model_dump(), **given})
        if not limits.bounded:
            raise ConfigurationError(
                "no limits recorded for this cache and none given: say --max-entries, "
                "--max-entries-per-table, --max-bytes or --ttl-seconds"
            )
        now = time.time() if args.now is None else args.now
        counts = backend.enforce(limits, now)
        entries, size = backend.usage()
    finally:
        backend.close()
    result = {**counts, "entries": entries, "bytes": size, "limits": limits.model_dump()}
    if args.json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        sys.stdout.write(
            f"{args.location}: evicted {counts['evicted']} for size, {counts['expired']} "
            f"expired ({limits.describe()}); {entries} entries, {size} bytes left\n"
        )
    return 0


def _partitions(args: argparse.Namespace) -> int:
    backend = open_backend(args.location)
    try:
        rows = [(p, backend.count(p.key)) for p in backend.partitions()]
    finally:
        backend.close()
    for p, n in sorted(rows, key=lambda r: (r[0].category, r[0].agent)):
        row = {"category": p.category, "agent": p.agent, "model": p.model, "key": p.key,
               "entries": n}  # fmt: skip
        sys.stdout.write(json.dumps(row, ensure_ascii=False) + "\n")
    return 0


def _templates(args: argparse.Namespace) -> int:
    """The templates a learned-templates file keeps (``TemplateLearner(path=...)``, the proxy's
    ``--learned-templates``), and with ``--export`` the same as prompt files to read and pin."""
    from ._learn import TemplateLearner

    if not args.file.is_file():
        raise ConfigurationError(f"{args.file}: no learned-templates file there")
    learned = TemplateLearner(path=args.file)
    templates = learned.templates()
    if args.export is not None:
        written = learned.export(args.export)
        sys.stdout.write(f"{len(written)} prompt files written to {args.export}\n")
        return 0
    if args.json:
        sys.stdout.write(json.dumps([t.model_dump() for t in templates]) + "\n")
        return 0
    for t in templates:
        at = f"  learned at {t.site}" if t.site else ""
        sys.stdout.write(
            f"{t.name}  {t.calls} calls  slots {', '.join(t.slots)}{at}\n  {t.shown()}\n"
        )
    if not templates:
        sys.stdout.write(f"{args.file}: no learned templates\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "serve":
        # The LLM runtime is imported only by the command that runs it: the cache's own
        # commands never load it.
        from .llm._serve import serve_main

        code: int = serve_main(argv[1:])
        return code
    if argv and argv[0] == "proxy":
        # The proxy, like the runtime, is loaded only by its own command (extra [proxy]).
        try:
            from .proxy._cli import proxy_main
        except ImportError as exc:
            sys.stderr.write(
                f"llmcache proxy needs the [proxy] extra ({exc.name} is missing): "
                "pip install 'llmcache[proxy]'\n"
            )
            return 2
        code = proxy_main(argv[1:])
        return code
    if argv and argv[0] in ("replay", "tune"):
        from ._replay_cli import replay_main, tune_main

        run_replay = replay_main if argv[0] == "replay" else tune_main
        code = run_replay(argv[1:])
        return code
    if argv and argv[0] in ("export", "import"):
        from ._transfer import export_main, import_main

        run = export_main if argv[0] == "export" else import_main
        code = run(argv[1:])
        return code
    parser = argparse.ArgumentParser(prog="python -m llmcache", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("stats", help="per-table lookups, hits, similarity, tokens and dollars")
    p.add_argument("location", help="cache directory (or postgresql:// DSN)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=_stats)
    p = sub.add_parser(
        "prune", help="evict expired entries and entries over the cache's bounds, now"
    )
    p.add_argument("location", help="cache directory (or postgresql:// DSN)")
    p.add_argument("--max-entries", dest="max_entries", type=int, metavar="N")
    p.add_argument("--max-entries-per-table", dest="max_entries_per_table", type=int, metavar="N")
    p.add_argument("--max-bytes", dest="max_bytes", type=int, metavar="N")
    p.add_argument("--ttl-seconds", dest="ttl_seconds", type=float, metavar="S")
    p.add_argument(
        "--now", type=float, help="the time to expire by (a simulation's clock; default: now)"
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_prune)
    p = sub.add_parser("tables", help="list the tables (partitions) and their entry counts")
    p.add_argument("location")
    p.set_defaults(func=_partitions)
    p = sub.add_parser("templates", help="the templates a learned-templates file keeps")
    p.add_argument("file", type=Path, help="the file (TemplateLearner(path=...))")
    p.add_argument("--export", type=Path, metavar="DIR", help="write them as prompt files")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_templates)
    sub.add_parser("serve", help="start the local OpenAI-compatible LLM server (see --help)")
    sub.add_parser("proxy", help="serve an OpenAI-compatible caching proxy (see --help)")
    sub.add_parser("replay", help="replay a recording through a configuration (see --help)")
    sub.add_parser("tune", help="choose settings from a recording under a bound (see --help)")
    sub.add_parser("export", help="copy a cache (directory or postgresql:// DSN) into another")
    sub.add_parser("import", help="copy a cache into this one (same as export, reversed names)")
    args = parser.parse_args(argv)
    try:
        result: int = args.func(args)
    except (LLMCacheError, OSError) as exc:
        # A damaged or unreadable cache is a fact to report, not a traceback: one line saying
        # what is wrong (the library's messages say what to do about it), and a failing status.
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        sys.stderr.write(f"llmcache {args.command}: {first_line}\n")
        return 1
    return result


if __name__ == "__main__":
    raise SystemExit(main())
