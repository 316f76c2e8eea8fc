"""Adopting the cache in a code base that keeps its prompts in a folder of files, changing one
line: the client.

The code below is the code base's own: it reads a prompt file, fills its ``!<INPUT n>!`` slots
(as Park et al.'s ``generate_prompt`` does) and sends the text. Only the client is new:
``CachedLLM(OpenAI(), templates="prompts/")`` recognises which file each prompt was filled from
and files the call under that template and the agent its ``agent slot:`` note names. A prompt
that matches no file goes to the LLM uncached and is counted (``unrecognised``).

Runs offline with a stand-in client; swap ``FakeOpenAI(...)`` for ``OpenAI()`` to run it
against OpenAI.
"""

import tempfile
from pathlib import Path

from llmcache import CachedLLM, SemanticCache
from llmcache.testing import FakeOpenAI, HashEmbedder

PROMPTS = Path(__file__).resolve().parent / "prompt_folder"


def generate_prompt(inputs: list[str], prompt_file: Path) -> str:
    """The code base's own helper, unchanged: fill the file's slots, drop its notes."""
    prompt = prompt_file.read_text(encoding="utf-8")
    for i, value in enumerate(inputs):
        prompt = prompt.replace(f"!<INPUT {i}>!", value)
    if "<commentblockmarker>###</commentblockmarker>" in prompt:
        prompt = prompt.split("<commentblockmarker>###</commentblockmarker>")[1]
    return prompt.strip()


def ask(client: CachedLLM, prompt: str) -> str:
    """The code base's call site, unchanged."""
    reply = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": prompt}]
    )
    return reply.choices[0].message.content or ""


with tempfile.TemporaryDirectory() as directory:  # a real project keeps ./.llmcache
    client = CachedLLM(
        FakeOpenAI(lambda request: "3"),  # OpenAI() in a real project
        cache=SemanticCache(directory, embedder=HashEmbedder()),
        templates=PROMPTS,  # the one changed line
    )
    isabella = "Isabella Rodriguez is a cafe owner who loves to make people feel welcome."
    calls = [
        ("poignancy_event.txt", ["Isabella Rodriguez", isabella, "the espresso machine is idle"]),
        ("poignancy_event.txt", ["Isabella Rodriguez", isabella, "the espresso machine is idle"]),
        ("wake_up_hour.txt", [isabella, "Isabella goes to bed around 11pm.", "Isabella"]),
        ("wake_up_hour.txt", [isabella, "Isabella goes to bed around 11pm.", "Isabella"]),
    ]
    for name, inputs in calls:
        prompt = generate_prompt(inputs, PROMPTS / name)
        info = client.chat.completions.cache_bypass_reason(
            model="gpt-4o-mini", messages=[{"role": "user", "content": prompt}]
        )
        answer = ask(client, prompt)
        print(f"{name:20} {answer!r} {'recognised' if info is None else info}")
    ask(client, "A prompt of no template: passed through, counted.")
    print(client.cache.stats().render())
    client.close()
