"""The README's example: the same calls as the openai client, answered from a semantic cache.

Runs offline against the local llama.cpp server (scripts/setup.sh installs it); with an
OPENAI_API_KEY, swap ``server.client()`` for ``OpenAI()`` and the model for "gpt-4o-mini".
"""

from pydantic import BaseModel, Field

from llmcache import CachedLLM, CacheOptions
from llmcache.llm import LocalServer


class Importance(BaseModel):
    score: int = Field(ge=1, le=10)  # the schema the decoder keeps to, and the check


with LocalServer() as server:  # SmolLM2-135M on 127.0.0.1, stopped on exit
    client = CachedLLM(server.client(), cache=".llmcache/quickstart")
    memories = ["Tree in Victoria Park is Idle", "The tree in Victoria Park is idle", "Alice bakes"]
    for memory in memories:
        msgs = [{"role": "user", "content": f"Rate 1-10 how important this memory is: {memory}"}]
        r, info = client.chat.completions.parse_with_info(
            model=server.model, messages=msgs, response_format=Importance, max_tokens=40,
            cache=CacheOptions(category="importance", agent="Liam Oliver", keywords=[memory]),
        )  # fmt: skip
        sim = f"{info.similarity.cosine:.3f}" if info.similarity else "-"
        print(f"{info.outcome:5} cos={sim} {r.choices[0].message.parsed!r}")
    print(client.cache.stats().render())
    client.close()
