"""Keywords that carry the query: which slots a templated call embeds, old default against new.

    python benchmarks/bench_slot_choice.py [--prompts examples/park_prompts] [--threshold 0.9]

For each Park-style template of the folder (``!<INPUT n>!`` files and their ``queries.json``),
with the REAL default embedder (the local MiniLM) and a fake upstream: a fresh cache stores the
answer to the template's *base* fill, then is asked once the *same* fill (the deciding value
reworded, or the same) and, in another fresh cache, once the *other* fill (a deciding value that
needs another answer). Under

- ``all slots``: the old default, every slot's value as a keyword, in slot order (the agent's
  name several times, its persona summary, its plan, and somewhere the deciding slot);
- ``chosen``: the new default, ``PromptTemplate.fill(...).request()`` with no ``keyword_slots``:
  the cache embeds the slots that vary within the table, shortest first, and never serves across
  an exact slot (a time, a date, a range).

A row says whether ``same`` was served (it should be) and whether ``other`` was (it should not),
with the cosines; the totals count the templates that serve ``other`` (the issue's goal: at most
1 in 10) and those whose ``same`` misses.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from bench_models import header_line, machine_info  # beside this file

from llmcache import CachedLLM, CacheOptions, PromptTemplate, SemanticCache
from llmcache.embedders import Embedder, MiniLMEmbedder
from llmcache.templates import TemplateSet
from llmcache.testing import FakeOpenAI

ROOT = Path(__file__).resolve().parents[1]


def load(folder: Path) -> tuple[dict[str, PromptTemplate], dict[str, Any]]:
    templates = {
        path.stem: PromptTemplate(name=path.stem, text=path.read_text(encoding="utf-8"))
        for path in sorted(folder.glob("*.txt"))
    }
    queries = json.loads((folder / "queries.json").read_text(encoding="utf-8"))
    return templates, queries


def expand(values: list[str], persona: dict[str, str]) -> list[str]:
    """A fill's inputs with ``{name}``, ``{iss}``, … replaced by the persona's own values."""
    out = []
    for value in values:
        for key, text in persona.items():
            value = value.replace("{" + key + "}", text)
        out.append(value)
    return out


def request(template: PromptTemplate, inputs: list[str], agent: str, old: bool) -> dict[str, Any]:
    filled = template.fill(*inputs)
    if not old:
        return filled.request(agent=agent)
    # The old default: every slot's value, in slot order, as the keywords.
    keywords = tuple(filled.slots[name] for name in template.slots)
    return {
        "messages": filled.messages,
        "cache": CacheOptions(category=template.name, agent=agent, keywords=keywords),
    }


def probe(
    embedder: Embedder,
    threshold: float,
    template: PromptTemplate,
    base: list[str],
    query: list[str],
    agent: str,
    old: bool,
) -> tuple[bool, float | None]:
    """Store the base fill's answer in a fresh cache, then ask ``query``: served, and cosine."""
    with tempfile.TemporaryDirectory() as tmp:
        fake = FakeOpenAI(lambda r: "the base answer")
        cache = SemanticCache(Path(tmp) / "cache", embedder=embedder).with_config(
            threshold=threshold
        )
        client = CachedLLM(fake, cache=cache)
        try:
            client.chat.completions.create_with_info(
                model="m", **request(template, base, agent, old)
            )
            _, info = client.chat.completions.create_with_info(
                model="m", **request(template, query, agent, old)
            )
        finally:
            cache.close()
    cosine = info.similarity.cosine if info.similarity is not None else None
    return info.outcome == "hit", cosine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=Path, default=ROOT / "examples" / "park_prompts")
    parser.add_argument("--threshold", type=float, default=0.9, help="raw cosine (the default)")
    args = parser.parse_args()
    templates, queries = load(args.prompts)
    embedder = MiniLMEmbedder()
    print(header_line(machine_info()))
    print(f"# {len(queries['queries'])} templates, threshold {args.threshold} (raw cosine)")

    def cos(value: float | None) -> str:
        return "  -  " if value is None else f"{value:.3f}"

    header = (
        f"{'template':<24} {'all slots: same':>17} {'other':>13}   "
        f"{'chosen: same':>14} {'other':>13}  embedded"
    )
    print(header)
    print("-" * len(header))
    totals = {True: [0, 0], False: [0, 0]}  # old → [same missed, other served]
    for case in queries["queries"]:
        template = templates[case["template"]]
        persona = queries["personas"][case["persona"]]
        base, same, other = (expand(case[k], persona) for k in ("base", "same", "other"))
        cells = []
        for old in (True, False):
            same_hit, same_cos = probe(
                embedder, args.threshold, template, base, same, persona["name"], old
            )
            other_hit, other_cos = probe(
                embedder, args.threshold, template, base, other, persona["name"], old
            )
            totals[old][0] += not same_hit
            totals[old][1] += other_hit
            cells.append(
                f"{'hit' if same_hit else 'MISS':>5} {cos(same_cos):>6}      "
                f"{'SERVED' if other_hit else 'miss':>6} {cos(other_cos):>6}"
            )
        chosen = _embedded(embedder, args.threshold, template, base, other, persona["name"])
        print(f"{template.name[:24]:<24} {cells[0]}   {cells[1]}  {chosen}")
    n = len(queries["queries"])
    # The adoption path: would each of these prompts, sent with no cache= at all, be recognised
    # as the template and slot values it was filled from?
    recognise = TemplateSet(templates.values())
    exact = 0
    for case in queries["queries"]:
        template = templates[case["template"]]
        persona = queries["personas"][case["persona"]]
        for key in ("base", "same", "other"):
            filled = template.fill(*expand(case[key], persona))
            found = recognise.recognise(filled.text, filled.system)
            exact += found.template == template and found.slots == filled.slots
    print(f"recognised exactly from the prompt text: {exact}/{3 * n} prompts")
    for old, label in ((True, "all slots (old default)"), (False, "chosen (new default)")):
        missed, served = totals[old]
        print(f"{label:<24} other served in {served}/{n} templates; same missed in {missed}/{n}")


def _embedded(
    embedder: Embedder,
    threshold: float,
    template: PromptTemplate,
    base: list[str],
    other: list[str],
    agent: str,
) -> str:
    """The slots the new default embeds once the table has seen base and other."""
    with tempfile.TemporaryDirectory() as tmp:
        cache = SemanticCache(Path(tmp) / "cache", embedder=embedder)
        client = CachedLLM(FakeOpenAI(lambda r: "x"), cache=cache)
        try:
            for inputs in (base, other):
                _, info = client.chat.completions.create_with_info(
                    model="m", **request(template, inputs, agent, old=False)
                )
        finally:
            cache.close()
    return ",".join(info.embedded_slots or ())


if __name__ == "__main__":
    main()
