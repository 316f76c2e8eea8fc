"""Throughput of the local LLM server on an agent-shaped workload, and how often its JSON parses.

    python benchmarks/bench_local_llm.py                      # throughput table (a few minutes)
    python benchmarks/bench_local_llm.py --json-validity      # + unconstrained vs constrained JSON
    python benchmarks/bench_local_llm.py --model qwen2.5-coder-1.5b --agents 4 --questions 2
    python benchmarks/bench_local_llm.py --mix mypkg.mixes:agent_mix   # another prompt mix
    python benchmarks/bench_local_llm.py --mix town_mix:town_mix --levers \
        --before-model smollm2-135m                    # where the town's time goes

What it measures, on a fresh server per configuration:
- start time: spawning llama-server (router) until the model answers;
- per pass over the prompt mix: prompts/s, prompt tokens/s (all prompt tokens, cached or not,
  over wall time), evaluated prompt tokens/s (only those the model computed), generation
  tokens/s, and the share of prompt tokens served from the prefix cache;
- *cold* is the first pass (no agent prefix cached); *warm* repeats the same agents with new
  questions, so only the shared prefixes can be reused;
- 1 slot with 1 request at a time, versus N slots with N requests in flight, with and without
  pinning each agent to a slot (``id_slot``).

The prompt mix is pluggable: ``--mix module:function`` names a callable
``function(pass_index: int, agents: int, questions: int) -> list[dict]`` whose dicts have keys
``category``, ``agent``, ``messages``, ``schema`` (a JSON schema or None) and ``max_tokens``.
The built-in mix imitates generative-agent prompts: a shared instruction, a ~600-token agent
summary, and a short question with a JSON answer. Figures depend on how busy the machine is;
the table header prints the load average.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmcache.llm import (
    DEFAULT_MODEL,
    END_BIAS,
    MODELS,
    JSONEndTransport,
    LocalServer,
    find_model,
)

Prompt = dict[str, Any]
Mix = Callable[[int, int, int], list[Prompt]]

# ----------------------------------------------------------------------------- built-in mix

NAMES = [
    "Liam Oliver", "Emma Stone", "Noah Patel", "Olivia Chen",
    "Ava Garcia", "Lucas Brown", "Mia Johnson", "Ethan Kim",
]  # fmt: skip
TRAITS = ["kind", "curious", "stubborn", "cheerful", "anxious", "patient", "witty", "proud"]
JOBS = ["baker", "student", "painter", "pharmacist", "teacher", "shop owner", "poet", "chef"]
PLACES = ["Hobbs Cafe", "Oak Hill College", "Johnson Park", "the Pharmacy", "the Library"]
ITEMS = ["tree", "bench", "oven", "bookshelf", "piano", "fountain", "counter", "lamp"]
EVENTS = [
    "is brushing their teeth", "found a lost wallet", "argued with a friend",
    "is idle", "won a painting prize", "is eating breakfast", "heard thunder outside",
    "got a letter from home", "is sweeping the floor", "forgot an appointment",
]  # fmt: skip

SYSTEM = (
    "You are simulating a person in a small town. Stay in character. Answer with a single "
    "JSON object and nothing else."
)


def _summary(agent: int) -> str:
    """A long, agent-specific prefix like the thesis's agent summary (~600 tokens)."""
    rng = random.Random(agent)
    name = NAMES[agent % len(NAMES)]
    lines = [
        f"Name: {name} (age: {20 + agent * 5})",
        f"Innate traits: {', '.join(rng.sample(TRAITS, 3))}",
        f"Occupation: {JOBS[agent % len(JOBS)]}. Lives near {rng.choice(PLACES)}.",
        f"{name} cares about friends, routine and the town's small events.",
        "Recent memories:",
    ]
    for i in range(40):
        event = rng.choice(EVENTS)
        place = rng.choice(PLACES)
        lines.append(f"- Day {1 + i // 8}, {8 + i % 12}:00: someone at {place} {event}.")
    return "\n".join(lines)


