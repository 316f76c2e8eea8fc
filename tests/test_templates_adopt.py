"""Adopting a code base with no changed call site: prompts recognised from their text
(llmcache.templates), a template's tables keyed by its text, CachedLLM(templates=...)."""

from __future__ import annotations

import asyncio
import runpy
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmcache import AsyncCachedLLM, CachedLLM, CacheOptions, PromptTemplate, SemanticCache
from llmcache.errors import ConfigurationError
from llmcache.templates import Recognition, TemplateSet, load_templates
from llmcache.testing import AsyncFakeOpenAI, FakeOpenAI, HashEmbedder

PARK = """Variables:
!<INPUT 0>! -- persona name
!<INPUT 1>! -- event
agent slot: !<INPUT 0>!
<commentblockmarker>###</commentblockmarker>
Here is a brief description of !<INPUT 0>!.
On the scale of 1 to 10, rate the poignancy of this event for !<INPUT 0>!.
Event: !<INPUT 1>!
Rate (return a number between 1 to 10):"""


def _check(template: PromptTemplate, *inputs: Any, **values: Any) -> Recognition:
    """Fill ``template``, recognise the result among it and a few others, and check that the
    recognition gives back exactly the values filled in."""
    filled = template.fill(*inputs, **values)
    others = [
        PromptTemplate(name="other", text="Something else: {x}. End."),
        PromptTemplate(name="park", text=PARK),
    ]
    found = TemplateSet([template, *(o for o in others if o.digest != template.digest)])
    got = found.recognise(filled.text, filled.system)
    assert got.template == template, got.reason
    assert got.filled == filled
    return got


# -- recognition is exact ---------------------------------------------------------------------


def test_a_park_file_gives_back_its_inputs_and_names_its_agent() -> None:
    t = PromptTemplate(name="poignancy", text=PARK)
    assert t.agent_slot == "0"
    got = _check(t, "Isabella Rodriguez", "the espresso machine is idle")
    assert got.slots == {"0": "Isabella Rodriguez", "1": "the espresso machine is idle"}
    assert got.agent("someone") == "Isabella Rodriguez"


def test_a_repeated_slot_must_hold_the_same_value_everywhere() -> None:
    t = PromptTemplate(name="t", text="{name} sees {event}. What does {name} do?")
    assert _check(t, name="Ann", event="a fire").slots == {"name": "Ann", "event": "a fire"}
    # Not a fill of the template: the two places of {name} hold different text.
    assert not TemplateSet([t]).recognise("Ann sees a fire. What does Bob do?").recognised


def test_side_by_side_slots_are_ambiguous_unless_a_repeat_decides() -> None:
    alone = PromptTemplate(name="alone", text="Say {a}{b} now.")
    got = TemplateSet([alone]).recognise(alone.fill(a="Al", b="ice").text)
    assert got.template is None and "more than one way" in (got.reason or "")
    decided = PromptTemplate(name="decided", text="Say {a}{b} now. Again: {a}.")
    assert _check(decided, a="Al", b="ice").slots == {"a": "Al", "b": "ice"}


def test_multi_line_values_are_given_back_whole() -> None:
    t = PromptTemplate(name="plan", text="!<INPUT 0>!\n\nToday's plan:\n!<INPUT 1>!\nNext?")
    persona = "Name: Ann\nAge: 30\n\nInnate traits: kind\n"
    plan = "1) wake up\n2) eat\n\n3) Next?\nsleep"
    assert _check(t, persona, plan).slots == {"0": persona, "1": plan}


def test_a_slot_inside_a_line_holds_one_line_when_the_text_alone_cannot_decide() -> None:
    # Park et al.'s shape: a name inside a sentence ending ".", a line break, then a persona
    # block whose own lines end ".": without the rule every such line break fits.
    t = PromptTemplate(
        name="poignancy",
        text="Here is a brief description of !<INPUT 0>!.\n!<INPUT 1>!\n\nRate: !<INPUT 2>!",
    )
    persona = "Name: Ann.\nAge: 30.\nInnate traits: kind."
    assert _check(t, "Ann Lee", persona, "a fire").slots == {
        "0": "Ann Lee",
        "1": persona,
        "2": "a fire",
    }
    # A fit found without the rule is taken as it is, line breaks inside a line included.
    unique = PromptTemplate(name="unique", text="About {who}: {what} (end)")
    assert _check(unique, who="Ann\nLee", what="x").slots == {"who": "Ann\nLee", "what": "x"}


