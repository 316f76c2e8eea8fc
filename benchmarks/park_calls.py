"""The shared agent's memories as replayable calls: Park et al.'s importance ratings.

``../shared/benchmarks/park_demo_isabella/`` holds one agent's associative memory
(``nodes.json``) and persona (``scratch.json``) after one simulated day of the demo run Park
et al. published (see that folder's README). Each memory's ``poignancy`` is the rating
gpt-3.5-turbo gave it through Park's poignancy prompt; this module rebuilds that prompt and
makes each rated memory one :class:`~llmcache.replay.ReplayCall` whose true answer is the
recorded rating:

- events and thoughts through ``poignancy_event.txt``, chats through ``poignancy_chat.txt``
  (Park's files, in ``examples/park_prompts/``), the memory's ``embedding_key`` as the event;
- the persona's "identity stable set" as Park's ``Scratch.get_str_iss`` writes it, from
  ``scratch.json`` (its fields are those at the end of the day: the only ones kept), the
  current date being the memory's own;
- left out, as the README says: events containing "is idle" (Park rates them 1 without the
  model) and the daily-plan thoughts "This is ...'s plan for ..." (always 5);
- the keywords are the memory itself (the one slot that varies), the time its ``created``.

    python benchmarks/park_calls.py --out park_isabella.jsonl   # the plain JSONL importer's format
    python benchmarks/park_calls.py --bed --out bed.jsonl         # the gpt-4o-mini bed
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from llmcache import EmbedMode
from llmcache.embedders import StoredEmbedder, default_embedder
from llmcache.replay import ReplayCall, embedding_texts

__all__ = [
    "BED_CHECK_AGENTS",
    "BED_MODEL",
    "BED_TUNE_AGENTS",
    "PARK",
    "PARK_4OMINI",
    "PROMPTS",
    "bed_calls",
    "bed_embedder",
    "park_calls",
]

ROOT = Path(__file__).resolve().parents[1]
PARK = ROOT / ".." / "shared" / "benchmarks" / "park_demo_isabella"
#: The gpt-4o-mini development bed: eight agents of one run, one folder each (its README).
PARK_4OMINI = ROOT / ".." / "shared" / "benchmarks" / "park_4omini_dev"
PROMPTS = ROOT / "examples" / "park_prompts"
MODEL = "gpt-3.5-turbo"
BED_MODEL = "gpt-4o-mini"
#: The bed's agents settings are learned on, and those they are reported on (the issues' split).
BED_TUNE_AGENTS = ("Abigail Chen", "Arthur Burton", "Ayesha Khan", "Carlos Gomez")
BED_CHECK_AGENTS = ("Giorgio Rossi", "Latoya Williams", "Mei Lin", "Rajiv Patel")


def _template(path: Path) -> str:
    """A Park prompt file's text after its comment block."""
    text = path.read_text(encoding="utf-8")
    return text.split("<commentblockmarker>###</commentblockmarker>", 1)[1].lstrip("\n")


def _fill(template: str, inputs: list[str]) -> str:
    # Park's generate_prompt: each !<INPUT n>! replaced, then the text stripped.
    for i, value in enumerate(inputs):
        template = template.replace(f"!<INPUT {i}>!", value)
    return template.strip()


def identity(scratch: dict[str, Any], when: datetime) -> str:
    """Park's ``Scratch.get_str_iss()`` at ``when``."""
    return (
        f"Name: {scratch['name']}\n"
        f"Age: {scratch['age']}\n"
        f"Innate traits: {scratch['innate']}\n"
        f"Learned traits: {scratch['learned']}\n"
        f"Currently: {scratch['currently']}\n"
        f"Lifestyle: {scratch['lifestyle']}\n"
        f"Daily plan requirement: {scratch['daily_plan_req']}\n"
        f"Current Date: {when.strftime('%A %B %d')}\n"
    )


_PLAN = re.compile(r"^This is .+'s plan for ")


