"""Odd inputs: every call either gets its answer (stored when it can be) or a clear error before
anything is paid; settings that do not exist are refused by name; the recorder never loses a
paid answer."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from fault_tools import MODEL, ask, messages, open_client, opts
from pydantic import ValidationError

from llmcache import CacheConfig, CacheOptions, CategoryPolicy, EmbedMode
from llmcache._types import CacheEntry
from llmcache.errors import ConfigurationError
from llmcache.recording import Recorder, read_records

ODD_TEXTS = {
    "100k-chars": "lorem ipsum " * 8_400,
    "nul": "before\x00after",
    "emoji": "🌳 in 🏞️ is 😴 👨‍👩‍👧",
    "right-to-left": "העץ בפארק ויקטוריה במצב מנוחה",
    "mixed-direction": "tree \u202eeerT\u202c שלום",
    "control-chars": "tab\there\r\nand\x1bescape",
}


@pytest.mark.parametrize("name", sorted(ODD_TEXTS))
@pytest.mark.parametrize("embed", [EmbedMode.KEYWORD, EmbedMode.FULL])
def test_odd_text_is_cached_and_served_back_exactly(
    tmp_path: Path, name: str, embed: EmbedMode
) -> None:
    text = ODD_TEXTS[name]
    client, fake = open_client(tmp_path / "c", embed=embed)
    first, info1 = ask(client, [text, "x"])
    second, info2 = ask(client, [text, "x"])
    assert (info1.outcome, info2.outcome) == ("miss", "hit")
    assert second == first and len(fake.calls) == 1
    assert not info1.store_failed and not info1.record_failed
    client.close()
    # Reopened: the text round-trips through the store byte for byte.
    again, fake2 = open_client(tmp_path / "c", embed=embed)
    content, info = ask(again, [text, "x"])
    assert (info.outcome, content, fake2.calls) == ("hit", first, [])
    again.close()


@pytest.mark.parametrize("embed", [EmbedMode.KEYWORD, EmbedMode.FULL])
def test_lone_surrogates_get_their_answer_counted_as_not_stored(
    tmp_path: Path, embed: EmbedMode
) -> None:
    client, fake = open_client(tmp_path / "c", recorder=tmp_path / "rec.jsonl", embed=embed)
    bad = ["tree \udc80 idle"]
    content, info = ask(client, bad)
    # Answered: the text cannot be written as UTF-8 (not stored, not recorded), but it was paid.
    assert content is not None and content.startswith("answer to")
    assert info.store_failed and info.record_failed
    assert info.embed_text is not None and "\\udc80" in info.embed_text  # escaped to embed it
    # Two different lone surrogates never share an embedding text.
    _, other = ask(client, ["tree \udc81 idle"])
    assert other.embed_text != info.embed_text
    assert len(fake.calls) == 2
    total = client.cache.stats().total
    assert total.store_failures == 2 and total.record_failures == 2
    client.close()


NON_STRING_PARTS: dict[str, Any] = {
    "text-and-image": [
        {"type": "text", "text": "What is in the picture?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
    ],
    "numbers-and-none": [1, None, 2.5],
    "a-number": 42,
    "nested": [{"type": "text", "text": ["deeply", {"nested": True}]}],
    "empty-list": [],
    "none": None,
}


@pytest.mark.parametrize("name", sorted(NON_STRING_PARTS))
@pytest.mark.parametrize("embed", [EmbedMode.KEYWORD, EmbedMode.FULL])
def test_non_string_content_parts_are_cached(tmp_path: Path, name: str, embed: EmbedMode) -> None:
    client, fake = open_client(tmp_path / "c", embed=embed)
    msgs = [{"role": "user", "content": NON_STRING_PARTS[name]}]
    replies = []
    for _ in range(2):
        reply, info = client.chat.completions.create_with_info(
            model=MODEL, messages=msgs, cache=opts(["look", "at", "this"])
        )
        replies.append((reply.choices[0].message.content, info.outcome, info.store_failed))
    assert [r[1] for r in replies] == ["miss", "hit"] and not replies[0][2]
    assert replies[0][0] == replies[1][0] and len(fake.calls) == 1
    client.close()


def test_messages_that_are_not_mappings_are_a_clear_error_before_any_call(
    tmp_path: Path,
) -> None:
    client, fake = open_client(tmp_path / "c")
    for bad in (["just a string"], "not a list", [42], None):
        with pytest.raises(ConfigurationError, match="messages"):
            client.chat.completions.create(model=MODEL, messages=bad, cache=opts(["a"]))
    assert fake.calls == []
    client.close()


# -- fault 5: empty and blank keywords ----------------------------------------------------------


@pytest.mark.parametrize("keywords", [None, [], [""], ["  "], ["", " \t\n", "\u3000"]], ids=repr)
def test_empty_and_blank_keywords_are_refused_before_any_call(
    tmp_path: Path, keywords: Any
) -> None:
    client, fake = open_client(tmp_path / "c")
    with pytest.raises(ConfigurationError, match="keywords"):
        client.chat.completions.create(model=MODEL, messages=messages(["x"]), cache=opts(keywords))
    assert fake.calls == [] and client.cache.partitions() == []
    client.close()


def test_a_blank_slot_among_real_keywords_is_fine(tmp_path: Path) -> None:
    client, _ = open_client(tmp_path / "c")
    _, a = ask(client, ["Tree", "", "Idle"])
    _, b = ask(client, ["Tree", "  ", "Awake"])
    assert (a.outcome, b.outcome) == ("miss", "miss") and a.embed_text == "Tree  Idle"
    client.close()


# -- fault 9 and 10: settings ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "name", "hint"),
    [
        (lambda: CacheConfig(treshold=0.95), "treshold", "threshold"),
        (lambda: CacheConfig(max_attempt=3), "max_attempt", "max_attempts"),
        (lambda: CacheConfig(from_a_newer_version=True), "from_a_newer_version", None),
        (lambda: CategoryPolicy(bypas=True), "bypas", "bypass"),
        (lambda: CacheOptions(category="c", keyword=["a"]), "keyword", "keywords"),
        (lambda: CacheOptions(category="c", agent_name="Ada"), "agent_name", None),
    ],
)
def test_unknown_settings_are_refused_naming_the_valid_ones(
    make: Any, name: str, hint: str | None
) -> None:
    with pytest.raises(ValidationError) as err:
        make()
    message = str(err.value)
    assert repr(name) in message and "valid settings are:" in message
    if hint is not None:
        assert f"did you mean {hint!r}" in message


def test_with_cache_refuses_unknown_and_invalid_settings(tmp_path: Path) -> None:
    client, _ = open_client(tmp_path / "c")
    with pytest.raises(ValidationError, match="did you mean 'threshold'"):
        client.with_cache(treshold=0.95)
    with pytest.raises(ValidationError):
        client.with_cache(threshold=7.0)
    assert client.with_cache(threshold=0.5).cache.config.threshold == 0.5
    client.close()


@pytest.mark.parametrize(
    "keywords",
    [5, 2.5, b"bytes", {"a": 1}, [1, 2], [None], object()],
    # A name rather than repr for the object: its address differs between processes.
    ids=lambda v: type(v).__name__ if type(v) is object else repr(v),
)
def test_keywords_of_the_wrong_type_are_a_validation_error(keywords: Any) -> None:
    with pytest.raises(ValidationError, match="keywords"):
        CacheOptions(category="c", keywords=keywords)


# -- fault 7: the recorder never loses a paid answer --------------------------------------------


def test_a_call_the_recorder_cannot_write_still_returns_its_answer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client, fake = open_client(tmp_path / "c", recorder=tmp_path / "rec.jsonl")
    with caplog.at_level(logging.WARNING, logger="llmcache"):
        content, info = ask(client, ["tree", "idle"], metadata={"o": object()})
    assert content is not None and len(fake.calls) == 1
    assert info.record_failed
    assert info.store_failed  # the entry's metadata cannot be written either
    assert "could not record" in caplog.text
    assert client.recorder is not None and client.recorder.failures == 1
    # A sound call afterwards is recorded as usual, on a line of its own.
    ask(client, ["another", "one"])
    client.close()
    (record,) = read_records(tmp_path / "rec.jsonl")
    assert record.keywords == ["another", "one"]
    assert client.cache.stats().total.record_failures == 1


def test_a_closed_or_failing_recorder_file_never_breaks_a_call(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "rec.jsonl")
    client, _ = open_client(tmp_path / "c")
    client.recorder = recorder
    recorder.close()  # e.g. closed by another part of the program
    content, info = ask(client, ["tree", "idle"])
    assert content and info.record_failed and recorder.failures == 1
    client.close()


def test_invalid_attempts_that_cannot_be_recorded_are_counted_too(tmp_path: Path) -> None:
    from llmcache.testing import FakeOpenAI, scripted

    fake = FakeOpenAI(scripted(["not json", json.dumps({"score": 3})]))
    client, _ = open_client(tmp_path / "c", fake, recorder=tmp_path / "rec.jsonl")
    _, info = client.chat.completions.create_with_info(
        model=MODEL,
        messages=[{"role": "user", "content": "rate \udc80"}],
        cache=opts(["rate"], validator=lambda text: json.loads(text)),
    )
    assert info.attempts == 2 and info.record_failed
    assert client.recorder is not None and client.recorder.failures == 2
    client.close()


def test_stored_text_round_trips_exactly(tmp_path: Path) -> None:
    client, _ = open_client(tmp_path / "c")
    text = "".join(ODD_TEXTS.values())
    ask(client, [text])
    (partition,) = client.cache.partitions()
    (entry,) = client.cache.entries(partition.key)
    assert entry.keywords == (text,)
    assert isinstance(entry, CacheEntry) and entry.checksum is not None
    client.close()


# -- what never reaches the disk ---------------------------------------------------------------


def test_no_secret_and_no_pickle_reaches_the_disk(tmp_path: Path) -> None:
    import sqlite3

    import diskcache

    from llmcache.testing import FakeOpenAI

    secret = "sk-test-0123456789abcdef"
    fake = FakeOpenAI()
    fake.api_key = secret
    fake.base_url = f"https://user:{secret}@llm.example/v1"
    client, _ = open_client(tmp_path / "c", fake, recorder=tmp_path / "rec.jsonl")
    for keywords in (["tree", "idle"], ["tree", "idle"], ["cafe", "open"]):
        client.chat.completions.create(
            model=MODEL,
            messages=messages(keywords),
            extra_headers={"Authorization": f"Bearer {secret}"},
            timeout=30,
            cache=opts(keywords),
        )
    assert client.api_key == secret  # the wrapper delegates; it does not keep a copy
    client.close()
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "cache.db" for p in files) and any(p.suffix == ".idx" for p in files)
    for path in files:
        assert secret.encode() not in path.read_bytes(), path
    with sqlite3.connect(tmp_path / "c" / "store" / "cache.db") as db:
        modes = {m for (m,) in db.execute("SELECT DISTINCT mode FROM Cache")}
    assert diskcache.core.MODE_PICKLE not in modes