def test_two_blocks_with_only_a_line_break_between_are_never_split_by_guess() -> None:
    t = PromptTemplate(name="plan", text="!<INPUT 0>!\n!<INPUT 1>!\n\nWhat next?")
    got = TemplateSet([t]).recognise(t.fill("Name: Ann.\nAge: 30.", "7am wake.\n8am eat.").text)
    assert got.template is None and "more than one way" in (got.reason or "")


def test_values_holding_the_templates_own_text() -> None:
    t = PromptTemplate(name="t", text="Name: {name}\nTask: {task}\nAnswer:")
    task = "Name: Bob\nwrite the Task: line and\nAnswer:"
    assert _check(t, name="Ann", task=task).slots == {"name": "Ann", "task": task}
    # The whole template inside a value, and the value after a repeat.
    r = PromptTemplate(name="r", text="{who} asks: {q}. {who} waits.")
    q = "what does '{who} asks: x. {who} waits.' mean? Ann asks: y. Ann waits"
    assert _check(r, who="Ann", q=q).slots == {"who": "Ann", "q": q}


def test_a_value_that_makes_two_fills_is_never_guessed() -> None:
    t = PromptTemplate(name="t", text="Hello {x}, today is {d}. {x} says hi.")
    text = t.fill(x="Bob, today is Mon. Bob", d="Tue").text
    got = TemplateSet([t]).recognise(text)
    assert got.template is None and "x" in (got.reason or "")


def test_system_text_is_recognised_with_the_prompt() -> None:
    t = PromptTemplate(name="t", system="You are {name}.", text="{name}: rate {event}.")
    got = _check(t, name="Ann", event="a fire")
    assert got.slots == {"name": "Ann", "event": "a fire"}
    found = TemplateSet([t])
    assert not found.recognise("Ann: rate a fire.").recognised  # the system text is missing
    assert not found.recognise("Ann: rate a fire.", "You are Bob.").recognised


def test_two_templates_filling_to_one_prompt_are_ambiguous() -> None:
    a = PromptTemplate(name="a", text="Rate {x} now.")
    b = PromptTemplate(name="b", text="Rate {x}.")
    got = TemplateSet([a, b]).recognise("Rate the fire now.")
    assert got.template is None and "more than one template" in (got.reason or "")


def test_the_search_is_bounded() -> None:
    t = PromptTemplate(name="t", text="{a}{b}{c}{d} end {a}{c}x")
    found = TemplateSet([t], max_steps=500)
    started = time.perf_counter()
    got = found.recognise("a" * 3000 + " end " + "a" * 2000 + "x")
    assert got.template is None and "steps" in (got.reason or "")
    assert time.perf_counter() - started < 1.0


