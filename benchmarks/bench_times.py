"""Times inside a slot's value: matched exactly, or left to the embedding.

    python benchmarks/bench_times.py [--threshold 0.9]

Two Park-style prompt files of ``examples/park_prompts/``, each a stream of one agent's calls
through ``CachedLLM(templates=...)`` with the real default embedder (the local MiniLM) and a
fake upstream that answers from a known truth, run with ``CacheConfig(exact_times=True)`` and
``False``:

- ``hourly_schedule.txt`` (schedule-like: the hour decides): the slot holding the schedule so
  far ends with the hour to fill (``[Monday February 13 -- 10:00 AM] Activity: Isabella is``),
  for every hour of two days of one routine. A served answer is wrong when it names another
  activity than the routine's at that hour.
- ``decide_to_talk.txt`` (the clock merely carried): the context slot begins with the clock
  (``It is February 13, 2023, 08:15:10 AM.``), then what the two agents are doing; twelve
  situations, each asked again a few minutes later, when the answer is the same. A miss of
  the second ask is a hit lost.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench_models import header_line, machine_info  # beside this file

from llmcache import CacheConfig, CachedLLM, PromptTemplate, SemanticCache
from llmcache.embedders import Embedder, MiniLMEmbedder
from llmcache.templates import TemplateSet
from llmcache.testing import FakeOpenAI

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ROOT / "examples" / "park_prompts"
PERSONA = (
    "Name: Isabella Rodriguez\nAge: 34\nInnate traits: friendly, outgoing, hospitable\n"
    "Learned traits: Isabella Rodriguez is a cafe owner of Hobbs Cafe who loves to make people "
    "feel welcome."
)
ROUTINE = (
    ["sleeping"] * 6
    + ["waking up and completing her morning routine", "having breakfast"]
    + ["opening Hobbs Cafe and preparing the coffee"] * 1
    + ["serving customers at Hobbs Cafe"] * 3
    + ["having lunch"]
    + ["serving customers at Hobbs Cafe"] * 5
    + ["planning the Valentine's Day party"] * 2
    + ["closing Hobbs Cafe"]
    + ["taking a walk in the park", "reading a book"]
    + ["sleeping"]
)
DAYS = ["Monday February 13", "Tuesday February 14"]
SITUATIONS = [
    ("Klaus Mueller", "Isabella is wiping the counter; Klaus is ordering a coffee", "yes"),
    ("Maria Lopez", "Isabella is baking bread; Maria is studying at a table", "no"),
    ("Tom Moreno", "Isabella is closing the cafe; Tom is walking by outside", "yes"),
    ("Sam Moore", "Isabella is reading a book; Sam is sleeping at home", "no"),
    ("Carmen Ortiz", "Isabella is decorating the cafe; Carmen is buying groceries", "no"),
    ("Giorgio Rossi", "Isabella is serving coffee; Giorgio is waiting at the counter", "yes"),
    ("Jennifer Moore", "Isabella is on her break; Jennifer is painting in the park", "no"),
    ("Adam Smith", "Isabella is greeting customers; Adam just walked into the cafe", "yes"),
    ("Yuriko Yamamoto", "Isabella is sweeping the floor; Yuriko is at her desk at home", "no"),
    ("Rajiv Patel", "Isabella is making tea; Rajiv asks her for the menu", "yes"),
    ("Ayesha Khan", "Isabella is counting the till; Ayesha is writing in the library", "no"),
    ("Eddy Lin", "Isabella is planning the party; Eddy is playing piano in the cafe", "yes"),
]


def hour(h: int) -> str:
    return f"{(h - 1) % 12 + 1:02d}:00 {'AM' if h < 12 else 'PM'}"


def schedule(embedder: Embedder, threshold: float, exact_times: bool) -> tuple[int, int, int]:
    """Calls, served, served wrong: two days of hourly schedule prompts."""
    template = PromptTemplate.from_file(PROMPTS / "hourly_schedule.txt")
    truth: list[str] = []
    fake = FakeOpenAI(lambda request: truth[0])
    served = wrong = calls = 0
    with tempfile.TemporaryDirectory() as tmp:
        cache = SemanticCache(Path(tmp) / "c", embedder=embedder).with_config(
            threshold=threshold, exact_times=exact_times
        )
        client = CachedLLM(fake, cache=cache, templates=TemplateSet([template]))
        try:
            for day in DAYS:
                lines: list[str] = []
                for h, activity in enumerate(ROUTINE):
                    truth[:] = [activity]
                    so_far = "\n".join([*lines, f"[{day} -- {hour(h)}] Activity: Isabella is"])
                    filled = template.fill(PERSONA, "Isabella", so_far)
                    reply, info = client.chat.completions.create_with_info(
                        model="m", messages=filled.messages, cache=filled.cache_options(agent="I")
                    )
                    calls += 1
                    if info.outcome == "hit":
                        served += 1
                        wrong += reply.choices[0].message.content != activity
                    lines.append(f"[{day} -- {hour(h)}] Activity: Isabella is {activity}")
        finally:
            cache.close()
    return calls, served, wrong


def clock(embedder: Embedder, threshold: float, exact_times: bool) -> tuple[int, int, int]:
    """Repeats, repeats served, served wrong: situations asked again minutes later."""
    template = PromptTemplate.from_file(PROMPTS / "decide_to_talk.txt")
    truth: list[str] = []
    fake = FakeOpenAI(lambda request: truth[0])
    served = wrong = 0
    with tempfile.TemporaryDirectory() as tmp:
        cache = SemanticCache(Path(tmp) / "c", embedder=embedder).with_config(
            threshold=threshold, exact_times=exact_times
        )
        client = CachedLLM(fake, cache=cache, templates=TemplateSet([template]))
        try:
            for minute in (15, 25):
                for i, (other, doing, answer) in enumerate(SITUATIONS):
                    truth[:] = [answer]
                    context = f"It is February 13, 2023, {8 + i:02d}:{minute}:10 AM. {doing}."
                    filled = template.fill("Isabella Rodriguez", context, other)
                    reply, info = client.chat.completions.create_with_info(
                        model="m", messages=filled.messages, cache=filled.cache_options(agent="I")
                    )
                    if minute == 25 and info.outcome == "hit":
                        served += 1
                        wrong += reply.choices[0].message.content != answer
        finally:
            cache.close()
    return len(SITUATIONS), served, wrong


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threshold", type=float, default=CacheConfig().threshold)
    args = parser.parse_args()
    embedder = MiniLMEmbedder()
    print(header_line(machine_info()))
    print(f"# threshold {args.threshold} (raw cosine)")
    print(
        f"{'times inside a value':<22} {'schedule: served':>17} {'wrong':>6}   "
        f"{'clock: repeats served':>22} {'wrong':>6}"
    )
    for exact in (False, True):
        calls, served, wrong = schedule(embedder, args.threshold, exact)
        repeats, rserved, rwrong = clock(embedder, args.threshold, exact)
        label = "matched exactly" if exact else "embedded"
        print(
            f"{label:<22} {served:>9}/{calls:<7} {wrong:>6}   "
            f"{rserved:>14}/{repeats:<7} {rwrong:>6}"
        )


if __name__ == "__main__":
    main()
