"""Adoption that keeps quality as is: a Park-style prompt file recognised as published, on a
model's recorded answers, against explicit keywords and a declared agent slot.

    python benchmarks/bench_adoption.py [--runs 1] [--isabella] [--threshold 0.9]

No LLM runs. The stream is built from the committed standard study's recorded runs
(``docs/results/standard/data/run<N>.jsonl.gz``): every ``importance score`` call of the town's
8 agents, in its recorded order, rendered through Park et al.'s importance prompt file
(``examples/park_prompts/poignancy_event.txt``: the agent's name, its persona summary -- the
call's recorded ``summary_block`` -- and the name again in their own slots, the memory in the
last), with the local model's recorded score as the true answer. The upstream is a fake that
answers each call with its recorded answer; identical memories of one agent asked again give
the model's own variability (a recorded answer against the previous recorded answer to the
same prompt). With ``--isabella`` the same is run on ``../shared/benchmarks/park_demo_isabella/``
(one agent of Park et al.'s demo run, gpt-3.5-turbo's ratings; its persona summary built from
``scratch.json`` as Park's ``get_str_iss``; idle events and daily plans left out, their ratings
being set without the model): one agent cannot show crossing, but shows the persona effect.

Three ways the calls reach the cache, each through ``CachedLLM`` with the real default
embedder (the local MiniLM) and the default threshold:

- ``explicit``: ``cache=CacheOptions(category, agent, keywords=[the memory])``;
- ``as is``: no ``cache=`` at all, ``templates=`` the prompt file exactly as published (no
  ``agent slot:`` note): one table for every agent, the slots' roles learned from the calls;
- ``declared``: the same file with its agent slot declared (``agent_slot="0"``).

Printed per way: served (share of calls answered from the cache), within 1 (served answers
within 1 point of the call's recorded answer), excess (points: the served answers' share
farther than 1 point, minus the model's own share of such pairs), crossed (served answers
first given to another agent).
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import tempfile
from pathlib import Path
from typing import Any

from bench_models import header_line, machine_info  # beside this file

from llmcache import CacheConfig, CachedLLM, CacheOptions, PromptTemplate, SemanticCache
from llmcache.embedders import Embedder, MiniLMEmbedder
from llmcache.templates import TemplateSet
from llmcache.testing import FakeOpenAI

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "docs" / "results" / "standard" / "data"
PROMPT = ROOT / "examples" / "park_prompts" / "poignancy_event.txt"
ISABELLA = ROOT.parent / "shared" / "benchmarks" / "park_demo_isabella"

Call = dict[str, Any]  # agent, persona, memory, score


def town_stream(run: int) -> list[Call]:
    """The importance calls of one recorded standard run, in order."""
    calls = []
    with gzip.open(RUNS / f"run{run}.jsonl.gz", "rt", encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            if row.get("kind") != "call" or row.get("category") != "importance score":
                continue
            score = _score(row.get("response") or "")
            call = (row.get("metadata") or {}).get("call") or {}
            if score is None or not call.get("summary_block"):
                continue
            calls.append(
                {
                    "agent": row["agent"],
                    "persona": call["summary_block"],
                    "memory": row["keywords"][0],
                    "score": score,
                }
            )
    return calls


def isabella_stream() -> list[Call]:
    """Isabella Rodriguez's rated memories (see the module documentation), in order."""
    nodes = json.loads((ISABELLA / "nodes.json").read_text(encoding="utf-8"))
    s = json.loads((ISABELLA / "scratch.json").read_text(encoding="utf-8"))
    # Park et al.'s Scratch.get_str_iss.
    persona = (
        f"Name: {s['name']}\nAge: {s['age']}\nInnate traits: {s['innate']}\n"
        f"Learned traits: {s['learned']}\nCurrently: {s['currently']}\n"
        f"Lifestyle: {s['lifestyle']}\nDaily plan requirement: {s['daily_plan_req']}\n"
        f"Current Date: {s['curr_time']}\n"
    )
    calls = []
    for node in sorted(nodes.values(), key=lambda n: n["node_count"]):
        memory = node["embedding_key"]
        if "is idle" in memory or "'s plan for" in memory:
            continue
        calls.append(
            {"agent": s["name"], "persona": persona, "memory": memory, "score": node["poignancy"]}
        )
    return calls


def _score(text: str) -> int | None:
    found = re.search(r"\d+", text)
    return int(found.group()) if found else None


