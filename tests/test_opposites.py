"""The opposites gate: negations, antonyms and numbers refused; paraphrases served."""

from __future__ import annotations

import gzip
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from llmcache import (
    CacheConfig,
    CachedLLM,
    CacheOptions,
    CallInfo,
    CategoryPolicy,
    Mode,
    SemanticCache,
)
from llmcache.testing import FakeOpenAI, HashEmbedder
from llmcache.verification import Opposition, opposition

BASE = "Maria is happy about the party"


@pytest.mark.parametrize(
    ("stored", "asked"),
    [
        (BASE, "Maria is not happy about the party"),
        (BASE, "Maria isn't happy about the party"),
        (BASE, "Maria is never happy about the party"),
        ("Alice has homework tonight", "Alice has no homework tonight"),
        ("Mary drinks a hot chocolate with sugar", "Mary drinks a hot chocolate without sugar"),
        ("Amelia can grow vegetables", "Amelia can't grow vegetables"),
        ("Amelia can grow vegetables", "Amelia cannot grow vegetables"),
        ("Liam serves Noah coffee", "Liam doesn\u2019t serve Noah coffee"),
        (BASE, "Maria is unhappy about the party"),
        ("Noah likes the recipe", "Noah dislikes the recipe"),
        ("The desk is active", "The desk is inactive"),
        ("The plan is possible", "The plan is impossible"),
    ],
)
def test_each_negation_form_is_refused(stored: str, asked: str) -> None:
    found = opposition(asked, stored)
    assert found is not None and found.kind == "negation", found
    # Either way round: which text is the stored one does not matter.
    assert opposition(stored, asked) is not None


@pytest.mark.parametrize(
    ("stored", "asked", "pair"),
    [
        (
            "Klaus Mueller is entering the cafe",
            "Klaus Mueller is leaving the cafe",
            ("leaving", "entering"),
        ),
        (
            "Isabella is opening Hobbs Cafe",
            "Isabella is closing Hobbs Cafe",
            ("closing", "opening"),
        ),
        (
            "Klaus accepted the invitation",
            "Klaus declined the invitation",
            ("declined", "accepted"),
        ),
        ("Alice won the game", "Alice lost the game", ("lost", "won")),
        ("The Television is on", "The Television is off", ("off", "on")),
        ("Prices went up", "Prices went down", ("down", "up")),
        ("The lesson starts", "The lesson ends", ("ends", "starts")),
        ("Alice wakes up early", "Alice wakes up late", ("late", "early")),
        ("The fridge is full", "The fridge is empty", ("empty", "full")),
        ("Ethan enters the store", "Ethan exits the store", ("exits", "enters")),
        (
            "Amelia waters the garden before breakfast",
            "Amelia waters the garden after breakfast",
            ("after", "before"),
        ),
    ],
)
def test_antonyms_are_refused_and_name_their_pair(
    stored: str, asked: str, pair: tuple[str, str]
) -> None:
    assert opposition(asked, stored) == Opposition("antonym", pair)
    assert Opposition("antonym", pair).describe() == f"{pair[0]}/{pair[1]}"


@pytest.mark.parametrize(
    ("stored", "asked"),
    [
        ("Noah locks the door", "Noah is locking the door"),
        ("Ethan is switching on the Stove", "Ethan is turning on the Stove"),
        ("Alice is talking with James", "Alice is now talking with James"),
        ("Klaus is entering the cafe", "Klaus enters the cafe"),
        ("Alice buys 2 coffees", "Alice buys two coffees"),
        ("Alice wakes up at 7 am", "Alice wakes up at 7:00 am"),
        # A negation on a word both texts negate is no difference.
        ("Liam doesn't serve Noah coffee", "Liam does not serve coffee to Noah"),
        ("Amelia can't grow vegetables", "Amelia cannot grow vegetables"),
        # A negation of words the other text lacks adds something; it does not oppose.
        ("How does Wikipedia earn money?", "How does Wikipedia earn money without ads?"),
        # An alternative offered is not a negation.
        ("Was it a failure?", "Was it a failure? Why or why not?"),
    ],
)
def test_each_paraphrase_form_is_served(stored: str, asked: str) -> None:
    assert opposition(asked, stored) is None
    assert opposition(stored, asked) is None


@pytest.mark.parametrize(
    ("stored", "asked"),
    [
        (BASE, "Maria is not unhappy about the party"),
        ("Maria is unhappy about the party", "Maria is not happy about the party"),
        ("The shower is clean", "The shower is not dirty"),
    ],
)
def test_double_negation_is_served(stored: str, asked: str) -> None:
    assert opposition(asked, stored) is None


def test_two_antonyms_in_different_places_do_not_cancel() -> None:
    assert opposition("Alice is late and unhappy", "Alice is early and happy") is not None
    assert opposition("Alice is late and sleepy", "Alice is early and awake") is not None


@pytest.mark.parametrize(
    ("stored", "asked"),
    [
        ("Alice buys 2 coffees", "Alice buys 5 coffees"),
        ("Isabella rated the proposal 3", "Isabella rated the proposal 8"),
        ("Amelia plants three rows", "Amelia plants seven rows"),
        ("Alice wakes up at 7:00", "Alice wakes up at 7:30"),
    ],
)
def test_differing_numbers_are_refused(stored: str, asked: str) -> None:
    found = opposition(asked, stored)
    assert found is not None and found.kind == "number"


