"""Keywords that carry the query: a templated call embeds the slots that vary within its table,
deciding first; exact slots (named, or values that are times, dates, ranges) are never served
across; entries stored under another choice are re-scored before they can be served."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from llmcache import CachedLLM, CacheOptions, PromptTemplate, SemanticCache
from llmcache._slots import choose, embedded_from_counters, looks_exact, observe
from llmcache._types import CacheEntry, CallInfo, checksum_problem
from llmcache.testing import FakeOpenAI, HashEmbedder

PERSONA = (
    "Isabella Rodriguez is 34 years old. Isabella Rodriguez is friendly, outgoing and "
    "hospitable. Isabella Rodriguez is a cafe owner of Hobbs Cafe who loves to make people "
    "feel welcome. She is always looking for ways to make the cafe a place where people can "
    "come to relax and enjoy themselves. Isabella Rodriguez is planning a Valentine's Day "
    "party at Hobbs Cafe with her customers on February 14th, 2023 at 5pm."
)

POIGNANCY = PromptTemplate(
    name="poignancy_event",
    text=(
        "Here is a brief description of !<INPUT 0>!.\n!<INPUT 1>!\n\n"
        "On the scale of 1 to 10, where 1 is purely mundane and 10 is extremely poignant, "
        "rate the likely poignancy of the following event for !<INPUT 2>!.\n\n"
        "Event: !<INPUT 3>!\nRate (return a number between 1 to 10):"
    ),
)

ACTION = PromptTemplate(
    name="next_action",
    text="{persona}\nIt is {time} now. What does {name} do next? Plan: {plan}",
)


def fill(event: str) -> dict[str, Any]:
    return POIGNANCY.fill("Isabella Rodriguez", PERSONA, "Isabella Rodriguez", event).request(
        agent="Isabella Rodriguez"
    )


def counting_upstream() -> FakeOpenAI:
    calls = {"n": 0}

    def answer(request: dict[str, Any]) -> str:
        calls["n"] += 1
        return f"answer {calls['n']}"

    return FakeOpenAI(answer)


def cache_at(location: Any, **config: Any) -> SemanticCache:
    cache = SemanticCache(location, embedder=HashEmbedder(dim=256))
    return cache.with_config(**config) if config else cache


def ask(client: CachedLLM, request: dict[str, Any]) -> tuple[str, CallInfo]:
    completion, info = client.chat.completions.create_with_info(model="m", **request)
    return str(completion.choices[0].message.content), info


# -- the choice itself --------------------------------------------------------------------------


def test_choice_is_every_slot_until_one_varies_then_the_varied_ones_shortest_first() -> None:
    profile: dict[str, float] = {}
    first = {"name": "Isabella", "persona": PERSONA, "event": "the stove is on fire"}
    profile.update(observe(first, frozenset()))
    # Nothing has varied yet: all slots, shortest first (the persona last).
    assert choose(profile, list(first), frozenset()) == ("name", "event", "persona")
    second = {**first, "event": "a customer orders coffee"}
    for name, value in observe(second, frozenset()).items():
        profile[name] = (
            min(profile.get(name, value), value)
            if name.startswith("min_")
            else max(profile.get(name, value), value)
        )
    assert choose(profile, list(first), frozenset()) == ("event",)
    # An exact slot is never embedded, varied or not.
    assert choose(profile, list(first), frozenset({"event"})) == ("name", "persona")
    assert embedded_from_counters(profile) == ("event",)


@pytest.mark.parametrize(
    "value",
    [
        "09:00 AM",
        "10:00 PM",
        "9am",
        "2023-02-13",
        "February 13, 2023",
        "Monday February 13",
        "February 13, 2023, 09:00 AM",
        "10:00 - 11:00",
        "3 to 5",
        "02/13/2023",
    ],
)
def test_times_dates_and_ranges_look_exact(value: str) -> None:
    assert looks_exact(value)


@pytest.mark.parametrize(
    "value",
    [
        "the stove is on fire",
        "Isabella Rodriguez",
        "7",
        "wake up at 07:00 AM and open the cafe",
        "",
        "may I have a coffee",
    ],
)
def test_ordinary_values_do_not_look_exact(value: str) -> None:
    assert not looks_exact(value)


# -- through the official client -----------------------------------------------------------------


def test_once_the_event_varies_different_events_do_not_hit_however_long_the_persona(
    tmp_path: Path,
) -> None:
    fake = counting_upstream()
    client = CachedLLM(fake, cache=cache_at(tmp_path / "c"))
    _, first = ask(client, fill("the stove is on fire"))
    # Before any variation every slot is embedded, deciding (shortest) first.
    assert first.outcome == "miss"
    assert first.embedded_slots == ("0", "2", "3", "1")
    assert first.embed_text is not None and first.embed_text.startswith("Isabella Rodriguez")
    _, second = ask(client, fill("a customer orders a latte"))
    assert second.outcome == "miss"  # only the event is embedded now
    assert second.embedded_slots == ("3",)
    assert second.embed_text == "a customer orders a latte"
    _, third = ask(client, fill("a dog barks outside the window"))
    assert third.outcome == "miss"
    again, fourth = ask(client, fill("a customer orders a latte"))
    assert fourth.outcome == "hit" and again == "answer 2"
    assert len(fake.calls) == 3
    # The same events with every slot embedded (the old default): the persona dominates.
    old = CachedLLM(counting_upstream(), cache=cache_at(tmp_path / "old"))
    keyword_all = POIGNANCY.fill("Isabella Rodriguez", PERSONA, "Isabella Rodriguez", "x")
    assert keyword_all.keywords[1] == PERSONA
    for n, event in enumerate(["the stove is on fire", "a customer orders a latte"]):
        filled = POIGNANCY.fill("Isabella Rodriguez", PERSONA, "Isabella Rodriguez", event)
        _, info = ask(
            old,
            {
                "messages": filled.messages,
                "cache": CacheOptions(category="poignancy_event", keywords=filled.keywords),
            },
        )
        assert info.outcome == ("miss" if n == 0 else "hit")  # what the new default prevents


def test_explicit_keywords_override_the_choice(tmp_path: Path) -> None:
    client = CachedLLM(counting_upstream(), cache=cache_at(tmp_path / "c"))
    ask(client, fill("the stove is on fire"))
    ask(client, fill("a customer orders a latte"))
    request = fill("the stove is on fire")
    options = request["cache"].model_copy(update={"keywords": ("Isabella Rodriguez", PERSONA)})
    _, info = ask(client, {**request, "cache": options})
    assert info.embedded_slots is None
    assert info.embed_text == f"Isabella Rodriguez {PERSONA}"
    # A template's keyword_slots are explicit keywords too.
    chosen = PromptTemplate(name="poignancy_event", text=POIGNANCY.text, keyword_slots=("1",))
    filled = chosen.fill("Isabella Rodriguez", PERSONA, "Isabella Rodriguez", "a fire")
    _, info = ask(client, filled.request(agent="Isabella Rodriguez"))
    assert info.embedded_slots is None and info.embed_text == PERSONA


def test_an_exact_time_slot_is_never_served_across(tmp_path: Path) -> None:
    fake = counting_upstream()
    client = CachedLLM(fake, cache=cache_at(tmp_path / "c", threshold=0.5))

    def at(time: str, plan: str = "open the cafe, then bake") -> dict[str, Any]:
        return ACTION.fill(persona=PERSONA, time=time, name="Isabella", plan=plan).request(
            agent="Isabella"
        )

    _, first = ask(client, at("09:00 AM"))
    assert first.outcome == "miss" and "time" not in (first.embedded_slots or ())
    # Everything else identical (cosine 1.0), the time differs: never served.
    _, other = ask(client, at("10:00 PM"))
    assert other.outcome == "miss" and other.similarity is None
    answer, same = ask(client, at("09:00 AM"))
    assert same.outcome == "hit" and answer == "answer 1"
    # Named exact slots work on any value; detection can be turned off.
    named = PromptTemplate(name="pick", text="{who} picks {option}", exact_slots=("option",))
    ask(client, named.fill(who="Isabella", option="tea").request())
    _, picked = ask(client, named.fill(who="Isabella", option="Tea ").request())
    assert picked.outcome == "miss"
    # (The opposites gate off too: it would refuse the other time as a differing number.)
    loose_cache = cache_at(
        tmp_path / "loose", threshold=-1.0, detect_exact=False, opposites_gate=False
    )
    loose = CachedLLM(counting_upstream(), cache=loose_cache)
    ask(loose, at("09:00 AM"))
    _, across = ask(loose, at("10:00 PM"))
    # Left to the embedding (the only slot that varied), and at threshold -1 served across.
    assert across.embedded_slots == ("time",) and across.outcome == "hit"


def test_entries_stored_under_another_choice_are_rescored_before_serving(tmp_path: Path) -> None:
    fake = counting_upstream()
    cache = cache_at(tmp_path / "c", threshold=0.8)
    client = CachedLLM(fake, cache=cache)
    _, first = ask(client, fill("the stove is on fire"))
    (entry,) = cache.entries(first.partition_key or "")
    assert entry.embedded_slots == ("0", "2", "3", "1")
    assert entry.slots is not None and entry.slots["3"] == "the stove is on fire"
    # The event varies: the first entry's stored vector (persona and all) is stale. Under the
    # old choice this query would score ~0.9 against it; re-scored by the event alone it is
    # far below the threshold, so it is not served.
    _, second = ask(client, fill("a customer orders a latte"))
    assert second.outcome == "miss"
    assert second.similarity is not None and second.similarity.cosine < 0.5
    # The first entry's own event still finds it, re-scored under the new choice.
    answer, third = ask(client, fill("the stove is on fire"))
    assert third.outcome == "hit" and answer == "answer 1" and third.entry_id == entry.id
    assert third.similarity is not None and third.similarity.cosine > 0.99


def test_entries_with_slots_carry_a_checksum_older_entries_still_load(tmp_path: Path) -> None:
    cache = cache_at(tmp_path / "c")
    client = CachedLLM(counting_upstream(), cache=cache)
    _, info = ask(client, fill("the stove is on fire"))
    (entry,) = cache.entries(info.partition_key or "")
    data = entry.model_dump(mode="json")
    assert entry.checksum is not None and entry.checksum.startswith("v2:")
    assert checksum_problem(data) is None
    assert checksum_problem({**data, "slots": {**data["slots"], "3": "a fire"}}) is not None
    assert checksum_problem({**data, "embedded_slots": ["3"]}) is not None
    # An entry of before slots (no slot fields at all) keeps its v1 checksum.
    old = {k: v for k, v in data.items() if k not in ("slots", "embedded_slots", "checksum")}
    sealed = CacheEntry.model_validate(old).sealed()
    assert sealed.checksum is not None and sealed.checksum.startswith("v1:")
    assert checksum_problem(sealed.model_dump(mode="json")) is None
    added = {**sealed.model_dump(mode="json"), "slots": {"3": "x"}}
    assert checksum_problem(added) is not None


def test_stats_say_which_slots_a_table_embeds(tmp_path: Path) -> None:
    cache = cache_at(tmp_path / "c")
    client = CachedLLM(counting_upstream(), cache=cache)
    ask(client, fill("the stove is on fire"))
    (table,) = cache.stats().tables
    assert table.embedded_slots == ("0", "2", "3", "1")
    ask(client, fill("a customer orders a latte"))
    (table,) = cache.stats().tables
    assert table.embedded_slots == ("3",)
    text = cache.stats().render()
    assert "embedded slots" in text and "poignancy_event" in text.split("embedded slots")[1]


# -- persistence: both backends --------------------------------------------------------------------


@pytest.fixture(params=["local", "pg"])
def reopen(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Any]]:
    """Opens the same store again each time it is called."""
    if request.param == "local":
        yield lambda: tmp_path / "c"
        return
    backends = request.getfixturevalue("pg_backends")
    schema = f"slots_{tmp_path.name[-8:].lower()}".replace("-", "_")
    yield lambda: backends.make(schema=schema)


def test_the_slot_profile_survives_reopening(reopen: Callable[[], Any]) -> None:
    cache = cache_at(reopen())
    client = CachedLLM(counting_upstream(), cache=cache)
    ask(client, fill("the stove is on fire"))
    ask(client, fill("a customer orders a latte"))
    cache.close()
    again = cache_at(reopen())
    client = CachedLLM(counting_upstream(), cache=again)
    # A third event: embedded alone at once (the variation was remembered), so not served
    # the answer of an entry whose persona matches.
    _, info = ask(client, fill("a dog barks outside the window"))
    assert info.embedded_slots == ("3",) and info.outcome == "miss"
    answer, hit = ask(client, fill("the stove is on fire"))
    assert hit.outcome == "hit" and answer == "answer 1"
    assert {t.embedded_slots for t in again.stats().tables} == {("3",)}
    again.close()


# -- the real default embedder --------------------------------------------------------------------

KLAUS = (
    "Name: Klaus Mueller\nAge: 20\nInnate traits: kind, inquisitive, passionate\nLearned traits: "
    "Klaus Mueller is a student at Oak Hill College studying sociology. He is passionate about "
    "social justice and loves to explore different perspectives.\nCurrently: Klaus Mueller is "
    "writing a research paper on the effects of gentrification in low-income communities.\n"
    "Lifestyle: Klaus Mueller goes to bed around 11pm, awakes up around 7am, eats dinner around "
    "5pm.\nDaily plan requirement: Klaus Mueller goes to the library at Oak Hill College early "
    "in the morning, spends his days writing, and eats at Hobbs Cafe."
)
PLAN = (
    "wake up at 7:00 am, go to the library at 8:00 am, read articles and take notes until "
    "12:00 pm, eat lunch at Hobbs Cafe at 12:00 pm, write his paper from 1:00 pm to 4:00 pm, "
    "talk with Maria Lopez from 4:00 pm to 5:00 pm, eat dinner at 5:00 pm, revise his paper "
    "from 6:00 pm to 9:00 pm, read a novel until 11:00 pm, go to bed at 11:00 pm"
)

# (template, base fill, same fill, other fill), filled as Park et al.'s code fills them.
PARK_LIKE = [
    (
        PromptTemplate(
            name="poignancy",
            text="Here is a brief description of {n1}.\n{iss}\nOn the scale of 1 to 10, rate "
            "the poignancy of the following event for {n2}.\nEvent: {event}\nRate:",
        ),
        {"event": "Klaus Mueller is reading a book in the library"},
        {"event": "Klaus Mueller is reading a book in the library."},
        {"event": "Klaus Mueller is told that his grandmother passed away"},
    ),
    (
        PromptTemplate(
            name="react",
            text="{iss}\nPlan: {plan}\n{n1} is {action}. {n2} sees: {seen}\nShould {n1} react?",
        ),
        {"action": "writing his paper", "seen": "Maria Lopez is sitting down at the next table"},
        {"action": "writing his paper", "seen": "Maria Lopez is sitting at the next table"},
        {"action": "writing his paper", "seen": "a fire alarm is ringing in the library"},
    ),
    (
        PromptTemplate(
            name="next_action", text="{iss}\n{plan}\nWhat is {n1} doing at {time}? {n2} is"
        ),
        {"time": "February 13, 2023, 09:00 AM"},
        {"time": "February 13, 2023, 09:00 AM"},
        {"time": "February 13, 2023, 10:00 PM"},
    ),
    (
        PromptTemplate(
            name="object",
            text="{iss}\n{n1} is {action}. Objects: {objects}. Which object does {n2} use?",
        ),
        {"action": "brewing a cup of tea", "objects": "desk, bed, kettle, bookshelf"},
        {"action": "brewing a cup of tea.", "objects": "desk, bed, kettle, bookshelf"},
        {"action": "going to sleep for the night", "objects": "desk, bed, kettle, bookshelf"},
    ),
    (
        PromptTemplate(
            name="triple", text="{n1} is {action}.\n(subject, predicate, object) for {n2}:"
        ),
        {"action": "eating lunch at Hobbs Cafe"},
        {"action": "eating lunch at the Hobbs Cafe"},
        {"action": "arguing with Maria Lopez about rent"},
    ),
    (
        PromptTemplate(
            name="decomp",
            text="{iss}\nSchedule: {plan}\nList the subtasks of {n1} {task} from {span}. {n2}:",
        ),
        {"task": "writing the methods section", "span": "01:00 PM - 04:00 PM"},
        {"task": "writing the methods section", "span": "01:00 PM - 04:00 PM"},
        {"task": "writing the methods section", "span": "06:00 PM - 09:00 PM"},
    ),
]


def _park_fill(template: PromptTemplate, deciding: dict[str, str]) -> dict[str, Any]:
    common = {"n1": "Klaus Mueller", "n2": "Klaus Mueller", "iss": KLAUS, "plan": PLAN}
    values = {k: v for k, v in {**common, **deciding}.items() if k in template.slots}
    return template.fill(**values).request(agent="Klaus Mueller")


@pytest.mark.slow
@pytest.mark.parametrize("case", PARK_LIKE, ids=lambda c: c[0].name)
def test_real_embedder_rewordings_hit_and_other_deciding_values_do_not(
    case: tuple[PromptTemplate, dict[str, str], dict[str, str], dict[str, str]],
    tmp_path: Path,
    minilm: Any,
) -> None:
    template, base, same, other = case
    outcomes = {}
    for probe, fills in (("same", same), ("other", other)):
        cache = SemanticCache(tmp_path / probe, embedder=minilm)  # the default threshold
        client = CachedLLM(counting_upstream(), cache=cache)
        _, first = ask(client, _park_fill(template, base))
        answer, info = ask(client, _park_fill(template, fills))
        assert answer == ("answer 1" if info.outcome == "hit" else "answer 2")
        outcomes[probe] = info.outcome
        cache.close()
    assert first.outcome == "miss"
    assert outcomes == {"same": "hit", "other": "miss"}


@pytest.mark.slow
def test_real_embedder_with_every_slot_a_keyword_serves_most_other_fills(
    tmp_path: Path, minilm: Any
) -> None:
    # The old default, for contrast: the persona and plan are most of the text.
    served = 0
    for n, (template, base, _, other) in enumerate(PARK_LIKE):
        cache = SemanticCache(tmp_path / str(n), embedder=minilm)
        client = CachedLLM(counting_upstream(), cache=cache)
        for fills in (base, other):
            request = _park_fill(template, fills)
            options = request["cache"]
            keywords = tuple((options.slots or {}).values())
            _, info = ask(
                client, {**request, "cache": CacheOptions(category="t", keywords=keywords)}
            )
        served += info.outcome == "hit"
        cache.close()
    assert served >= len(PARK_LIKE) // 2


@pytest.fixture(scope="module")
def minilm() -> Any:
    from llmcache.embedders import MiniLMEmbedder

    embedder = MiniLMEmbedder()
    embedder.load()
    return embedder