names = st.text(alphabet="ab{}! \n:.", min_size=0, max_size=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(x=names, y=names)
def test_property_recognised_values_fill_to_the_very_prompt(x: str, y: str) -> None:
    # Whatever the values, a recognition is never wrong: what it gives back fills to the same
    # prompt, and it is the values filled in unless another fill makes it ambiguous.
    t = PromptTemplate(name="t", text="A: {x}. B: {y}. A again: {x}.")
    filled = t.fill(x=x, y=y)
    got = TemplateSet([t]).recognise(filled.text)
    if got.filled is not None:
        assert got.filled.text == filled.text
        if x == x.strip() and y == y.strip():
            assert got.slots == {"x": x, "y": y}


# -- files --------------------------------------------------------------------------------------


def test_a_folder_of_files_loads_with_names_notes_and_agent_slots(tmp_path: Path) -> None:
    (tmp_path / "v1").mkdir()
    (tmp_path / "v1" / "poignancy.txt").write_text(PARK, encoding="utf-8")
    (tmp_path / "wake_up.txt").write_text(
        "agent slot: {name}\n<commentblockmarker>###</commentblockmarker>\n"
        "{name} wakes up at {time}. When?",
        encoding="utf-8",
    )
    (tmp_path / "ignored.md").write_text("not a template", encoding="utf-8")
    templates = load_templates(tmp_path)
    assert [t.name for t in templates] == ["poignancy", "wake_up"]
    assert [t.agent_slot for t in templates] == ["0", "name"]
    assert "persona name" in templates[0].notes and "Variables" not in templates[0].prompt
    found = TemplateSet.from_folder(tmp_path)
    assert found.recognise("Ann wakes up at 7 am. When?").slots == {"name": "Ann", "time": "7 am"}
    with pytest.raises(ConfigurationError):
        load_templates(tmp_path / "missing")
    (tmp_path / "copy.txt").write_text(
        "{name} wakes up at {time}. When?", encoding="utf-8"
    )  # the same text under another name
    with pytest.raises(ConfigurationError, match="same text"):
        TemplateSet.from_folder(tmp_path)


# -- tables keyed by the template ------------------------------------------------------------


def _client(tmp_path: Path, templates: Any = None, **kw: Any) -> tuple[CachedLLM, FakeOpenAI]:
    fake = FakeOpenAI()
    cache = SemanticCache(tmp_path / "c", embedder=HashEmbedder(dim=64))
    return CachedLLM(fake, cache=cache, templates=templates, **kw), fake


def test_same_name_different_text_never_share_a_table_and_renaming_keeps_it(
    tmp_path: Path,
) -> None:
    client, fake = _client(tmp_path)
    v1 = PromptTemplate(name="react", text="{name} sees {event}. React? yes/no")
    v2 = PromptTemplate(name="react", text="Does {name} react to {event}? Answer yes or no.")
    ask = client.chat.completions.create_with_info
    _, first = ask(model="m", **v1.fill(name="Ann", event="a fire").request(agent="Ann"))
    _, other = ask(model="m", **v2.fill(name="Ann", event="a fire").request(agent="Ann"))
    assert (first.outcome, other.outcome) == ("miss", "miss")  # never served v1's answer
    assert first.partition_key != other.partition_key
    renamed = v1.model_copy(update={"name": "reaction"})
    _, again = ask(model="m", **renamed.fill(name="Ann", event="a fire").request(agent="Ann"))
    assert again.outcome == "hit" and again.partition_key == first.partition_key
    assert again.category == "reaction"  # shown by its name
    assert len(fake.calls) == 2
    # Without a template the table is the category's, as before.
    plain = CacheOptions(category="react", agent="Ann", keywords=["Ann", "a fire"])
    _, untemplated = ask(model="m", messages=[{"role": "user", "content": "x"}], cache=plain)
    assert untemplated.partition_key not in (first.partition_key, other.partition_key)
    stats = client.cache.stats()
    assert sorted(t.category for t in stats.tables) == ["react", "react", "react", "reaction"]


# -- CachedLLM(templates=...) ------------------------------------------------------------------

POIGNANCY = PromptTemplate(name="poignancy", text=PARK)
WAKE = PromptTemplate(name="wake_up", text="{name} wakes up at {time}. When?")


def _user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def test_recognised_calls_are_filed_under_their_template_and_hit(tmp_path: Path) -> None:
    client, fake = _client(tmp_path, [POIGNANCY, WAKE], default_agent="town")
    prompt = POIGNANCY.fill("Ann", "the stove is on fire").text
    options = client.chat.completions.cache_options_for(model="m", messages=_user(prompt))
    assert options is not None
    assert (options.category, options.agent, options.template) == (
        "poignancy",
        "Ann",
        POIGNANCY.digest,
    )
    assert options.slots == {"0": "Ann", "1": "the stove is on fire"}
    # No keyword_slots: the cache chooses which of the slots to embed.
    assert options.keywords is None
    first = client.chat.completions.create(model="m", messages=_user(prompt))
    again = client.chat.completions.create(model="m", messages=_user(prompt))
    assert (
        len(fake.calls) == 1
        and again.choices[0].message.content == first.choices[0].message.content
    )
    # The wrapped client got exactly what the call site sent.
    assert fake.calls[0] == {"model": "m", "messages": _user(prompt)}
    # A template without an agent slot: the client's default agent.
    wake = client.chat.completions.cache_options_for(
        model="m", messages=_user(WAKE.fill(name="Ann", time="7").text)
    )
    assert wake is not None and wake.agent == "town"
    # Responses: a plain string input is a prompt too.
    _, info = client.responses.create_with_info(model="m", input=prompt)
    assert info.outcome == "miss" and info.category == "poignancy" and info.agent == "Ann"
    table = [t for t in client.cache.stats().tables if t.category == "poignancy"]
    assert sum(t.hits for t in table) == 1


def test_unrecognised_calls_pass_through_counted(tmp_path: Path) -> None:
    client, fake = _client(tmp_path, [POIGNANCY, WAKE])
    completions = client.chat.completions
    for _ in range(2):
        completions.create(model="m", messages=_user("Hello there"))
    assert len(fake.calls) == 2 and fake.calls[0] == {
        "model": "m",
        "messages": _user("Hello there"),
    }
    reason = completions.cache_bypass_reason(model="m", messages=_user("Hello there"))
    assert reason is not None and "no template" in reason
    # A conversation is not a template's prompt either.
    talk = [*_user("hi"), {"role": "assistant", "content": "yo"}, *_user("and?")]
    completions.create(model="m", messages=talk)
    assert "one user message" in (completions.cache_bypass_reason(model="m", messages=talk) or "")
    # cache=False: not cached and not counted; cache=options: the options, as before.
    completions.create(model="m", messages=_user("Hello there"), cache=False)
    stats = client.cache.stats()
    assert stats.unrecognised == 3 and stats.tables == []
    assert "unrecognised: 3" in stats.render()
    with pytest.raises(ConfigurationError):
        completions.create_with_info(model="m", messages=_user("Hello there"))
    recognised = _user(WAKE.fill(name="Ann", time="7").text)
    assert completions.cache_bypass_reason(model="m", messages=recognised) is None
    # Without templates nothing is counted: a call without cache= is not the cache's.
    plain, _ = _client(tmp_path / "plain")
    plain.chat.completions.create(model="m", messages=_user("Hello there"))
    assert plain.cache.stats().unrecognised == 0


def test_a_template_without_slots_is_found_by_its_whole_prompt(tmp_path: Path) -> None:
    fixed = PromptTemplate(name="fixed", text="Say hello.")
    client, fake = _client(tmp_path, [fixed])
    for _ in range(2):
        client.chat.completions.create(model="m", messages=_user("Say hello."))
    assert len(fake.calls) == 1


def test_templates_from_a_folder_path(tmp_path: Path) -> None:
    folder = tmp_path / "prompts"
    folder.mkdir()
    (folder / "poignancy.txt").write_text(PARK, encoding="utf-8")
    client, fake = _client(tmp_path, str(folder))
    prompt = POIGNANCY.fill("Ann", "a fire").text
    for _ in range(2):
        client.chat.completions.create(model="m", messages=_user(prompt))
    assert len(fake.calls) == 1
    copy = client.with_cache(threshold=0.99)
    assert copy.templates is client.templates


def test_async_recognised_calls_hit_on_repeat(tmp_path: Path) -> None:
    async def run() -> None:
        fake = AsyncFakeOpenAI()
        client = AsyncCachedLLM(
            fake, tmp_path / "c", embedder=HashEmbedder(dim=64), templates=TemplateSet([WAKE])
        )
        text = WAKE.fill(name="Ann", time="7 am").text
        for _ in range(2):
            await client.chat.completions.create(model="m", messages=_user(text))
        stream = await client.chat.completions.create(model="m", messages=_user(text), stream=True)
        assert stream.cache_info.outcome == "hit"
        await client.chat.completions.create(model="m", messages=_user("unknown"))
        assert len(fake.calls) == 2
        assert client.cache.stats().unrecognised == 1
        client.close()

    asyncio.run(run())


def test_the_adoption_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    root = Path(__file__).resolve().parent.parent
    runpy.run_path(str(root / "examples" / "adopt_prompt_folder.py"), run_name="__main__")
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert [line.split()[-1] for line in lines[:4]] == ["recognised"] * 4
    assert any(line.startswith("poignancy_event") and " 2 " in line for line in lines)
    assert "unrecognised: 1" in out
    # Every file of the example's folder loads, names its agent slot, and fills back exactly.
    templates = load_templates(root / "examples" / "prompt_folder")
    assert len(templates) == 3 and all(t.agent_slot for t in templates)