def _question(kind: int, rng: random.Random, name: str) -> tuple[str, str, Any, int]:
    event = rng.choice(EVENTS)
    if kind == 0:
        schema = {
            "type": "object",
            "properties": {"rating": {"type": "integer", "minimum": 1, "maximum": 10}},
            "required": ["rating"],
            "additionalProperties": False,
        }
        text = (
            f"On a scale of 1 to 10, where 1 is purely mundane and 10 is extremely poignant, "
            f"rate the likely poignancy of: {name} {event}. "
            'Answer as JSON: {"rating": <integer 1-10>}'
        )
        return "importance", text, schema, 16
    if kind == 1:
        options = rng.sample(PLACES, 3)
        schema = {
            "type": "object",
            "properties": {"place": {"type": "string", "enum": options}},
            "required": ["place"],
            "additionalProperties": False,
        }
        text = (
            f"{name} wants to go somewhere after noticing that someone {event}. Which place "
            f"should {name} go to? Options: {', '.join(options)}. "
            'Answer as JSON: {"place": "<one of the options>"}'
        )
        return "action_location", text, schema, 24
    if kind == 2:
        item = rng.choice(ITEMS)
        schema = {
            "type": "object",
            "properties": {
                "react": {"type": "boolean"},
                "reason": {"type": "string", "maxLength": 80},
            },
            "required": ["react", "reason"],
            "additionalProperties": False,
        }
        text = (
            f"{name} sees that the {item} is being used while someone {event}. Should {name} "
            'react? Answer as JSON: {"react": true|false, "reason": "<short reason>"}'
        )
        return "actor_reaction", text, schema, 48
    schema = {
        "type": "object",
        "properties": {
            "activity": {"type": "string", "maxLength": 60},
            "minutes": {"type": "integer", "minimum": 5, "maximum": 120},
        },
        "required": ["activity", "minutes"],
        "additionalProperties": False,
    }
    text = (
        f"It is {rng.randint(7, 21)}:00. What does {name} do next, and for how many minutes? "
        'Answer as JSON: {"activity": "<short activity>", "minutes": <integer 5-120>}'
    )
    return "next_activity", text, schema, 40


def builtin_mix(pass_index: int, agents: int, questions: int) -> list[Prompt]:
    """``agents`` agents x ``questions`` short JSON questions; new questions every pass."""
    rng = random.Random(1000 + pass_index)
    prompts: list[Prompt] = []
    for q in range(questions):
        for agent in range(agents):
            name = NAMES[agent % len(NAMES)]
            category, text, schema, max_tokens = _question((q + agent) % 4, rng, name)
            prompts.append(
                {
                    "category": category,
                    "agent": name,
                    "messages": [
                        {"role": "system", "content": SYSTEM},
                        {"role": "user", "content": f"{_summary(agent)}\n\n{text}"},
                    ],
                    "schema": schema,
                    "max_tokens": max_tokens,
                }
            )
    return prompts


# ----------------------------------------------------------------------------- measuring


@dataclass
class PassResult:
    label: str
    prompts: int = 0
    wall: float = 0.0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    evaluated_tokens: int = 0
    evaluated_ms: float = 0.0
    completion_tokens: int = 0
    generation_ms: float = 0.0
    parsed: int = 0
    latencies: list[float] = field(default_factory=list)

    def row(self) -> list[str]:
        wall = self.wall or 1e-9
        return [
            self.label,
            f"{self.prompts}",
            f"{self.prompts / wall:.2f}",
            f"{self.prompt_tokens / wall:.0f}",
            f"{1000 * self.evaluated_tokens / self.evaluated_ms:.0f}" if self.evaluated_ms else "-",
            f"{self.completion_tokens / wall:.1f}",
            f"{100 * self.cached_tokens / max(self.prompt_tokens, 1):.0f}%",
            f"{statistics.median(self.latencies):.2f}" if self.latencies else "-",
            f"{self.parsed}/{self.prompts}",
        ]


HEADER = [
    "configuration", "n", "prompts/s", "prompt tok/s", "eval tok/s",
    "gen tok/s", "cached", "p50 s", "json ok",
]  # fmt: skip


def _request(
    client: Any, server: LocalServer, prompt: Prompt, pin: bool, model: str
) -> tuple[Any, float]:
    kwargs: dict[str, Any] = {
        "model": model,
        "messages": prompt["messages"],
        "max_tokens": prompt["max_tokens"],
        "temperature": 0,
    }
    if prompt.get("schema") is not None:
        kwargs["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": prompt["category"], "schema": prompt["schema"]},
        }
    if pin:
        kwargs["extra_body"] = {"id_slot": server.slot_for(prompt["agent"], model)}
    started = time.perf_counter()
    reply = client.chat.completions.create(**kwargs)
    return reply, time.perf_counter() - started


