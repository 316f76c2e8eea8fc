"""Adopting the cache in a code base that keeps its prompts as Park et al.'s prompt files do.

Such a file holds notes on its variables above a ``<commentblockmarker>###</commentblockmarker>``
line and the prompt below it, with positional slots ``!<INPUT n>!``; the code fills it from a list
of inputs and sends it. With a ``PromptTemplate`` the send becomes one line that also tells the
cache which template (the category), which agent, and which slot values (the keywords) it is.

Runs offline with a stand-in client; swap ``FakeOpenAI(...)`` for ``OpenAI()`` and the model for
"gpt-4o-mini" to run it against OpenAI.
"""

import tempfile

from llmcache import CachedLLM, PromptTemplate, SemanticCache
from llmcache.testing import FakeOpenAI, HashEmbedder

# poignancy_event_v1.txt, in the style of the generative-agents prompt files.
POIGNANCY_FILE = """poignancy_event_v1.txt

Variables:
!<INPUT 0>! -- Persona name
!<INPUT 1>! -- Persona's identity summary
!<INPUT 2>! -- Event description

<commentblockmarker>###</commentblockmarker>
Here is a brief description of !<INPUT 0>!.
!<INPUT 1>!

On the scale of 1 to 10, where 1 is purely mundane (e.g., brushing teeth, making bed) and 10 is
extremely poignant (e.g., a break up, college acceptance), rate the likely poignancy of the
following event for !<INPUT 0>!.

Event: !<INPUT 2>!
Rate (return a number between 1 to 10):
"""

# The event is what the answer depends on; the persona is the agent, not a keyword.
POIGNANCY = PromptTemplate(name="poignancy_event", text=POIGNANCY_FILE, keyword_slots=("2",))

with tempfile.TemporaryDirectory() as directory:  # a real project keeps ./.llmcache
    client = CachedLLM(
        FakeOpenAI(lambda request: "3"),  # OpenAI() in a real project
        cache=SemanticCache(directory, embedder=HashEmbedder()),
    )
    isabella = "Isabella Rodriguez is a cafe owner who loves to make people feel welcome."
    for event in [
        "the espresso machine is idle",
        "the espresso machine is idle",
        "a fire broke out",
    ]:
        inputs = ["Isabella Rodriguez", isabella, event]
        # Before: create(model=..., messages=[{"role": "user", "content": generate_prompt(inputs)}])
        r, info = client.chat.completions.create_with_info(
            model="gpt-4o-mini", **POIGNANCY.fill(*inputs).request(agent="Isabella Rodriguez")
        )
        print(f"{info.outcome:5} {event!r}: {r.choices[0].message.content}")
    print(client.cache.stats().render())
    client.close()
