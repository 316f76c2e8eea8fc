"""``python -m agent_core``: run the town and record every prompt.

    python -m agent_core run --days 2 --seed 1 --out runs/demo.jsonl
    python -m agent_core run --days 15 --llm openai --out runs/gpt.jsonl
    python -m agent_core run --days 1 --llm http://127.0.0.1:8080/v1 --model qwen --out runs/x.jsonl
    python -m agent_core templates

``--llm`` is ``scripted`` (the deterministic test double, the default), ``local`` (llmcache's
local server), ``openai`` (``OPENAI_API_KEY``) or the base URL of any OpenAI-compatible server
(``--model`` names its model; a key, if it needs one, comes from ``LLMCACHE_API_KEY``). Every
spec but ``scripted`` is decided by ``llmcache.llm.open_llm``, with its default models.
The JSONL dataset has one line per call (``kind == "call"``) and one per refused answer
(``kind == "invalid_attempt"``, ``resubmission: true``); a summary JSON is written beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from pathlib import Path
from typing import Any

from llmcache import EmbedMode, Mode
from llmcache.embedders import Embedder
from llmcache.errors import ConfigurationError

from .config import SimConfig
from .llm import DEFAULT_CONCURRENCY, DEFAULT_RATING_BATCH, open_town_llm
from .persona import load_agents
from .sim import RunSummary, Simulation
from .templates import TEMPLATES
from .world import load_world


def _client(args: argparse.Namespace, stack: contextlib.ExitStack) -> tuple[Any, str, str | None]:
    """The OpenAI-compatible client, the model name and the model to escalate to for ``--llm``.

    ``scripted`` is the town's own test double; every other spec is decided by llmcache's
    runtime (:func:`llmcache.llm.open_llm`, with its defaults). A local server is entered on
    ``stack``, so it is stopped by PID however the run ends.
    """
    if args.llm == "scripted":
        from .testing import ScriptedLLM

        client = ScriptedLLM(seed=args.seed, malformed_rate=args.malformed_rate)
        return client, args.model or "scripted", args.superior_model or "gpt-4o"
    from llmcache.llm import open_llm

    try:
        llm = stack.enter_context(
            open_llm(args.llm, model=args.model, superior_model=args.superior_model)
        )
    except ConfigurationError as exc:
        sys.exit(f"--llm {args.llm}: {exc}")
    return llm.client, llm.backend.model, llm.backend.escalation_model


def _embedder(name: str) -> Embedder:
    if name == "hash":
        from llmcache.testing import HashEmbedder

        return HashEmbedder()
    from llmcache.embedders import default_embedder

    return default_embedder()


def _print_summary(summary: RunSummary, out: Path) -> None:
    print(
        f"\n{summary.total_calls} prompts in {summary.days:g} simulated days "
        f"({summary.total_calls / max(summary.days, 1e-9):.0f} per day), "
        f"{summary.wall_seconds:.1f} s"
    )
    width = max(len(c) for c in summary.calls)
    print(
        f"  {'category':<{width}}  {'asked':>6}  {'per day':>8}  {'first try':>9}  "
        f"{'resubmitted':>11}  {'escalated':>9}  {'fell back':>9}"
    )
    for category, n in summary.calls.items():
        first = summary.first_try.get(category, 0)
        print(
            f"  {category:<{width}}  {n:6d}  {summary.calls_per_day[category]:8.1f}"
            f"  {first / n if n else 0:9.1%}  {summary.resubmitted.get(category, 0):11d}"
            f"  {summary.escalated.get(category, 0):9d}  {summary.failed.get(category, 0):9d}"
        )
    for category, n in summary.batched.items():
        print(
            f"{category}: {n} answered {n / max(summary.batches.get(category, 0), 1):.1f} "
            f"to a prompt ({summary.batches.get(category, 0)} prompts)"
        )
    observed = ", ".join(f"{k.split()[0]} {v}" for k, v in summary.observed_actors.items())
    print(f"observed actors: {observed}")
    print(f"dataset: {out}")


def _run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    # The per-call retry log of llmcache is too chatty for a run's console.
    logging.getLogger("llmcache").setLevel(logging.WARNING)
    # One line per HTTP request would bury the progress bar.
    for name in ("httpx", "httpx2", "openai"):
        logging.getLogger(name).setLevel(logging.WARNING)
    world = load_world(args.world)
    names = [n for part in args.agents or [] for n in part.split(",") if n.strip()]
    seeds = load_agents(args.agents_file, names=names or None, world=world)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists() and not args.append:
        sys.exit(f"{out} exists: choose another --out, or pass --append")
    embedder_name = args.embedder or ("hash" if args.llm == "scripted" else "minilm")
    embedder = _embedder(embedder_name)
    params: dict[str, Any] = {}
    if args.temperature is not None:
        params["temperature"] = args.temperature
    if args.max_tokens is not None:
        params["max_tokens"] = args.max_tokens
    with contextlib.ExitStack() as stack:
        client, model, superior = _client(args, stack)
        llm = open_town_llm(
            client,
            model=model,
            cache_dir=args.cache_dir,
            mode=Mode(args.cache_mode),
            embedder=embedder if args.cache_mode != "off" or args.cache_dir else None,
            record_to=out,
            threshold=args.threshold,
            max_attempts=args.max_attempts,
            superior_model=superior,
            embed=EmbedMode(args.embed),
            params=params,
            query_schemas=not args.template_schemas,
            concurrency=args.concurrency or (1 if args.llm == "scripted" else DEFAULT_CONCURRENCY),
            rating_batch=args.rating_batch
            or (1 if args.llm == "scripted" else DEFAULT_RATING_BATCH),
            seed=args.seed,
        )
        stack.callback(llm.close)
        sim = Simulation(
            llm, embedder=embedder, world=world, seeds=seeds, config=SimConfig(), seed=args.seed
        )
        summary = sim.run(args.days, progress=not args.quiet)
    summary_path = Path(args.summary) if args.summary else out.with_suffix(".summary.json")
    summary_path.write_text(summary.model_dump_json(indent=1) + "\n", encoding="utf-8")
    _print_summary(summary, out)
    return 0


def _templates(args: argparse.Namespace) -> int:
    rows = [
        {
            "category": t.category,
            "group": t.group,
            "modifier": t.modifier or "bypass",
            "keywords": list(t.keyword_slots),
        }
        for t in TEMPLATES
    ]
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        for r in rows:
            print(
                f"{r['category']:<24} {r['group']:<26} {r['modifier']:<7} "
                + ", ".join(r["keywords"])
            )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m agent_core", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="simulate the town and record every prompt")
    run.add_argument("--days", type=float, required=True, help="simulated days")
    run.add_argument(
        "--seed",
        type=int,
        default=0,
        help="the run's seed: the agents' random draws and every call's sampling seed (one "
        "seed, one town, on a server that honours seeds)",
    )
    run.add_argument("--out", required=True, help="JSONL dataset to write, e.g. runs/demo.jsonl")
    run.add_argument("--append", action="store_true", help="append to an existing dataset")
    run.add_argument("--agents", nargs="*", help="only these agents (full or first names)")
    run.add_argument("--llm", default="scripted", help="scripted | local | openai | base URL")
    run.add_argument("--model", help="model name (default depends on --llm)")
    run.add_argument("--superior-model", help="model invalid answers escalate to")
    run.add_argument("--temperature", type=float)
    run.add_argument("--max-tokens", type=int, help="answer length cap sent with every request")
    run.add_argument("--max-attempts", type=int, default=20)
    run.add_argument(
        "--concurrency",
        type=int,
        help="prompts asked together in flight where the town allows it (importance ratings of "
        f"one perception); default {DEFAULT_CONCURRENCY}, 1 for the scripted double (its "
        "seeded faults need order)",
    )
    run.add_argument(
        "--rating-batch",
        type=int,
        help="the most importance ratings of one moment asked in one prompt (each is still "
        f"cached and recorded on its own); default {DEFAULT_RATING_BATCH}, 1 (each in its own "
        "prompt) for the scripted double",
    )
    run.add_argument(
        "--template-schemas",
        action="store_true",
        help="send each template's plain JSON schema instead of the query's own (for a "
        "provider that refuses anyOf/prefixItems, or to compare)",
    )
    run.add_argument("--cache-dir", help="llmcache directory (default: a temporary one)")
    run.add_argument("--cache-mode", default="off", choices=[m.value for m in Mode])
    run.add_argument("--threshold", type=float, help="cosine threshold of online mode")
    run.add_argument("--embed", default="keyword", choices=[m.value for m in EmbedMode])
    run.add_argument(
        "--embedder",
        choices=["hash", "minilm"],
        help="memory relevance and cache embedder (default: hash for scripted)",
    )
    run.add_argument("--world", help="world JSON (default: the bundled town)")
    run.add_argument("--agents-file", help="agents JSON (default: the bundled eight)")
    run.add_argument(
        "--malformed-rate",
        type=float,
        default=0.0,
        help="scripted LLM only: fraction of invalid answers",
    )
    run.add_argument("--summary", help="summary JSON (default: beside --out)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.set_defaults(func=_run)

    tpl = sub.add_parser("templates", help="list the 14 prompt categories")
    tpl.add_argument("--json", action="store_true")
    tpl.set_defaults(func=_templates)

    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
