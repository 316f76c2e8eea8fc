"""CachedLLM / AsyncCachedLLM: drop-in behaviour, modes, modifiers, validation, accounting."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion
from pydantic import BaseModel

from llmcache import (
    AsyncCachedLLM,
    CacheConfig,
    CachedLLM,
    CacheOptions,
    CategoryPolicy,
    EmbedMode,
    Mode,
    SemanticCache,
)
from llmcache.errors import ConfigurationError, EmbedderMismatchError, InvalidResponseError
from llmcache.modifiers import Choose, ModifyContext, Read, Revise
from llmcache.recording import read_records
from llmcache.testing import AsyncFakeOpenAI, FakeOpenAI, HashEmbedder, scripted

MSGS = [
    {"role": "system", "content": "You rate how important a memory is."},
    {"role": "user", "content": "Memory: Tree in Victoria Park is Idle. Rate 1-10."},
]


def make(
    tmp_path: Path, fake: FakeOpenAI | None = None, **config: Any
) -> tuple[CachedLLM, FakeOpenAI]:
    fake = fake or FakeOpenAI()
    cache = SemanticCache(
        tmp_path / "c", embedder=HashEmbedder(dim=64), config=CacheConfig(**config)
    )
    return CachedLLM(fake, cache=cache, recorder=tmp_path / "rec.jsonl"), fake


def opts(**kw: Any) -> CacheOptions:
    base: dict[str, Any] = {
        "category": "importance",
        "agent": "Liam Oliver",
        "keywords": ["Tree in Victoria Park is Idle"],
    }
    base.update(kw)
    return CacheOptions(**base)


# -- drop-in ---------------------------------------------------------------------------------


def test_keywords_reach_the_real_create_verbatim(tmp_path: Path) -> None:
    client, fake = make(tmp_path)
    rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    client.chat.completions.create(
        model="gpt-4o-mini", messages=MSGS, temperature=0.7, response_format=rf, seed=3,
        cache=opts(),
    )  # fmt: skip
    sent = fake.calls[0]
    assert "cache" not in sent
    assert sent["temperature"] == 0.7
    assert sent["response_format"] is rf
    assert sent["seed"] == 3
    assert sent["messages"] == MSGS


def test_call_without_cache_options_passes_straight_through(tmp_path: Path) -> None:
    client, fake = make(tmp_path)
    for _ in range(2):
        r = client.chat.completions.create(model="m", messages=MSGS, temperature=0)
        assert isinstance(r, ChatCompletion)
    assert len(fake.calls) == 2  # nothing cached
    assert fake.calls[0] == {"model": "m", "messages": MSGS, "temperature": 0}
    assert client.cache.stats().tables == []


def test_cache_bypass_reason_says_before_a_call_what_the_cache_cannot_answer(
    tmp_path: Path,
) -> None:
    client, fake = make(tmp_path)
    completions, responses = client.chat.completions, client.responses
    assert completions.cache_bypass_reason(model="m", messages=MSGS) is None
    assert completions.cache_bypass_reason(model="m", messages=MSGS, stream=True) is None
    reason = completions.cache_bypass_reason(model="m", messages=MSGS, n=2)
    assert reason is not None and "n > 1" in reason
    assert responses.cache_bypass_reason(model="m", input="hi") is None
    reason = responses.cache_bypass_reason(model="m", input="hi", previous_response_id="resp_1")
    assert reason is not None and "previous_response_id" in reason
    reason = responses.cache_bypass_reason(model="m", input="hi", tools=[{"type": "web_search"}])
    assert reason is not None and "web_search" in reason
    twin = AsyncCachedLLM(AsyncFakeOpenAI(), cache=client.cache)
    assert twin.chat.completions.cache_bypass_reason(model="m", messages=MSGS, n=3) is not None
    assert fake.calls == []  # asking sends nothing


def test_store_false_serves_hits_but_stores_no_answer(tmp_path: Path) -> None:
    client, fake = make(tmp_path)
    create = client.chat.completions.create_with_info
    _, info = create(model="m", messages=MSGS, cache=opts(store=False))
    assert info.outcome == "miss" and info.entry_id is None
    assert client.cache.partitions() == []
    _, info = create(model="m", messages=MSGS, cache=opts(mode=Mode.COLLECT, store=False))
    assert info.outcome == "collect" and client.cache.partitions() == []
    _, info = create(model="m", messages=MSGS, cache=opts())  # an ordinary miss stores
    assert info.outcome == "miss" and info.entry_id is not None
    _, info = create(model="m", messages=MSGS, cache=opts(store=False))
    assert info.outcome == "hit"  # a no-store call is still served what is there
    assert len(fake.calls) == 3
    (partition,) = client.cache.partitions()
    assert client.cache.backend.count(partition.key) == 1
    total = client.cache.stats().total
    assert (total.misses, total.collects, total.hits) == (2, 1, 1)
    client.close()


def test_other_attributes_delegate_to_the_wrapped_client(tmp_path: Path) -> None:
    client, fake = make(tmp_path)
    fake.chat.something_else = "chat-attr"  # type: ignore[attr-defined]
    fake.chat.completions.extra = "completions-attr"  # type: ignore[attr-defined]
    assert client.api_key == "fake-key"
    assert client.base_url == fake.base_url
    assert client.chat.something_else == "chat-attr"
    assert client.chat.completions.extra == "completions-attr"


def test_hit_is_a_real_chat_completion_and_info_says_how(tmp_path: Path) -> None:
    client, fake = make(tmp_path)
    r1, i1 = client.chat.completions.create_with_info(model="m", messages=MSGS, cache=opts())
    r2, i2 = client.chat.completions.create_with_info(model="m", messages=MSGS, cache=opts())
    assert len(fake.calls) == 1
    assert (i1.outcome, i2.outcome) == ("miss", "hit")
    assert isinstance(r2, ChatCompletion)
    assert r2.choices[0].message.content == r1.choices[0].message.content
    assert r2.id != r1.id and r2.id.startswith("chatcmpl-llmcache-")
    assert i2.similarity is not None and i2.similarity.cosine == pytest.approx(1.0, abs=1e-5)
    assert i2.similarity.normalized == pytest.approx(1.0, abs=1e-5)
    assert i2.modifier == "read" and i2.avoided_usd > 0 and i2.cost_usd == 0
    assert r2.usage is not None and r2.usage.total_tokens == 0  # nothing was spent


def test_n_above_one_bypasses_the_cache(tmp_path: Path) -> None:
    # (stream=True is cached: tests/test_stream.py)
    client, fake = make(tmp_path)
    client.chat.completions.create(model="m", messages=MSGS, n=2, cache=opts())
    client.chat.completions.create(model="m", messages=MSGS, n=2, cache=opts())
    assert len(fake.calls) == 2


# -- tables ----------------------------------------------------------------------------------


def test_tables_split_by_agent_and_output_affecting_params(tmp_path: Path) -> None:
    client, fake = make(tmp_path)
    create = client.chat.completions.create_with_info
    assert create(model="m", messages=MSGS, cache=opts())[1].outcome == "miss"
    assert create(model="m", messages=MSGS, cache=opts(agent="Ethan Wilson"))[1].outcome == "miss"
    assert create(model="m", messages=MSGS, temperature=1.0, cache=opts())[1].outcome == "miss"
    assert create(model="m2", messages=MSGS, cache=opts())[1].outcome == "miss"
    assert create(model="m", messages=MSGS, cache=opts(category="other"))[1].outcome == "miss"
    # Parameters that do not change the answer do not split tables.
    assert create(model="m", messages=MSGS, user="u1", cache=opts())[1].outcome == "hit"
    assert len(fake.calls) == 5


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    calls=st.lists(
        st.tuples(
            st.sampled_from(["importance", "plan", "location"]),
            st.sampled_from(["Alice", "Ethan", "Mary"]),
            st.sampled_from([0.0, 1.0]),
            st.sampled_from(["park tree", "kitchen sink", "coffee machine", "school desk"]),
        ),
        min_size=1,
        max_size=25,
    )
)
def test_property_no_lookup_returns_another_partitions_entry(
    tmp_path_factory: pytest.TempPathFactory, calls: list[tuple[str, str, float, str]]
) -> None:
    tmp = tmp_path_factory.mktemp("prop")

    def responder(request: dict[str, Any]) -> str:
        # Every answer names the partition it was made for.
        return str(request["messages"][0]["content"])

    client, _ = make(tmp, FakeOpenAI(responder), mode=Mode.SERVE)
    for category, agent, temperature, keyword in calls:
        tag = json.dumps([category, agent, temperature])
        r = client.chat.completions.create(
            model="m",
            messages=[{"role": "system", "content": tag}, {"role": "user", "content": keyword}],
            temperature=temperature,
            cache=CacheOptions(category=category, agent=agent, keywords=[keyword]),
        )
        assert r.choices[0].message.content == tag
    client.close()


# -- embedding modes -------------------------------------------------------------------------


def test_keyword_mode_without_keywords_is_a_clear_error(tmp_path: Path) -> None:
    client, fake = make(tmp_path)
    with pytest.raises(ConfigurationError, match="keywords"):
        client.chat.completions.create(model="m", messages=MSGS, cache=opts(keywords=None))
    assert fake.calls == []


def test_keyword_text_is_keywords_joined_by_single_spaces(tmp_path: Path) -> None:
    client, _ = make(tmp_path)
    _, info = client.chat.completions.create_with_info(
        model="m", messages=MSGS, cache=opts(keywords=["A", "B", "C"])
    )
    assert info.embed_text == "A B C"


def test_full_mode_embeds_all_messages_not_only_the_last(tmp_path: Path) -> None:
    client, fake = make(tmp_path, embed=EmbedMode.FULL)
    other_system = [{"role": "system", "content": "Something else entirely."}, MSGS[1]]
    _, i1 = client.chat.completions.create_with_info(model="m", messages=MSGS, cache=opts())
    _, i2 = client.chat.completions.create_with_info(model="m", messages=other_system, cache=opts())
    assert i1.embed_text is not None and "You rate how important" in i1.embed_text
    assert i2.outcome == "miss"  # same last message, different system prompt: not the same text
    assert len(fake.calls) == 2


# -- modes -----------------------------------------------------------------------------------


def test_online_threshold_separates_hits_from_misses(tmp_path: Path) -> None:
    client, _fake = make(tmp_path, threshold=0.99)
    create = client.chat.completions.create_with_info
    create(model="m", messages=MSGS, cache=opts(keywords=["red apple on the table"]))
    _, near = create(model="m", messages=MSGS, cache=opts(keywords=["green pear in the garden"]))
    assert near.outcome == "miss" and near.similarity is not None
    assert near.similarity.cosine < 0.99 and near.threshold == 0.99
    _, lax = create(
        model="m", messages=MSGS, cache=opts(keywords=["green pear in the garden!"], threshold=-1.0)
    )
    assert lax.outcome == "hit"


def test_collect_always_calls_and_stores(tmp_path: Path) -> None:
    client, fake = make(tmp_path, mode=Mode.COLLECT)
    for _ in range(3):
        _, info = client.chat.completions.create_with_info(model="m", messages=MSGS, cache=opts())
        assert info.outcome == "collect"
    assert len(fake.calls) == 3
    (partition,) = client.cache.partitions()
    assert len(client.cache.entries(partition.key)) == 3


def test_serve_returns_best_candidate_whatever_the_similarity(tmp_path: Path) -> None:
    client, fake = make(tmp_path, mode=Mode.SERVE)
    create = client.chat.completions.create_with_info
    _, first = create(model="m", messages=MSGS, cache=opts(keywords=["alpha"]))
    assert first.outcome == "miss"  # empty table: a real call, stored
    _, info = create(model="m", messages=MSGS, cache=opts(keywords=["zzz unrelated"]))
    assert info.outcome == "hit" and len(fake.calls) == 1


def test_off_and_bypass_call_validate_and_never_store(tmp_path: Path) -> None:
    fake = FakeOpenAI(scripted(["not json", '{"score": 3}']))
    client, _ = make(
        tmp_path, fake, categories={"dialogue": CategoryPolicy(bypass=True, validator=Score)}
    )
    _, info = client.chat.completions.create_with_info(
        model="m", messages=MSGS, cache=opts(category="dialogue")
    )
    assert info.outcome == "bypass" and info.attempts == 2
    assert client.cache.partitions() == []
    off = client.with_cache(mode=Mode.OFF)
    _, info = off.chat.completions.create_with_info(model="m", messages=MSGS, cache=opts())
    assert info.outcome == "bypass" and client.cache.partitions() == []


def test_with_cache_returns_a_copy_sharing_the_tables(tmp_path: Path) -> None:
    client, fake = make(tmp_path)
    client.chat.completions.create(model="m", messages=MSGS, cache=opts(keywords=["a"]))
    serving = client.with_cache(mode=Mode.SERVE)
    assert client.cache.config.mode is Mode.ONLINE and serving.cache.config.mode is Mode.SERVE
    _, info = serving.chat.completions.create_with_info(
        model="m", messages=MSGS, cache=opts(keywords=["something far away"])
    )
    assert info.outcome == "hit" and len(fake.calls) == 1


def test_with_cache_makes_its_copy_through_the_constructor(tmp_path: Path) -> None:
    class Counted(CachedLLM):
        made = 0

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            type(self).made += 1
            super().__init__(*args, **kwargs)

    fake = FakeOpenAI()
    cache = SemanticCache(tmp_path / "c", embedder=HashEmbedder(dim=64))
    client = Counted(fake, cache=cache, recorder=tmp_path / "rec.jsonl")
    serving = client.with_cache(mode=Mode.SERVE)
    assert isinstance(serving, Counted) and Counted.made == 2
    assert serving.recorder is client.recorder and serving.cache.backend is cache.backend
    assert serving.chat.completions._owner is serving  # its resources are its own
    client.chat.completions.create(model="m", messages=MSGS, cache=opts(keywords=["a"]))
    serving.chat.completions.create(model="m", messages=MSGS, cache=opts(keywords=["far"]))
    # One ledger: the copy's call is counted without closing the copy.
    assert (cache.stats().total.misses, cache.stats().total.hits) == (1, 1)
    assert [r.outcome for r in read_records(tmp_path / "rec.jsonl")] == ["miss", "hit"]
    client.close()
    async_client = AsyncCachedLLM(AsyncFakeOpenAI(), tmp_path / "d", embedder=HashEmbedder(dim=8))
    assert type(async_client.with_cache(threshold=0.5)) is AsyncCachedLLM
    async_client.close()


# -- modifiers -------------------------------------------------------------------------------


def test_choose_maps_the_cached_choice_onto_the_querys_options(tmp_path: Path) -> None:
    def extract(content: str, options: Any) -> str:
        return str(json.loads(content)["area"])

    def render(content: str, option: str) -> str:
        return json.dumps({"area": option})

    fake = FakeOpenAI(lambda r: json.dumps({"area": "kitchen in Wilson Family House"}))
    client, _ = make(
        tmp_path, fake, mode=Mode.SERVE,
        categories={"location": CategoryPolicy(modifier=Choose(extract, render))},
    )  # fmt: skip
    create = client.chat.completions.create_with_info
    create(
        model="m", messages=MSGS,
        cache=opts(category="location", keywords=["cook dinner"],
                   options=["kitchen in Wilson Family House", "main bathroom"]),
    )  # fmt: skip
    query_options = ["master bedroom in Oliver Family House", "kitchen in Oliver Family House"]
    r, info = create(
        model="m", messages=MSGS,
        cache=opts(category="location", keywords=["cook lunch"], options=query_options),
    )  # fmt: skip
    assert info.outcome == "hit" and info.modifier == "choose"
    assert (
        json.loads(r.choices[0].message.content or "")["area"] == "kitchen in Oliver Family House"
    )


def test_revise_sends_the_builders_prompt_and_counts_it_as_spent(tmp_path: Path) -> None:
    def builder(ctx: ModifyContext) -> list[dict[str, Any]]:
        return [
            {
                "role": "user",
                "content": f"REVISE: {ctx.candidate.entry.content} FOR {ctx.options.keywords}",
            }
        ]

    def responder(request: dict[str, Any]) -> str:
        last = request["messages"][-1]["content"]
        return "revised plan" if last.startswith("REVISE") else "original plan"

    fake = FakeOpenAI(responder)
    client, _ = make(
        tmp_path, fake, mode=Mode.SERVE,
        categories={"plan": CategoryPolicy(modifier=Revise(builder))},
    )  # fmt: skip
    create = client.chat.completions.create_with_info
    create(model="m", messages=MSGS, cache=opts(category="plan", keywords=["monday"]))
    r, info = create(model="m", messages=MSGS, cache=opts(category="plan", keywords=["tuesday"]))
    assert info.outcome == "hit" and info.modifier == "revise"
    assert r.choices[0].message.content == "revised plan"
    assert "original plan" in fake.calls[1]["messages"][0]["content"]
    assert info.usage.total_tokens > 0 and info.cost_usd > 0
    assert r.usage is not None and r.usage.total_tokens == info.usage.total_tokens
    table = client.cache.stats().tables[0]
    assert table.revise_tokens == info.usage.total_tokens and table.modifiers == {"revise": 1}


def test_modified_answer_failing_validation_becomes_a_miss(tmp_path: Path) -> None:
    fake = FakeOpenAI(scripted(['{"score": 5}', '{"score": 7}']))
    client, _ = make(
        tmp_path, fake, mode=Mode.SERVE,
        categories={"importance": CategoryPolicy(modifier=Choose(), validator=Score)},
    )  # fmt: skip
    create = client.chat.completions.create_with_info
    create(model="m", messages=MSGS, cache=opts(options=["a", "b"]))
    _, info = create(model="m", messages=MSGS, cache=opts(keywords=["x"], options=["a", "b"]))
    # Choose answers with a bare option, which is not a valid Score: the call is a real miss.
    assert info.outcome == "miss" and len(fake.calls) == 2


# -- validation, retry, escalation -----------------------------------------------------------


class Score(BaseModel):
    score: int


def test_invalid_answers_are_resubmitted_recorded_and_never_stored(tmp_path: Path) -> None:
    fake = FakeOpenAI(scripted(["```oops", "{}", '{"score": "x"}', '{"score": 4}']))
    client, _ = make(tmp_path, fake, categories={"importance": CategoryPolicy(validator=Score)})
    r, info = client.chat.completions.create_with_info(model="m", messages=MSGS, cache=opts())
    assert info.attempts == 4 and not info.escalated
    assert r.choices[0].message.content == '{"score": 4}'
    (partition,) = client.cache.partitions()
    assert [e.content for e in client.cache.entries(partition.key)] == ['{"score": 4}']
    client.close()
    lines = read_records(tmp_path / "rec.jsonl", include_invalid=True)
    invalid = [x for x in lines if x.kind == "invalid_attempt"]
    assert [x.attempt for x in invalid] == [1, 2, 3]
    assert all(x.resubmission and not x.valid and x.error for x in invalid)
    (call,) = read_records(tmp_path / "rec.jsonl")
    assert call.attempts == 4 and call.valid and call.response == '{"score": 4}'


def test_a_seeded_request_is_resubmitted_with_the_next_seeds(tmp_path: Path) -> None:
    # A provider that honours the seed answers one (prompt, seed) the same way every time: the
    # same seed again would buy the same invalid answer. The next seeds keep a run reproducible.
    def responder(request: dict[str, Any]) -> str:
        return '{"score": 4}' if request["seed"] == 0 else "garbage"

    fake = FakeOpenAI(responder)
    client, _ = make(
        tmp_path, fake, max_attempts=2, superior_model="big", escalation_attempts=2,
        categories={"importance": CategoryPolicy(validator=Score)},
    )  # fmt: skip
    _r, info = client.chat.completions.create_with_info(
        model="m", messages=MSGS, seed=2**31 - 1, cache=opts()
    )
    # The next seed wraps into [0, 2**31), where it is valid: no escalation.
    assert [(c["model"], c["seed"]) for c in fake.calls] == [("m", 2**31 - 1), ("m", 0)]
    assert info.attempts == 2 and not info.escalated
    # Escalated attempts start again from the call's own seed on the other model.
    fake.calls.clear()
    with pytest.raises(InvalidResponseError):
        client.chat.completions.create(
            model="m", messages=MSGS, seed=5, cache=opts(keywords=["another memory"])
        )
    assert [(c["model"], c["seed"]) for c in fake.calls] == [
        ("m", 5), ("m", 6), ("big", 5), ("big", 6)
    ]  # fmt: skip
    # A request without a seed is resubmitted unchanged.
    fake2 = FakeOpenAI(scripted(["garbage", '{"score": 5}']))
    client2, _ = make(
        tmp_path / "b", fake2, categories={"importance": CategoryPolicy(validator=Score)}
    )
    client2.chat.completions.create(model="m", messages=MSGS, cache=opts())
    assert [("seed" in c) for c in fake2.calls] == [False, False]


def test_escalation_goes_to_the_superior_model_after_max_attempts(tmp_path: Path) -> None:
    def responder(request: dict[str, Any]) -> str:
        return '{"score": 9}' if request["model"] == "gpt-4o" else "garbage"

    fake = FakeOpenAI(responder)
    client, _ = make(
        tmp_path, fake, max_attempts=3, superior_model="gpt-4o",
        categories={"importance": CategoryPolicy(validator=Score)},
    )  # fmt: skip
    _r, info = client.chat.completions.create_with_info(
        model="gpt-4o-mini", messages=MSGS, cache=opts()
    )
    assert info.escalated and info.attempts == 4
    assert [c["model"] for c in fake.calls] == ["gpt-4o-mini"] * 3 + ["gpt-4o"]
    assert client.cache.stats().total.escalations == 1


def test_giving_up_raises_and_stores_nothing(tmp_path: Path) -> None:
    fake = FakeOpenAI(lambda r: "never valid")
    client, _ = make(
        tmp_path, fake, max_attempts=2, superior_model="big", escalation_attempts=1,
        categories={"importance": CategoryPolicy(validator=Score)},
    )  # fmt: skip
    with pytest.raises(InvalidResponseError) as err:
        client.chat.completions.create(model="m", messages=MSGS, cache=opts())
    assert err.value.attempts == 3 and err.value.last_content == "never valid"
    assert client.cache.partitions() == []
    total = client.cache.stats().total
    assert total.attempts == 3
    # The refused attempts were paid for: their tokens count as spent.
    assert err.value.usage is not None and err.value.usage.total_tokens > 0
    assert total.tokens_spent == err.value.usage.total_tokens and total.usd_spent > 0


# -- failures of the cache itself ------------------------------------------------------------


def test_store_failure_never_breaks_the_call(tmp_path: Path) -> None:
    client, _fake = make(tmp_path)

    def broken_add(entry: Any) -> int:
        raise OSError("disk full")

    client.cache.backend.add = broken_add  # type: ignore[method-assign]
    r, info = client.chat.completions.create_with_info(model="m", messages=MSGS, cache=opts())
    assert r.choices[0].message.content and info.store_failed
    assert client.cache.stats().total.store_failures == 1


def test_reopening_with_another_embedder_is_refused(tmp_path: Path) -> None:
    SemanticCache(tmp_path / "c", embedder=HashEmbedder(dim=64)).close()
    with pytest.raises(EmbedderMismatchError, match="embedder"):
        SemanticCache(tmp_path / "c", embedder=HashEmbedder(dim=32))


def test_entries_survive_reopening(tmp_path: Path) -> None:
    client, _fake = make(tmp_path)
    client.chat.completions.create(model="m", messages=MSGS, cache=opts())
    client.close()
    again, fake2 = make(tmp_path)
    _, info = again.chat.completions.create_with_info(model="m", messages=MSGS, cache=opts())
    assert info.outcome == "hit" and fake2.calls == []
    assert again.cache.stats().total.lookups == 2  # counters persisted too


# -- accounting ------------------------------------------------------------------------------


def test_stats_count_hits_tokens_and_dollars(tmp_path: Path) -> None:
    client, fake = make(tmp_path)
    for _ in range(3):
        client.chat.completions.create(model="gpt-4o-mini", messages=MSGS, cache=opts())
    total = client.cache.stats().total
    assert (total.lookups, total.hits, total.misses) == (3, 2, 1)
    usage = fake.answer({"model": "x", "messages": MSGS}).usage
    assert usage is not None
    expected = (usage.prompt_tokens * 0.15 + usage.completion_tokens * 0.60) / 1e6
    assert total.usd_spent == pytest.approx(expected)
    assert total.tokens_spent == usage.total_tokens
    assert total.usd_avoided > 0 and total.tokens_avoided > 0
    assert "importance" in client.cache.stats().render()


def test_missing_usage_is_estimated_and_says_how(tmp_path: Path) -> None:
    client, _ = make(tmp_path, FakeOpenAI(report_usage=False))
    _, info = client.chat.completions.create_with_info(model="m", messages=MSGS, cache=opts())
    assert info.usage.source in ("o200k_base", "chars/4") and info.usage.prompt_tokens > 10
    client.close()
    (rec,) = read_records(tmp_path / "rec.jsonl")
    assert rec.usage_source == info.usage.source


def test_recorder_writes_what_experiments_need(tmp_path: Path) -> None:
    client, _ = make(tmp_path)
    meta = {"sim_time": "2024-02-13T09:00", "observed_actors": 12}
    client.chat.completions.create(model="m", messages=MSGS, cache=opts(metadata=meta))
    client.chat.completions.create(model="m", messages=MSGS, cache=opts(metadata=meta))
    client.close()
    first, second = read_records(tmp_path / "rec.jsonl")
    assert (first.outcome, second.outcome) == ("miss", "hit")
    assert first.category == "importance" and first.agent == "Liam Oliver"
    assert first.keywords == ["Tree in Victoria Park is Idle"]
    assert first.metadata == meta and first.messages == MSGS and first.prompt_tokens > 0
    assert second.similarity_normalized == pytest.approx(1.0, abs=1e-5)


# A line as the current recorder writes it, and one from the first recorder (before
# CacheOptions.constraints existed): recorded datasets outlive the code that wrote them.
_LINE_NOW = (
    '{"kind":"call","ts":1718000000.5,"category":"rev","agent":"A","keywords":["tree idle now"],'
    '"options":null,"embed_text":"tree idle now","messages":[{"role":"user","content":"rate it"}],'
    '"model":"gpt-4o-mini","params":{"model":"gpt-4o-mini","temperature":0.1},"constraints":{},'
    '"response":"7","prompt_tokens":5,"completion_tokens":4,"usage_source":"api",'
    '"attempts":0,"attempt":null,"resubmission":false,"valid":true,"escalated":false,'
    '"error":null,"outcome":"hit","similarity":0.834,"similarity_normalized":0.917,'
    '"modifier":"revise","entry_id":1,"cost_usd":3.15e-06,"avoided_usd":4.05e-06,'
    '"latency_s":0.002,"metadata":{"i":5}}'
)
_LINE_FIRST_VERSION = (
    '{"kind":"invalid_attempt","ts":1717000000.0,"category":"importance","agent":"B",'
    '"keywords":["tree idle"],"options":null,"embed_text":null,"messages":[],"model":"m",'
    '"params":{"model":"m"},"response":"oops","prompt_tokens":3,"completion_tokens":1,'
    '"usage_source":"api","attempts":1,"attempt":1,"resubmission":true,"valid":false,'
    '"escalated":false,"error":"not JSON","outcome":"miss","similarity":null,'
    '"similarity_normalized":null,"modifier":null,"entry_id":null,"cost_usd":0.0,'
    '"avoided_usd":0.0,"latency_s":0.0,"metadata":{}}'
)


def test_recorded_lines_of_earlier_versions_still_read(tmp_path: Path) -> None:
    path = tmp_path / "old.jsonl"
    path.write_text(f"{_LINE_NOW}\n{_LINE_FIRST_VERSION}\n", encoding="utf-8")
    now, first = read_records(path, include_invalid=True)
    assert (now.outcome, now.modifier, now.similarity) == ("hit", "revise", 0.834)
    assert now.metadata == {"i": 5} and now.constraints == {}
    assert (first.kind, first.attempt, first.error) == ("invalid_attempt", 1, "not JSON")
    assert first.constraints == {}  # a field the first version did not write
    assert read_records(path) == [now]


def test_the_recorder_still_writes_the_same_fields(tmp_path: Path) -> None:
    fake = FakeOpenAI(scripted(["oops", '{"score": 4}']))
    client, _ = make(tmp_path, fake, categories={"importance": CategoryPolicy(validator=Score)})
    client.chat.completions.create(model="m", messages=MSGS, cache=opts())
    client.close()
    lines = (tmp_path / "rec.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["kind"] for line in lines] == ["invalid_attempt", "call"]
    assert all(set(json.loads(line)) == set(json.loads(_LINE_NOW)) for line in lines)


def test_the_ledger_and_the_recorder_count_the_same_call_info(tmp_path: Path) -> None:
    # One CallInfo per call feeds the caller, the ledger and the recorder: their figures agree.
    def revision(ctx: ModifyContext) -> list[dict[str, Any]]:
        return [{"role": "user", "content": "Revise: " + ctx.candidate.entry.content}]

    fake = FakeOpenAI(lambda r: '{"score": 5}')
    client, _ = make(
        tmp_path, fake, threshold=0.0,
        categories={"importance": CategoryPolicy(modifier=Revise(revision))},
    )  # fmt: skip
    create = client.chat.completions.create_with_info
    infos = [
        create(model="gpt-4o-mini", messages=MSGS, cache=opts(keywords=[k]))[1]
        for k in ("tree idle", "the tree is idle", "bob cooks")
    ]
    assert [i.outcome for i in infos] == ["miss", "hit", "hit"]
    assert all(i.revise_tokens > 0 for i in infos[1:]) and infos[0].revise_tokens == 0
    (table,) = client.cache.stats().tables
    client.close()
    stats = table
    assert stats.usd_spent == pytest.approx(sum(i.cost_usd for i in infos))
    assert stats.usd_avoided == pytest.approx(sum(i.avoided_usd for i in infos))
    assert stats.tokens_avoided == sum(i.tokens_avoided for i in infos) > 0
    assert stats.revise_tokens == sum(i.revise_tokens for i in infos)
    assert stats.embed_tokens == sum(i.embed_tokens for i in infos) > 0
    assert stats.modifiers == {"revise": 2}
    lines = read_records(tmp_path / "rec.jsonl")
    assert [(r.outcome, r.cost_usd, r.avoided_usd, r.modifier) for r in lines] == [
        (i.outcome, i.cost_usd, i.avoided_usd, i.modifier) for i in infos
    ]
    assert [r.similarity for r in lines[1:]] == [i.similarity.cosine for i in infos[1:]]  # type: ignore[union-attr]


# -- async twin ------------------------------------------------------------------------------


def test_async_twin_shares_the_core(tmp_path: Path) -> None:
    async def main() -> tuple[str, str, int]:
        fake = AsyncFakeOpenAI()
        cache = SemanticCache(tmp_path / "c", embedder=HashEmbedder(dim=64))
        client = AsyncCachedLLM(fake, cache=cache)
        _, a = await client.chat.completions.create_with_info(
            model="m", messages=MSGS, cache=opts()
        )
        r = await client.chat.completions.create(model="m", messages=MSGS, cache=opts())
        assert isinstance(r, ChatCompletion)
        plain = await client.chat.completions.create(model="m", messages=MSGS)
        assert isinstance(plain, ChatCompletion)
        _, b = await client.chat.completions.create_with_info(
            model="m", messages=MSGS, cache=opts()
        )
        client.close()
        return a.outcome, b.outcome, len(fake.calls)

    assert asyncio.run(main()) == ("miss", "hit", 2)


def test_read_is_the_default_modifier(tmp_path: Path) -> None:
    client, _ = make(tmp_path, categories={"importance": CategoryPolicy(modifier=Read())})
    client.chat.completions.create(model="m", messages=MSGS, cache=opts())
    _, info = client.chat.completions.create_with_info(model="m", messages=MSGS, cache=opts())
    assert info.modifier == "read"


def test_corrupt_entry_on_disk_is_a_counted_miss_and_is_removed(tmp_path: Path) -> None:
    import diskcache

    client, _ = make(tmp_path)
    client.chat.completions.create(model="m", messages=MSGS, cache=opts())
    (partition,) = client.cache.partitions()
    (entry,) = client.cache.entries(partition.key)
    client.close()
    # Damage the stored JSON behind the cache's back, as a crash or a bad disk would.
    raw = diskcache.Cache(str(tmp_path / "c" / "store"))
    key = f"e:{partition.key}:{entry.id:012d}"
    assert key in raw
    raw.set(key, '{"id": 1, "truncated')
    raw.close()
    again, _ = make(tmp_path)
    r, info = again.chat.completions.create_with_info(model="m", messages=MSGS, cache=opts())
    assert info.outcome == "miss" and info.corrupt_dropped == 1
    assert r.choices[0].message.content  # the caller still got an answer
    assert [e.id for e in again.cache.entries(partition.key)] != [entry.id]  # corrupt one gone
    _, info = again.chat.completions.create_with_info(model="m", messages=MSGS, cache=opts())
    assert info.outcome == "hit" and info.corrupt_dropped == 0
    assert again.cache.stats().total.corrupt == 1


# -- per-query constraints ---------------------------------------------------------------------


def _places_format(places: list[str]) -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": {"place": {"type": "string", "enum": places}},
        "required": ["place"],
        "additionalProperties": False,
    }
    return {"type": "json_schema", "json_schema": {"name": "place", "schema": schema}}


def _in(places: list[str]) -> Any:
    def validate(content: str) -> None:
        if json.loads(content)["place"] not in places:
            raise ValueError(f"not one of {places}")

    return validate


def test_per_query_constraints_share_a_table_and_bind_the_served_answer(tmp_path: Path) -> None:
    def responder(request: dict[str, Any]) -> str:
        # Like a constrained decoder: the answer is whatever the request's schema allows last.
        enum = request["response_format"]["json_schema"]["schema"]["properties"]["place"]["enum"]
        return json.dumps({"place": enum[-1]})

    def builder(ctx: ModifyContext) -> list[dict[str, Any]]:
        return [{"role": "user", "content": f"Revise {ctx.candidate.entry.content}"}]

    fake = FakeOpenAI(responder)
    client, _ = make(
        tmp_path, fake, mode=Mode.SERVE,
        categories={"plan": CategoryPolicy(modifier=Revise(builder))},
    )  # fmt: skip
    create = client.chat.completions.create_with_info

    def ask(places: list[str], category: str = "where") -> tuple[str, Any]:
        options = opts(
            category=category, keywords=["walk the dog"], validator=_in(places),
            constraints={"response_format": _places_format(places)},
        )  # fmt: skip
        reply, info = create(model="m", messages=MSGS, temperature=0, cache=options)
        return json.loads(reply.choices[0].message.content or "")["place"], info

    place1, info1 = ask(["Cafe", "Park"])
    assert info1.outcome == "miss" and place1 == "Park"
    assert fake.calls[0]["response_format"] == _places_format(["Cafe", "Park"])
    assert fake.calls[0]["temperature"] == 0  # the caller's keywords go out as well
    # Another query of the template, other places: the same table, and the cached "Park" is
    # allowed there too, so it is served as it is (read), with no request.
    place2, info2 = ask(["Library", "Park"])
    assert (info2.outcome, place2, len(fake.calls)) == ("hit", "Park", 1)
    assert info2.partition_key == info1.partition_key
    # A query where "Park" is not allowed: the cached answer fails this query's validator, so
    # it is a miss, asked with this query's constraint, and stored in the same table.
    place3, info3 = ask(["Library", "School"])
    assert (info3.outcome, place3) == ("miss", "School")
    assert info3.partition_key == info1.partition_key
    assert fake.calls[1]["response_format"] == _places_format(["Library", "School"])
    assert len(client.cache.stats().tables) == 1
    # A revising category: the revision request carries the new query's constraint too.
    ask(["Cafe", "Park"], category="plan")
    place5, info5 = ask(["Library", "School"], category="plan")
    assert (info5.outcome, info5.modifier, place5) == ("hit", "revise", "School")
    assert fake.calls[-1]["response_format"] == _places_format(["Library", "School"])
    assert fake.calls[-1]["messages"][0]["content"].startswith("Revise")
    # The recorder keeps each query's constraint beside the shared parameters.
    calls = [r for r in read_records(tmp_path / "rec.jsonl") if r.kind == "call"]
    assert [c.constraints["response_format"] for c in calls[:3]] == [
        _places_format(p) for p in (["Cafe", "Park"], ["Library", "Park"], ["Library", "School"])
    ]
    assert all("response_format" not in c.params for c in calls)


def test_a_parameter_given_twice_is_a_clear_error(tmp_path: Path) -> None:
    client, fake = make(tmp_path)
    options = opts(constraints={"response_format": _places_format(["Park"])})
    with pytest.raises(ConfigurationError, match="response_format given both"):
        client.chat.completions.create(
            model="m", messages=MSGS, response_format={"type": "json_object"}, cache=options
        )
    assert fake.calls == []


# -- the raw-response surface (what LangChain's ChatOpenAI sends every request through) ----


def test_with_raw_response_is_cached_like_create(tmp_path: Path) -> None:
    client, fake = make(tmp_path)
    raw = client.chat.completions.with_raw_response
    first = raw.create(model="m", messages=MSGS, cache=opts())
    second = raw.create(model="m", messages=MSGS, cache=opts())
    assert isinstance(first.parse(), ChatCompletion) and isinstance(second.parse(), ChatCompletion)
    assert (first.headers["x-llmcache"], second.headers["x-llmcache"]) == ("miss", "hit")
    assert second.info.outcome == "hit" and second.parse().choices[0].message.content
    assert len(fake.calls) == 1  # the hit asked nothing


def test_async_with_raw_response_is_cached_like_create(tmp_path: Path) -> None:
    async def main() -> tuple[str, str, int]:
        fake = AsyncFakeOpenAI()
        cache = SemanticCache(tmp_path / "c", embedder=HashEmbedder(dim=64))
        client = AsyncCachedLLM(fake, cache=cache)
        raw = client.chat.completions.with_raw_response
        a = await raw.create(model="m", messages=MSGS, cache=opts())
        b = await raw.create(model="m", messages=MSGS, cache=opts())
        assert isinstance(b.parse(), ChatCompletion)
        client.close()
        return a.headers["x-llmcache"], b.headers["x-llmcache"], len(fake.calls)

    assert asyncio.run(main()) == ("miss", "hit", 1)
