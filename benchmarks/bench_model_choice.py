"""Which local model, and which way of asking it, tells a good answer from a random one.

    python benchmarks/bench_model_choice.py --model qwen2.5-coder-1.5b --temperature 0.3 \\
        --json model_choice.json

A cache's quality can only be measured against a model whose own answers are more alike than
random ones: if a random same-table answer is accepted as often as the model's own second
answer, no threshold can be shown better than another. This benchmark measures that gap on the
town's own prompts and, where a real model's answers exist, the agreement with them:

- **town**: ``--per-category`` distinct prompts of each category of a committed town run
  (default: the standard study's run 3), drawn seeded across its agents. Each is asked twice
  (two sampling seeds: the second ask reuses the server's prompt cache, so it costs the answer
  alone). *own*: the second answer is acceptable with the first as the truth (the template's own
  tolerance, :meth:`agent_core.Template.acceptable`); *random*: the first answer of another
  drawn prompt of the same agent and category is acceptable with this one's first answer as
  the truth. The gap (own minus random) is what a quality measurement can resolve.
- **shared agent** (``../shared/benchmarks/park_demo_isabella/``): ``--park`` distinct memories
  rated through Park et al.'s own poignancy prompt (the answer constrained to an integer 1-10),
  set against gpt-3.5-turbo's recorded rating of the same memory: within 1, and Spearman's rank
  correlation; beside it, a shuffled gpt-3.5 rating (chance). Also the *expectation* way: the
  rating read as the expectation over the model's token probabilities for the score's first
  digit (a "1" split into 1 and 10 by the next position's probabilities where the sampled
  answer began with "1"; elsewhere counted as 1) rather than one sampled token.

``--examples K`` asks with K worked examples before each importance prompt (town and shared
agent): K other memories of the shared agent, never among those measured, each asked through
the same prompt (the town's template for the town's calls, for the agent asking) and answered
with gpt-3.5-turbo's recorded rating, as earlier turns of the conversation. A town example
repeats the agent's persona block, so three make each prompt about four times as long: on 2
cores (2026-11-27) ``--examples 3`` with 80 town prompts and ``--park 200`` had not finished
after 55 minutes on qwen2.5-coder-1.5b and was stopped; measure a smaller sample first.

Each model runs on its own :class:`~llmcache.llm.LocalServer`. Printed: one table per model and
temperature, and the seconds per first ask (the speed a recording would run at).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import openai
from bench_models import header_line, machine_info  # a sibling script (benchmarks/ is on the path)
from park_calls import PARK, park_calls
from record_town import source_calls
from scipy.stats import spearmanr

from agent_core import TextAgreement, TownCall
from agent_core.call import town_call
from agent_core.llm import town_options, town_request
from agent_core.templates import IMPORTANCE
from agent_core.tolerance import DEFAULT_TEXT_BOUND
from experiments._odds import rating_distribution
from llmcache.embedders import StoredEmbedder, default_embedder
from llmcache.llm import LocalServer

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "docs" / "results" / "standard" / "data" / "run3.jsonl.gz"
CATEGORIES = ("importance score", "finding location", "actor reaction", "agent reaction")
SCORE_SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "rating",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 10}},
            "required": ["score"],
            "additionalProperties": False,
        },
    },
}


def town_sample(
    path: Path, per_category: int, seed: int, categories: Sequence[str] = CATEGORIES
) -> dict[str, list[TownCall]]:
    """``per_category`` distinct valid prompts per category, drawn seeded, spread over agents
    (round robin over each category's agents, so every agent has partners for *random*), then
    ordered by agent so that the server's prompt cache keeps each agent's shared prefix."""
    by_agent: dict[str, dict[str, dict[str, TownCall]]] = defaultdict(lambda: defaultdict(dict))
    for call, _ in source_calls(path, tuple(categories)):
        key = json.dumps(call.messages(), sort_keys=True)
        by_agent[call.category][call.agent].setdefault(key, call)
    rng = random.Random(seed)
    out: dict[str, list[TownCall]] = {}
    for category in categories:
        agents = {a: list(calls.values()) for a, calls in sorted(by_agent[category].items())}
        for calls in agents.values():
            rng.shuffle(calls)
        picked: list[TownCall] = []
        while len(picked) < per_category and any(agents.values()):
            for calls in agents.values():
                if calls and len(picked) < per_category:
                    picked.append(calls.pop())
        if picked:
            out[category] = sorted(picked, key=lambda c: c.agent)
    return out


def _text_agreement() -> TextAgreement:
    """Activities compared by the default embedder's cosine at the documented default bound
    (the study calibrates a bound per category; this benchmark compares models, not bounds)."""
    embedder = StoredEmbedder(default_embedder())  # each text embedded once

    def similarity(a: str, b: str) -> float:
        va, vb = embedder.embed([a, b])
        return float(np.clip(np.dot(va, vb), -1.0, 1.0))

    return TextAgreement(similarity, DEFAULT_TEXT_BOUND)


def _ask(client: openai.OpenAI, request: dict[str, Any]) -> tuple[str, float, Any]:
    started = time.perf_counter()
    completion = client.chat.completions.create(**request)
    choice = completion.choices[0]
    return choice.message.content or "", time.perf_counter() - started, choice


def _score(text: str) -> int | None:
    try:
        value = json.loads(text)["score"]
    except (ValueError, KeyError, TypeError):
        return None
    return int(value) if isinstance(value, int) else None


def _share(flags: Sequence[bool]) -> float:
    return 100.0 * sum(flags) / len(flags) if flags else float("nan")


#: A worked example: a memory of the shared agent, its prompt through Park's file, and
#: gpt-3.5-turbo's recorded rating of it.
Example = tuple[str, list[dict[str, Any]], int]


def _answered(rating: int) -> dict[str, Any]:
    return {"role": "assistant", "content": json.dumps({"score": rating})}


def _town_shots(call: TownCall, examples: Sequence[Example]) -> list[dict[str, Any]]:
    """The worked examples as earlier turns of ``call``'s conversation, each memory asked
    through the call's own template by the call's own agent."""
    turns: list[dict[str, Any]] = []
    for memory, _, rating in examples:
        shown = town_call(
            call.template,
            agent=call.agent,
            summary_block=call.summary_block,
            slots={**call.slots, "memory": memory},
            time=call.time,
        )
        turns += [shown.messages()[-1], _answered(rating)]
    return turns


def measure(
    server: LocalServer,
    town: dict[str, list[TownCall]],
    park: list[tuple[list[dict[str, Any]], int]],
    temperature: float,
    seed: int,
    concurrency: int,
    examples: Sequence[Example] = (),
) -> dict[str, Any]:
    client = server.client()
    rng = random.Random(seed)
    text = _text_agreement()
    result: dict[str, Any] = {
        "temperature": temperature,
        "examples": len(examples),
        "town": {},
        "park": {},
    }
    first_ask_seconds: list[float] = []

    def both(request: dict[str, Any]) -> tuple[tuple[str, float, Any], tuple[str, float, Any]]:
        first = _ask(client, {**request, "seed": seed, "logprobs": True, "top_logprobs": 10})
        second = _ask(client, {**request, "seed": seed + 1000})
        return first, second

    with ThreadPoolExecutor(concurrency) as pool:
        for category, calls in town.items():
            requests = []
            for c in calls:
                request = {
                    **town_request(c, server.model),
                    **town_options(c).constraints,
                    "temperature": temperature,
                }
                if examples and category == IMPORTANCE.category:
                    system, *rest = request["messages"]
                    request["messages"] = [system, *_town_shots(c, examples), *rest]
                requests.append(request)
            answers = list(pool.map(both, requests))
            first_ask_seconds += [a[0][1] for a in answers]
            own, rand = [], []
            for i, call in enumerate(calls):
                truth = answers[i][0][0]
                own.append(
                    call.template.acceptable(
                        answers[i][1][0], truth, call.requirements, text=text
                    ).acceptable
                )
                partners = [j for j, o in enumerate(calls) if j != i and o.agent == call.agent]
                if partners:
                    other = answers[rng.choice(partners)][0][0]
                    rand.append(
                        call.template.acceptable(
                            other, truth, call.requirements, text=text
                        ).acceptable
                    )
            result["town"][category] = {
                "n": len(calls),
                "own": _share(own),
                "random": _share(rand),
                "gap": _share(own) - _share(rand),
            }
        if park:
            shots = [turn for _, m, r in examples for turn in (*m, _answered(r))]
            requests = [
                {
                    "model": server.model,
                    "messages": [*shots, *m],
                    "response_format": SCORE_SCHEMA,
                    "max_tokens": 24,
                    "temperature": temperature,
                }
                for m, _ in park
            ]
            answers = list(pool.map(both, requests))
            first_ask_seconds += [a[0][1] for a in answers]
            gpt = [t for _, t in park]
            ours = [_score(a[0][0]) for a in answers]
            again = [_score(a[1][0]) for a in answers]
            dists = [rating_distribution(a[0][2]) for a in answers]
            expect = [
                sum(k * p for k, p in d.items()) if d else (float(s) if s else None)
                for d, s in zip(dists, ours, strict=True)
            ]
            shuffled = gpt[:]
            rng.shuffle(shuffled)
            pairs = [(o, t) for o, t in zip(ours, gpt, strict=True) if o is not None]
            epairs = [(e, t) for e, t in zip(expect, gpt, strict=True) if e is not None]
            own = [abs(a - b) <= 1 for a, b in zip(ours, again, strict=True) if a and b is not None]
            rand_own = []
            for i, a in enumerate(ours):
                j = rng.randrange(len(ours))
                if a is not None and ours[j] is not None and j != i:
                    rand_own.append(abs(a - ours[j]) <= 1)  # type: ignore[operator]
            result["park"] = {
                "n": len(park),
                "valid": len(pairs),
                "within1": _share([abs(o - t) <= 1 for o, t in pairs]),
                "within1_shuffled": _share(
                    [abs(o - s) <= 1 for o, s in zip(ours, shuffled, strict=True) if o is not None]
                ),
                "spearman": float(spearmanr([o for o, _ in pairs], [t for _, t in pairs])[0]),
                "spearman_expectation": float(
                    spearmanr([e for e, _ in epairs], [t for _, t in epairs])[0]
                ),
                "expectation_read": sum(d is not None for d in dists),
                "own": _share(own),
                "random": _share(rand_own),
                "gap": _share(own) - _share(rand_own),
                "mean": sum(o for o, _ in pairs) / max(1, len(pairs)),
                "mean_gpt": sum(gpt) / len(gpt),
            }
    first_ask_seconds.sort()
    result["first_ask_p50_s"] = first_ask_seconds[len(first_ask_seconds) // 2]
    result["first_ask_mean_s"] = sum(first_ask_seconds) / len(first_ask_seconds)
    return result


def recorded_spread(folder: Path, seed: int) -> dict[str, dict[str, float]]:
    """The town gap measured on a recording (``benchmarks/record_town.py``) without asking the
    model again: each line's second answer (``other_answers``) against its first, and a random
    same-agent line's first answer against it; the template's tolerance needs the query's
    requirements, so each line is matched to its town call in the recording's source runs."""
    provenance = json.loads((folder / "provenance.json").read_text(encoding="utf-8"))
    source = ROOT / provenance["source"]
    rng = random.Random(seed)
    text = _text_agreement()
    out: dict[str, dict[str, float]] = {}
    tallies: dict[str, tuple[list[bool], list[bool]]] = defaultdict(lambda: ([], []))
    for path in sorted(folder.glob("run*.jsonl.gz")):
        calls: dict[str, TownCall] = {}
        with gzip.open(source / path.name, "rt", encoding="utf-8") as lines:
            for line in lines:
                record = json.loads(line)
                if record.get("kind") == "call" and record.get("valid"):
                    call = TownCall.from_record(record)
                    calls[json.dumps(call.messages(), sort_keys=True)] = call
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            recorded = [json.loads(x) for x in lines if x.strip()]
        by_table: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        for r in recorded:
            by_table[(r["category"], r.get("agent", ""))].append(r)
        for (category, _), rows in by_table.items():
            own, rand = tallies[category]
            for i, r in enumerate(rows):
                call = calls[json.dumps(r["messages"], sort_keys=True)]
                req = call.requirements
                if r.get("other_answers"):
                    own.append(
                        call.template.acceptable(
                            r["other_answers"][0], r["answer"], req, text=text
                        ).acceptable
                    )
                if len(rows) > 1:
                    j = rng.choice([k for k in range(len(rows)) if k != i])
                    rand.append(
                        call.template.acceptable(
                            rows[j]["answer"], r["answer"], req, text=text
                        ).acceptable
                    )
    for category, (own, rand) in tallies.items():
        out[category] = {
            "n": len(own),
            "own": _share(own),
            "random": _share(rand),
            "gap": _share(own) - _share(rand),
        }
    return out


def park_sample(
    n: int, seed: int, examples: int = 0
) -> tuple[list[tuple[list[dict[str, Any]], int]], list[Example]]:
    """``n`` distinct rated memories of the shared agent, with gpt-3.5-turbo's rating, and
    ``examples`` further ones (never among the ``n``) to show as worked examples."""
    if not (PARK / "nodes.json").exists():
        return [], []
    seen: dict[str, Example] = {}
    for call in park_calls():
        memory = call.keywords[0] if call.keywords else call.messages[0]["content"]
        seen.setdefault(call.messages[0]["content"], (memory, call.messages, int(call.answer)))
    items = list(seen.values())
    random.Random(seed).shuffle(items)
    return [(m, r) for _, m, r in items[:n]], items[n : n + examples]


def render(model: str, r: dict[str, Any]) -> str:
    lines = [
        f"## {model}, temperature {r['temperature']}, {r.get('examples', 0)} worked examples "
        f"(first ask p50 {r['first_ask_p50_s']:.2f} s, mean {r['first_ask_mean_s']:.2f} s)",
        "| category | prompts | own second answer acceptable | random same-agent answer | gap |",
        "|---|---|---|---|---|",
    ]
    for category, t in r["town"].items():
        lines.append(
            f"| {category} | {t['n']} | {t['own']:.1f}% | {t['random']:.1f}% | {t['gap']:.1f} |"
        )
    p = r["park"]
    if p:
        lines.append(
            f"| shared agent (within 1) | {p['n']} | {p['own']:.1f}% | {p['random']:.1f}% "
            f"| {p['gap']:.1f} |"
        )
        lines.append(
            f"shared agent against gpt-3.5-turbo: within 1 {p['within1']:.1f}% (shuffled "
            f"{p['within1_shuffled']:.1f}%), Spearman {p['spearman']:.2f} sampled, "
            f"{p['spearman_expectation']:.2f} as the expectation ({p['expectation_read']} "
            f"distributions read); mean rating {p['mean']:.2f} (gpt-3.5: {p['mean_gpt']:.2f}); "
            f"{p['valid']}/{p['n']} valid"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", help="registered model (repeatable)")
    parser.add_argument("--temperature", type=float, action="append", help="repeatable")
    parser.add_argument(
        "--category", action="append", help=f"repeatable (default: {', '.join(CATEGORIES)})"
    )
    parser.add_argument("--run", type=Path, default=RUN, help="a committed town run (jsonl.gz)")
    parser.add_argument("--per-category", type=int, default=40)
    parser.add_argument("--park", type=int, default=80, help="shared agent's memories (0: none)")
    parser.add_argument(
        "--examples", type=int, default=0, help="worked examples before each importance prompt"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument(
        "--recording",
        type=Path,
        help="measure the town gap on this recording instead of asking a model (no server)",
    )
    args = parser.parse_args()
    if args.recording:
        print(header_line(machine_info()), flush=True)
        print("| category | prompts | own second answer acceptable | random same-agent | gap |")
        print("|---|---|---|---|---|")
        for category, t in recorded_spread(args.recording, args.seed).items():
            print(
                f"| {category} | {t['n']} | {t['own']:.1f}% | {t['random']:.1f}% | {t['gap']:.1f} |"
            )
        return 0
    models = args.model or ["qwen2.5-coder-1.5b"]
    temperatures = args.temperature or [0.3]
    town = town_sample(args.run, args.per_category, args.seed, args.category or CATEGORIES)
    park, examples = park_sample(args.park, args.seed, args.examples)
    if args.examples and len(examples) < args.examples:
        sys.exit(f"--examples {args.examples}: the shared agent's data holds too few memories")
    print(header_line(machine_info()), flush=True)
    report: dict[str, Any] = {"machine": machine_info().model_dump(), "runs": []}
    for model in models:
        with LocalServer(model, parallel=max(2, args.concurrency)) as server:
            for temperature in temperatures:
                r = measure(server, town, park, temperature, args.seed, args.concurrency, examples)
                r["model"] = model
                report["runs"].append(r)
                print(render(model, r), flush=True)
                if args.json:
                    args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
