"""PromptTemplate: named and Park-style positional slots, and the CacheOptions they yield."""

from __future__ import annotations

import doctest
import runpy
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

import llmcache._template
from llmcache import CachedLLM, CacheOptions, PromptTemplate, SemanticCache
from llmcache.errors import ConfigurationError
from llmcache.testing import FakeOpenAI, HashEmbedder

PARK_FILE = """example_v1.txt

Variables:
!<INPUT 0>! -- Persona name
!<INPUT 1>! -- Event

<commentblockmarker>###</commentblockmarker>
!<INPUT 0>! sees: !<INPUT 1>!
Reply as JSON: {"score": <1-10>}. How poignant is it for !<INPUT 0>!?
"""


def generate_prompt(curr_input: list[str], text: str) -> str:
    """Park et al.'s generate_prompt, as their code base renders a prompt file."""
    for count, value in enumerate(curr_input):
        text = text.replace(f"!<INPUT {count}>!", value)
    if "<commentblockmarker>###</commentblockmarker>" in text:
        text = text.split("<commentblockmarker>###</commentblockmarker>")[1]
    return text.strip()


def test_named_slots_fill_messages_and_options() -> None:
    t = PromptTemplate(
        name="reaction",
        system="You are {agent_name}.",
        text='{agent_name} sees {event} at {place}. Answer {"react": true|false}.',
    )
    assert t.slots == ("agent_name", "event", "place")
    filled = t.fill(place="the cafe", event="a fire", agent_name="Isabella")
    assert filled.messages == [
        {"role": "system", "content": "You are Isabella."},
        {
            "role": "user",
            "content": 'Isabella sees a fire at the cafe. Answer {"react": true|false}.',
        },
    ]
    options = filled.cache_options(agent="Isabella", threshold=0.8)
    slots = {"agent_name": "Isabella", "event": "a fire", "place": "the cafe"}
    assert options == CacheOptions(
        category="reaction", agent="Isabella", keywords=["Isabella", "a fire", "the cafe"],
        threshold=0.8, template=t.digest, slots=slots,
    )  # fmt: skip
    assert filled.request(agent="Isabella") == {
        "messages": filled.messages,
        "cache": CacheOptions(
            category="reaction",
            agent="Isabella",
            keywords=["Isabella", "a fire", "the cafe"],
            template=t.digest,
            slots=slots,
        ),
    }


def test_park_style_files_render_as_their_generate_prompt_does() -> None:
    t = PromptTemplate(name="poignancy", text=PARK_FILE)
    inputs = ["Isabella", "the espresso machine is idle"]
    filled = t.fill(*inputs)
    assert filled.text == generate_prompt(inputs, PARK_FILE)
    assert "Variables" not in filled.text and filled.text.startswith("Isabella sees")
    assert t.slots == ("0", "1") and filled.keywords == tuple(inputs)
    # Inputs the prompt does not use are ignored, as generate_prompt ignores them.
    assert t.fill(*inputs, "unused").text == filled.text
    only_event = PromptTemplate(name="poignancy", text=PARK_FILE, keyword_slots=("1",))
    assert only_event.fill(*inputs).keywords == ("the espresso machine is idle",)


def test_mistakes_are_refused_with_the_slots_named() -> None:
    t = PromptTemplate(name="t", text="{a} and {b}")
    with pytest.raises(ConfigurationError, match="no value for b"):
        t.fill(a="x")
    with pytest.raises(ConfigurationError, match="no slot c"):
        t.fill(a="x", b="y", c="z")
    with pytest.raises(ConfigurationError, match="2 slots"):
        t.fill("x")
    with pytest.raises(ConfigurationError, match="not both"):
        PromptTemplate(name="p", text=PARK_FILE).fill("x", event="y")
    with pytest.raises(ValidationError, match="mixes"):
        PromptTemplate(name="m", text="{a} !<INPUT 0>!")
    with pytest.raises(ValidationError, match="no slot 'c'"):
        PromptTemplate(name="k", text="{a} {b}", keyword_slots=("c",))
    assert t.fill("x", "y").text == "x and y"  # positional values for named slots, in order


class Score(BaseModel):
    score: int


def test_one_line_per_prompt_with_create_and_parse(tmp_path: Path) -> None:
    fake = FakeOpenAI(lambda r: '{"score": 4}')
    client = CachedLLM(fake, cache=SemanticCache(tmp_path / "c", embedder=HashEmbedder(dim=64)))
    t = PromptTemplate(name="poignancy", text=PARK_FILE, keyword_slots=("1",))
    inputs = ["Isabella", "the espresso machine is idle"]
    _, first = client.chat.completions.create_with_info(
        model="m", **t.fill(*inputs).request(agent="Isabella")
    )
    parsed, second = client.chat.completions.parse_with_info(
        model="m", response_format=Score, **t.fill(*inputs).request(agent="Isabella")
    )
    assert first.outcome == "miss" and first.category == "poignancy"
    assert first.embed_text == "the espresso machine is idle"
    assert fake.calls[0]["messages"] == [
        {"role": "user", "content": generate_prompt(inputs, PARK_FILE)}
    ]
    assert second.outcome == "miss"  # parse's schema is another table
    assert parsed.choices[0].message.parsed == Score(score=4)
    _, third = client.chat.completions.create_with_info(
        model="m", **t.fill("Isabella", "the espresso machine is idle").request(agent="Isabella")
    )
    assert third.outcome == "hit" and len(fake.calls) == 2


def test_docstring_and_example_run(capsys: pytest.CaptureFixture[str]) -> None:
    result = doctest.testmod(llmcache._template)
    assert result.attempted >= 3 and result.failed == 0
    root = Path(__file__).resolve().parent.parent
    runpy.run_path(str(root / "examples" / "prompt_template.py"), run_name="__main__")
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[:3]] == ["miss", "hit", "miss"]