def self_agreement(calls: list[Call]) -> tuple[float, int]:
    """The model's own: each repeat of (agent, memory) against its previous recorded answer."""
    last: dict[tuple[str, str], int] = {}
    near = pairs = 0
    for call in calls:
        key = (call["agent"], call["memory"])
        if key in last:
            pairs += 1
            near += abs(last[key] - call["score"]) <= 1
        last[key] = call["score"]
    return (near / pairs if pairs else float("nan")), pairs


def replay(calls: list[Call], way: str, embedder: Embedder, threshold: float) -> dict[str, Any]:
    """Replay the stream through a fresh cache one way; served, within-1 and crossed counts."""
    current: list[Call] = []
    fake = FakeOpenAI(lambda request: f"{current[0]['score']}|{current[0]['agent']}")
    template = PromptTemplate.from_file(PROMPT)
    if way == "declared":
        template = PromptTemplate.from_file(PROMPT, agent_slot="0")
    served = near = crossed = 0
    embedded: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cache = SemanticCache(Path(tmp) / "cache", embedder=embedder).with_config(
            threshold=threshold
        )
        templates = None if way == "explicit" else TemplateSet([template])
        client = CachedLLM(fake, cache=cache, templates=templates)
        try:
            for call in calls:
                current[:] = [call]
                filled = template.fill(
                    call["agent"], call["persona"], call["agent"], call["memory"]
                )
                extra: dict[str, Any] = {}
                if way == "explicit":
                    extra["cache"] = CacheOptions(
                        category=template.name, agent=call["agent"], keywords=[call["memory"]]
                    )
                reply, info = client.chat.completions.create_with_info(
                    model="m", messages=filled.messages, **extra
                )
                # The slots each table's calls embed now (the stats' column reads the
                # counters, where a slot that once held a date alone stays marked exact).
                embedded[info.partition_key or ""] = ",".join(info.embedded_slots or ())
                if info.outcome != "hit":
                    continue
                score, agent = (reply.choices[0].message.content or "").split("|", 1)
                served += 1
                near += abs(int(score) - call["score"]) <= 1
                crossed += agent != call["agent"]
            stats = cache.stats()
        finally:
            cache.close()
    tables = [t for t in stats.tables if t.category == template.name and not t.pool]
    return {
        "calls": len(calls),
        "served": served,
        "near": near,
        "crossed": crossed,
        "tables": len(tables),
        "embedded": sorted(set(embedded.values())),
        "refused": sum(sum(t.exact_refused.values()) for t in tables),
    }


def report(label: str, calls: list[Call], embedder: Embedder, threshold: float) -> None:
    agree, pairs = self_agreement(calls)
    agents = len({c["agent"] for c in calls})
    print(
        f"## {label}: {len(calls)} calls, {agents} agents; the model itself, asked again "
        f"({pairs} repeats): {100 * agree:.1f}% within 1"
    )
    head = (
        f"{'way':<10} {'served':>7} {'within 1':>9} {'excess':>8} {'crossed':>8} "
        f"{'refused':>8} {'tables':>6}  embedded"
    )
    print(head)
    print("-" * len(head))
    for way in ("explicit", "as is", "declared"):
        r = replay(calls, way, embedder, threshold)
        share = r["served"] / r["calls"]
        within = r["near"] / r["served"] if r["served"] else float("nan")
        excess = 100 * ((1 - within) - (1 - agree))
        print(
            f"{way:<10} {100 * share:6.1f}% {100 * within:8.1f}% {excess:+7.1f}p "
            f"{r['crossed']:>8} {r['refused']:>8} {r['tables']:>6}  {' / '.join(r['embedded'])}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs", type=int, nargs="*", default=[1], help="standard runs (1-3; none: --runs)"
    )
    parser.add_argument("--isabella", action="store_true", help="also Park's recorded agent")
    parser.add_argument(
        "--threshold", type=float, default=None, help="raw cosine (default: the cache's)"
    )
    args = parser.parse_args()
    embedder = MiniLMEmbedder()
    threshold = args.threshold if args.threshold is not None else CacheConfig().threshold
    print(header_line(machine_info()))
    print(f"# threshold {threshold} (raw cosine), prompt file {PROMPT.name} as published")
    for run in args.runs:
        report(f"standard run {run}", town_stream(run), embedder, threshold)
    if args.isabella:
        if not (ISABELLA / "nodes.json").is_file():
            print("# park_demo_isabella: absent (../shared/benchmarks/ beside the repository)")
        else:
            report("park_demo_isabella", isabella_stream(), embedder, threshold)


if __name__ == "__main__":
    main()