def test_identical_texts_and_one_sided_additions_are_not_opposed() -> None:
    assert opposition(BASE, BASE) is None
    assert opposition("", "") is None
    assert opposition(BASE, BASE + " today") is None
    # A number one side adds is more detail, not a different quantity.
    assert opposition("Alice buys coffees", "Alice buys 2 coffees") is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "\x00\x01",
        "n't",
        "not",
        "un",
        "'s",
        "Ünïcödé straße 🚀 не счастлив",
        "不 开心",
        "9" * 5000,
        "not " * 5000,
        " ".join(["entering leaving unhappy 12 never"] * 2000),
    ],
)
def test_any_text_never_raises(text: str) -> None:
    for other in ("", BASE, text[::-1], "Maria is not happy"):
        result = opposition(text, other)
        assert result is None or isinstance(result, Opposition)
        result = opposition(other, text)
        assert result is None or isinstance(result, Opposition)


def test_the_antonym_data_names_its_source_package_and_licence() -> None:
    data = resources.files("llmcache").joinpath("data/antonyms.tsv.gz").read_bytes()
    lines = gzip.decompress(data).decode().splitlines()
    header = [line for line in lines if line.startswith("#")]
    assert any(line.startswith("# package: wordnet-base ") for line in header), header
    assert any("WordNet 3.0 Copyright 2006 by Princeton University" in line for line in header)
    assert any(line == "# generator: scripts/build_antonyms.py" for line in header)
    pairs = {tuple(line.split("\t")[1:3]) for line in lines if line.startswith("pair\t")}
    # WordNet's own pairs, not a hand list: a few it is known to hold.
    assert {("lose", "win"), ("close", "open"), ("off", "on"), ("empty", "full")} <= pairs
    assert len(pairs) > 10_000


# -- wired into the cache: a counted miss, named, switchable -----------------------------------

ENTERING = "Klaus Mueller is entering the cafe"
LEAVING = "Klaus Mueller is leaving the cafe"


def _client(tmp_path: Path, **config: Any) -> tuple[CachedLLM, FakeOpenAI]:
    fake = FakeOpenAI()
    # Threshold -1: every candidate passes it, so what is refused is refused by the gate.
    cache = SemanticCache(
        tmp_path / "c",
        embedder=HashEmbedder(dim=64),
        config=CacheConfig(**{"threshold": -1.0, **config}),
    )
    return CachedLLM(fake, cache=cache), fake


def _ask(client: CachedLLM, keywords: str, **options: Any) -> CallInfo:
    _, info = client.chat.completions.create_with_info(
        model="m",
        messages=[{"role": "user", "content": f"What does one do when: {keywords}?"}],
        cache=CacheOptions(category="reaction", agent="Isabella", keywords=[keywords], **options),
    )
    return info


def test_an_opposite_candidate_is_a_counted_miss_that_names_its_pair(tmp_path: Path) -> None:
    client, fake = _client(tmp_path)
    assert _ask(client, ENTERING).outcome == "miss"
    info = _ask(client, LEAVING)
    assert info.outcome == "miss"
    assert (info.refused_by, info.refused_pair) == ("opposites", "leaving/entering")
    assert len(fake.calls) == 2  # the opposite's answer was not served: the LLM answered
    paraphrase = _ask(client, "Klaus Mueller enters the cafe")
    assert paraphrase.outcome == "hit" and paraphrase.refused_by is None
    stats = client.cache.stats()
    (table,) = stats.tables
    assert table.refused_opposites == 1 and stats.total.refused_opposites == 1
    assert "refused as opposite" in stats.render()


def test_the_gate_applies_in_serve_mode(tmp_path: Path) -> None:
    client, _ = _client(tmp_path)
    _ask(client, ENTERING)
    info = _ask(client, LEAVING, mode=Mode.SERVE)
    assert info.outcome == "miss" and info.refused_by == "opposites"
    assert _ask(client, "Klaus Mueller enters the cafe", mode=Mode.SERVE).outcome == "hit"


@pytest.mark.parametrize(
    "config",
    [
        {"opposites_gate": False},
        {"categories": {"reaction": CategoryPolicy(opposites_gate=False)}},
    ],
)
def test_the_gate_is_switched_off_for_the_cache_or_a_category(
    tmp_path: Path, config: dict[str, Any]
) -> None:
    client, _ = _client(tmp_path, **config)
    _ask(client, ENTERING)
    info = _ask(client, LEAVING)
    assert info.outcome == "hit" and info.refused_by is None


def test_a_category_can_turn_the_gate_on_where_the_cache_turned_it_off(tmp_path: Path) -> None:
    policy = CategoryPolicy(opposites_gate=True)
    client, _ = _client(tmp_path, opposites_gate=False, categories={"reaction": policy})
    _ask(client, ENTERING)
    assert _ask(client, LEAVING).refused_by == "opposites"


def test_the_proxy_metrics_count_refusals_per_category_and_table(tmp_path: Path) -> None:
    pytest.importorskip("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families

    from llmcache.proxy._metrics import ProxyMetrics

    client, _ = _client(tmp_path)
    _ask(client, ENTERING)
    _ask(client, LEAVING)
    page = ProxyMetrics(client.cache.stats).render().decode()
    samples = {
        (s.name, s.labels.get("category")): s.value
        for family in text_string_to_metric_families(page)
        for s in family.samples
    }
    assert samples[("llmcache_refused_opposites_total", "reaction")] == 1
    assert samples[("llmcache_table_refused_opposites_total", "reaction")] == 1