def run_pass(
    server: LocalServer,
    prompts: list[Prompt],
    label: str,
    concurrency: int,
    pin: bool,
    client: Any = None,
) -> PassResult:
    client = client or server.client()
    result = PassResult(label)
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        futures = [pool.submit(_request, client, server, p, pin, server.model) for p in prompts]
        replies = [f.result() for f in futures]
    result.wall = time.perf_counter() - started
    for reply, latency in replies:
        result.prompts += 1
        result.latencies.append(latency)
        usage = reply.usage
        if usage is not None:
            result.prompt_tokens += usage.prompt_tokens
            result.completion_tokens += usage.completion_tokens
        timings = (reply.model_extra or {}).get("timings") or {}
        result.cached_tokens += int(timings.get("cache_n", 0))
        result.evaluated_tokens += int(timings.get("prompt_n", 0))
        result.evaluated_ms += float(timings.get("prompt_ms", 0.0))
        result.generation_ms += float(timings.get("predicted_ms", 0.0))
        try:
            json.loads(reply.choices[0].message.content or "")
            result.parsed += 1
        except ValueError:
            pass
    return result


def bench_throughput(args: argparse.Namespace, mix: Mix) -> tuple[list[PassResult], list[float]]:
    n = args.parallel
    configs = [
        ("1 slot, sequential", 1, 1, False),
        (f"{n} slots, {n} in flight", n, n, False),
        (f"{n} slots, {n} in flight, id_slot", n, n, True),
    ]
    if args.sequential_only:
        configs = configs[:1]
    results: list[PassResult] = []
    starts: list[float] = []
    for name, slots, concurrency, pin in configs:
        server = LocalServer(
            args.model, parallel=slots, ctx_per_slot=args.ctx, threads=args.threads
        )
        with server:
            starts.append(server.start_seconds or 0.0)
            for pass_index, phase in enumerate(["cold", "warm"]):
                prompts = mix(pass_index, args.agents, args.questions)
                result = run_pass(server, prompts, f"{name}: {phase}", concurrency, pin)
                results.append(result)
                _say("  " + " | ".join(result.row()))
    return results, starts


@dataclass(frozen=True)
class Lever:
    """One way to serve the town: the model, server threads, requests in flight, the end bias."""

    name: str
    model: str | None = None  # None: --model
    threads: int | None = None
    in_flight: int = 1
    end_bias: float | None = END_BIAS

    def client(self, server: LocalServer) -> Any:
        import openai

        if self.end_bias is None:
            # A plain HTTP client: no end-token bias, answers run on in grammar whitespace.
            return server.client(http_client=openai.DefaultHttpxClient())
        transport = JSONEndTransport(server.root_url, bias=self.end_bias)
        return server.client(http_client=openai.DefaultHttpxClient(transport=transport))


def levers(args: argparse.Namespace) -> list[Lever]:
    cores = os.cpu_count() or 1
    before = [
        Lever(f"before: {args.before_model}, no end bias", model=args.before_model,
              threads=args.threads, end_bias=None),
    ] if args.before_model else []  # fmt: skip
    return [
        *before,
        Lever("no end bias, sequential", threads=args.threads, end_bias=None),
        Lever(f"end bias +{END_BIAS:g}, sequential", threads=args.threads),
        Lever("end bias +100, sequential", threads=args.threads, end_bias=100.0),
        Lever(f"end bias, {cores} generation threads", threads=cores),
        Lever(f"end bias, {args.parallel} in flight", threads=args.threads,
              in_flight=args.parallel),
    ]  # fmt: skip


def bench_levers(args: argparse.Namespace, mix: Mix) -> list[PassResult]:
    """Every lever on the same prompts, each on a fresh server, rounds interleaved.

    Each round runs every lever once (cold pass, then warm pass) on that round's prompts, so a
    change of machine load during the run falls on all levers alike; the ratios against the
    first lever are of sums over the rounds.
    """
    chosen = levers(args)
    totals = {lever.name: PassResult(lever.name) for lever in chosen}
    for round_index in range(args.rounds):
        for lever in chosen:
            # As the town serves: several slots (each keeps an agent's prefix), whatever the
            # number of requests in flight.
            server = LocalServer(
                lever.model or args.model,
                parallel=max(lever.in_flight, args.parallel),
                ctx_per_slot=args.ctx,
                threads=lever.threads,
            )
            with server:
                client = lever.client(server)
                for phase in range(2):
                    prompts = mix(2 * round_index + phase, args.agents, args.questions)
                    result = run_pass(
                        server, prompts, lever.name, lever.in_flight, False, client=client
                    )
                    _merge(totals[lever.name], result)
            _say(f"  round {round_index + 1}: {' | '.join(totals[lever.name].row())}")
    return list(totals.values())