def park_calls(
    folder: Path = PARK, prompts: Path = PROMPTS, model: str = MODEL
) -> list[ReplayCall]:
    """The rated memories of ``folder`` as calls, in the order they were made; ``model`` is
    the model that made the run (it prices the calls)."""
    nodes = json.loads((folder / "nodes.json").read_text(encoding="utf-8"))
    scratch = json.loads((folder / "scratch.json").read_text(encoding="utf-8"))
    event_prompt = _template(prompts / "poignancy_event.txt")
    chat_prompt = _template(prompts / "poignancy_chat.txt")
    name = scratch["name"]
    out = []
    ordered = sorted(nodes.values(), key=lambda n: (n["created"], n["node_count"]))
    for node in ordered:
        text = node["embedding_key"]
        if node["type"] == "event" and "is idle" in node["description"]:
            continue
        if node["type"] == "thought" and _PLAN.match(node["description"]):
            continue
        when = datetime.strptime(node["created"], "%Y-%m-%d %H:%M:%S")
        template = chat_prompt if node["type"] == "chat" else event_prompt
        prompt = _fill(template, [name, identity(scratch, when), name, text])
        out.append(
            ReplayCall(
                category="poignancy_chat" if node["type"] == "chat" else "poignancy_event",
                agent=name,
                messages=[{"role": "user", "content": prompt}],
                keywords=[text],
                answer=str(node["poignancy"]),
                time=when.timestamp(),
                params={"model": model},
            )
        )
    return out


def bed_calls(
    agents: Sequence[str] = BED_TUNE_AGENTS + BED_CHECK_AGENTS,
    folder: Path = PARK_4OMINI,
    prompts: Path = PROMPTS,
    model: str = BED_MODEL,
) -> list[ReplayCall]:
    """The rated memories of several agents of one run (one sub-folder each, named by the
    agent), interleaved in the order they were made, as the run made them: by time, then in
    ``agents``' order."""
    tagged = []
    for rank, agent in enumerate(agents):
        for position, call in enumerate(park_calls(folder / agent, prompts, model)):
            tagged.append((call.time or 0.0, rank, position, call))
    tagged.sort(key=lambda item: item[:3])
    return [call for *_, call in tagged]


def bed_embedder(program: str, store: Path | None) -> StoredEmbedder | None:
    """The default embedder, its vectors kept in ``store`` (``None``: in memory), with every
    keyword text of the gpt-4o-mini bed embedded in batches; ``None``, said on stderr in
    ``program``'s name, when the shared bed is absent."""
    if not PARK_4OMINI.exists():
        sys.stderr.write(f"{program}: {PARK_4OMINI} is absent: the shared bed is needed\n")
        return None
    embedder = StoredEmbedder(default_embedder(), store)
    embedder.warm(embedding_texts(bed_calls(), [EmbedMode.KEYWORD]))
    return embedder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", type=Path, default=PARK)
    parser.add_argument("--prompts", type=Path, default=PROMPTS)
    parser.add_argument(
        "--bed",
        action="store_true",
        help="the gpt-4o-mini bed instead (every agent of --folder, default "
        "park_4omini_dev): the tune agents' calls first, then the check agents', so that "
        "`tune --split agents` checks on the check agents",
    )
    parser.add_argument("--out", type=Path, required=True, help="JSONL of calls to write")
    args = parser.parse_args()
    if args.bed:
        folder = PARK_4OMINI if args.folder == PARK else args.folder
        if not folder.exists():
            sys.stderr.write(f"no {folder}: the shared benchmark data is absent\n")
            return 2
        calls = bed_calls(BED_TUNE_AGENTS, folder, args.prompts)
        calls += bed_calls(BED_CHECK_AGENTS, folder, args.prompts)
    elif not (args.folder / "nodes.json").exists():
        sys.stderr.write(f"no {args.folder / 'nodes.json'}: the shared benchmark data is absent\n")
        return 2
    else:
        calls = park_calls(args.folder, args.prompts)
    with args.out.open("w", encoding="utf-8") as out:
        for call in calls:
            line = call.model_dump(exclude_defaults=True, exclude={"messages", "params"})
            line = {"prompt": call.messages[0]["content"], "model": call.model, **line}
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
    print(f"{len(calls)} calls written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