def _merge(total: PassResult, one: PassResult) -> None:
    for name in (
        "prompts", "wall", "prompt_tokens", "cached_tokens", "evaluated_tokens",
        "evaluated_ms", "completion_tokens", "generation_ms", "parsed",
    ):  # fmt: skip
        setattr(total, name, getattr(total, name) + getattr(one, name))
    total.latencies.extend(one.latencies)


def lever_rows(results: list[PassResult]) -> list[list[str]]:
    """The throughput table with each lever's ratio to the first, and where its time went."""
    base = results[0]
    rows = []
    for r in results:
        ratio = (r.prompts / r.wall) / (base.prompts / base.wall) if r.wall and base.wall else 0
        rows.append(
            [
                *r.row(),
                f"{ratio:.2f}x",
                f"{r.evaluated_ms / 1000 / max(r.prompts, 1):.3f}",
                f"{r.generation_ms / 1000 / max(r.prompts, 1):.3f}",
                f"{r.completion_tokens / max(r.prompts, 1):.1f}",
            ]
        )
    return rows


LEVER_HEADER = [*HEADER, "vs first", "read s/prompt", "gen s/prompt", "gen tok/prompt"]


# ----------------------------------------------------------------------------- JSON validity


def conforms(value: Any, schema: dict[str, Any]) -> bool:
    """The subset of JSON Schema the mixes use: type, properties, required, enum, min/max,
    maxLength, additionalProperties=false."""
    kind = schema.get("type")
    if "enum" in schema and value not in schema["enum"]:
        return False
    if kind == "object":
        if not isinstance(value, dict):
            return False
        props: dict[str, Any] = schema.get("properties", {})
        if any(key not in value for key in schema.get("required", [])):
            return False
        if schema.get("additionalProperties") is False and set(value) - set(props):
            return False
        return all(conforms(value[k], props[k]) for k in value if k in props)
    if kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            return False
    elif kind == "number":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
    elif kind == "string":
        if not isinstance(value, str):
            return False
        return len(value) <= schema.get("maxLength", len(value))
    elif kind == "boolean":
        return isinstance(value, bool)
    if "minimum" in schema and value < schema["minimum"]:
        return False
    return not ("maximum" in schema and value > schema["maximum"])


def _loose(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with only structure and types: no enum, no ranges, no length limits."""
    dropped = {"enum", "minimum", "maximum", "maxLength"}
    out = {k: v for k, v in schema.items() if k not in dropped}
    if "properties" in out:
        out["properties"] = {k: _loose(v) for k, v in out["properties"].items()}
    return out


def _parse_json(text: str) -> Any:
    return json.loads(text)


def bench_json_validity(args: argparse.Namespace, mix: Mix) -> list[list[str]]:
    prompts = mix(7, args.agents, args.questions)[: args.validity_prompts]
    modes: list[tuple[str, Callable[[dict[str, Any], str], dict[str, Any] | None]]] = [
        ("unconstrained (instructions only)", lambda schema, name: None),
        ("json_object", lambda schema, name: {"type": "json_object"}),
        (
            "json_schema, types only",
            lambda schema, name: {
                "type": "json_schema",
                "json_schema": {"name": name, "schema": _loose(schema)},
            },
        ),
        (
            "json_schema, full (enum, ranges)",
            lambda schema, name: {
                "type": "json_schema",
                "json_schema": {"name": name, "schema": schema, "strict": True},
            },
        ),
    ]
    rows: list[list[str]] = []
    with LocalServer(args.model, parallel=2, ctx_per_slot=args.ctx, threads=args.threads) as srv:
        client = srv.client()
        for label, response_format in modes:
            parsed = valid = truncated = 0

            def ask(prompt: Prompt, response_format: Any = response_format) -> Any:
                kwargs: dict[str, Any] = {
                    "model": srv.model,
                    "messages": prompt["messages"],
                    # Generous: this measures format, not length limits.
                    "max_tokens": 4 * prompt["max_tokens"],
                    "temperature": 0,
                }
                rf = response_format(prompt["schema"], prompt["category"])
                if rf is not None:
                    kwargs["response_format"] = rf
                return client.chat.completions.create(**kwargs)

            with ThreadPoolExecutor(max_workers=2) as pool:
                replies = list(pool.map(ask, prompts))
            for prompt, reply in zip(prompts, replies, strict=True):
                choice = reply.choices[0]
                truncated += choice.finish_reason == "length"
                try:
                    value = _parse_json(choice.message.content or "")
                except ValueError:
                    continue
                parsed += 1
                valid += conforms(value, prompt["schema"])
            n = len(prompts)
            rows.append([label, f"{parsed}/{n}", f"{valid}/{n}", f"{truncated}/{n}"])
            _say("  " + " | ".join(rows[-1]))
    return rows


# ----------------------------------------------------------------------------- output


def _say(text: str = "") -> None:
    print(text, flush=True)


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [" | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("-+-".join("-" * w for w in widths))
    lines += [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def _install_record() -> str:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    record = cache / "llmcache" / "install_llm.jsonl"
    if not record.is_file():
        return "no record (run scripts/install_llm.sh)"
    runs = [json.loads(line) for line in record.read_text().splitlines() if line.strip()]
    last = runs[-1]
    text = f"last run {last['total_seconds']}s ({last['date']})"
    # A compile shows up as the slowest runtime install; cached-wheel installs take seconds.
    slowest = max(runs, key=lambda r: r.get("runtime_seconds", 0))
    if slowest.get("runtime_seconds", 0) > 0:
        text += (
            f"; slowest runtime install {slowest['runtime_seconds']}s ({slowest['date']}),"
            f" weights {slowest['weights_seconds']}s"
        )
    return text


def _load_mix(spec: str | None) -> Mix:
    if not spec:
        return builtin_mix
    module_name, _, attr = spec.partition(":")
    mix: Mix = getattr(importlib.import_module(module_name), attr or "mix")
    return mix


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"one of {', '.join(MODELS)}")
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--questions", type=int, default=3, help="questions per agent and pass")
    parser.add_argument("--parallel", type=int, default=4, help="N for the N-slot runs")
    parser.add_argument("--ctx", type=int, default=2048, help="context tokens per slot")
    parser.add_argument(
        "--threads", type=int, default=None, help="llama.cpp threads (default: cores - 1)"
    )
    parser.add_argument("--mix", help="module:function producing the prompt mix")
    parser.add_argument("--json-validity", action="store_true", help="also measure JSON validity")
    parser.add_argument("--validity-prompts", type=int, default=20)
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument(
        "--sequential-only", action="store_true", help="only the 1-slot configuration"
    )
    parser.add_argument(
        "--levers",
        action="store_true",
        help="compare the throughput levers (end bias, threads, requests in flight) instead",
    )
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds of --levers")
    parser.add_argument(
        "--before-model",
        help="with --levers: first measure this model without the end bias (e.g. smollm2-135m)",
    )
    parser.add_argument("--json", help="write all figures to this JSON file")
    args = parser.parse_args(argv)

    mix = _load_mix(args.mix)
    spec = MODELS.get(args.model)
    title = spec.title if spec else args.model
    _say(f"# local LLM benchmark: {args.model} ({title}) via llama.cpp llama-server")
    _say(f"weights: {find_model(args.model)}")
    _say(f"cores: {os.cpu_count()}, load average at start: {os.getloadavg()[0]:.2f}")
    _say(f"install (scripts/install_llm.sh): {_install_record()}")
    sample = mix(0, args.agents, args.questions)
    _say(
        f"mix: {args.mix or 'built-in'}; {len(sample)} prompts per pass, "
        f"{len({p['agent'] for p in sample})} agents, "
        f"categories {sorted({p['category'] for p in sample})}"
    )
    figures: dict[str, Any] = {"model": args.model, "cores": os.cpu_count()}

    if args.levers:
        _say(
            f"\nlevers: {args.rounds} interleaved rounds, each a cold and a warm pass per lever "
            "on a fresh server"
        )
        results = bench_levers(args, mix)
        _say()
        _say(_table(LEVER_HEADER, lever_rows(results)))
        figures["levers"] = [dict(zip(LEVER_HEADER, r, strict=True)) for r in lever_rows(results)]
    elif not args.skip_throughput:
        _say("\nthroughput (each configuration on a fresh server: cold pass, then warm pass)")
        results, starts = bench_throughput(args, mix)
        _say()
        _say(_table(HEADER, [r.row() for r in results]))
        _say(
            f"\nserver start (spawn to model ready): median {statistics.median(starts):.2f}s, "
            f"all {', '.join(f'{s:.2f}' for s in starts)}s"
        )
        figures["start_seconds"] = starts
        figures["throughput"] = [dict(zip(HEADER, r.row(), strict=True)) for r in results]

    if args.json_validity:
        _say(f"\nJSON validity on {args.validity_prompts} prompts (temperature 0)")
        rows = bench_json_validity(args, mix)
        _say()
        _say(_table(["decoding", "parses", "matches full schema", "hit max_tokens"], rows))
        figures["json_validity"] = rows

    _say(f"\nload average at end: {os.getloadavg()[0]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
