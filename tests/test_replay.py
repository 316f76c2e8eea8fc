"""Replay: a recording sent again through the real cache, the recording answering as the model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmcache import CacheConfig, CachedLLM, CacheOptions, CategoryPolicy, Mode
from llmcache import replay as replay_api
from llmcache.errors import ReplayError, ReplayInputError
from llmcache.replay import (
    RecordedUpstream,
    ReplayCall,
    equivalences_for,
    read_calls,
    read_recording,
    replay,
)
from llmcache.testing import FakeOpenAI, HashEmbedder
from llmcache.verification import Within

# A day of one agent's importance ratings and plans: repeated events, near-identical ones, and
# events never seen before. The model is deterministic (one answer per prompt), so a pair of
# its answers always agrees and the replay's draws from its spread match a live call's answers.
EVENTS = [f"{verb} the {thing}" for verb in ("cleaning", "fixing", "painting", "checking")
          for thing in ("counter", "espresso machine", "shelf", "window", "door")]  # fmt: skip


def _stream() -> list[tuple[str, str, str]]:
    """(category, agent, event) in order: 120 calls, most events asked several times."""
    out = []
    for i in range(120):
        event = EVENTS[(i * 7) % len(EVENTS)] if i % 3 else EVENTS[i % 6]
        category = "importance" if i % 4 else "plan"
        out.append((category, "Isabella" if i % 5 else "Maria", event))
    return out


def _prompt(category: str, event: str) -> str:
    return f"[{category}] On a scale of 1 to 10, rate the poignancy of: {event}."


def _model(request: dict[str, Any]) -> str:
    text = request["messages"][-1]["content"]
    if text.startswith("[plan]"):
        return json.dumps({"plan": text.split(": ")[1].upper()})
    return str(1 + sum(map(ord, text)) % 10)


def _send(client: CachedLLM) -> list[tuple[str, str]]:
    """The stream through ``client``: each call's (outcome, answer returned)."""
    seen = []
    for category, agent, event in _stream():
        response, info = client.chat.completions.create_with_info(
            model="gpt-3.5-turbo",
            messages=[{"role": "user", "content": _prompt(category, event)}],
            cache=CacheOptions(category=category, agent=agent, keywords=(event,)),
        )
        seen.append((info.outcome, response.choices[0].message.content or ""))
    return seen


CONFIGS = {
    "threshold": CacheConfig(threshold=0.8, explore_seed=3),
    "budget": CacheConfig(wrong_hit_budget=0.2, twin_rate=0.5, explore_seed=3),
    "full mode, one category bypassed": CacheConfig(
        embed="full", threshold=0.95, categories={"plan": CategoryPolicy(bypass=True)}
    ),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_replay_is_the_live_cache_call_for_call(tmp_path: Path, name: str) -> None:
    # Recorded with the cache off (every answer the model's), as a user records a day.
    recording = tmp_path / "day.jsonl"
    with CachedLLM(
        FakeOpenAI(_model),
        tmp_path / "recorded",
        embedder=HashEmbedder(),
        config=CacheConfig(mode=Mode.OFF),
        recorder=recording,
    ) as client:
        _send(client)
    # The live cache with the configuration, on the same stream. The replay's equivalences
    # are named in the configuration, so the live cache labels by the same ones.
    config = CONFIGS[name].updated(
        categories={
            **CONFIGS[name].categories,
            "importance": CategoryPolicy(equivalence=Within(1)),
        }
    )
    with CachedLLM(
        FakeOpenAI(_model), tmp_path / "live", embedder=HashEmbedder(), config=config
    ) as client:
        live = _send(client)
    report = replay(read_recording(recording), config, embedder=HashEmbedder(), seed=3)
    replayed = [(r.outcome, r.served if r.served is not None else r.truth) for r in report.results]
    assert replayed == live
    assert report.overall.calls == 120
    assert report.overall.served == sum(outcome == "hit" for outcome, _ in live)
    if name != "full mode, one category bypassed":
        assert report.overall.served > 0  # the comparison covers hits, not only misses


def _call(prompt: str, answer: str, category: str = "importance") -> ReplayCall:
    return ReplayCall(
        category=category, messages=[{"role": "user", "content": prompt}], answer=answer
    )


def test_the_recording_answers_first_with_the_truth_then_from_the_spread() -> None:
    calls = [_call("p", "3"), _call("q", "9"), _call("p", "4"), _call("p", "5")]
    ask = {"model": "m", "messages": [{"role": "user", "content": "p"}]}
    upstream = RecordedUpstream(calls, seed=1)
    upstream.ask(2)
    first = upstream.chat.completions.create(**ask)
    assert first.choices[0].message.content == "4"  # the call's own answer
    assert first.usage is not None and first.usage.completion_tokens > 0
    extra = {upstream.chat.completions.create(**ask).choices[0].message.content for _ in range(40)}
    assert extra == {"3", "5"}  # only the other answers to the same prompt, never q's
    again = RecordedUpstream(calls, seed=1)
    again.ask(2)
    draws = [again.chat.completions.create(**ask).choices[0].message.content for _ in range(41)]
    upstream = RecordedUpstream(calls, seed=1)
    upstream.ask(2)
    assert draws == [upstream.chat.completions.create(**ask).choices[0].message.content
                     for _ in range(41)]  # fmt: skip
    upstream.ask(1)
    with pytest.raises(ReplayError, match="not its recorded prompt"):
        upstream.chat.completions.create(**ask)


def _walks(seconds: dict[str, str] | None = None) -> list[ReplayCall]:
    """Two events the hash embedder cannot tell apart at 0.5, rated far apart by the model;
    with ``seconds``, each call recorded with that second answer to its event."""
    return [
        ReplayCall(
            category="importance",
            agent="a",
            messages=[{"role": "user", "content": f"rate: {event}"}],
            keywords=[event],
            answer=answer,
            other_answers=[seconds[event]] if seconds else [],
        )
        for event, answer in [
            ("a quiet walk", "2"),
            ("a quiet walk", "3"),
            ("a quiet walk home", "9"),
            ("a quiet walk", "2"),
        ]
    ]


def test_a_replay_grades_served_answers_by_the_truth_and_lists_the_wrong_ones() -> None:
    calls = _walks()
    report = replay(calls, CacheConfig(threshold=0.5), embedder=HashEmbedder())
    assert [r.outcome for r in report.results] == ["miss", "hit", "hit", "hit"]
    assert [r.acceptable for r in report.results] == [None, True, False, True]
    assert [(w.index, w.served, w.truth) for w in report.wrong_hits] == [(2, "2", "9")]
    figures = report.categories["importance"]
    assert (figures.served, figures.acceptable) == (3, 2)
    # Pairs of consecutive answers to one prompt: (2, 3) agrees within 1, (3, 2) too.
    assert (figures.pairs, figures.pairs_agree) == (2, 2)
    assert figures.excess == pytest.approx(100 / 3)
    assert figures.excess_upper is not None and figures.excess is not None
    assert figures.excess_upper > figures.excess
    assert 0 < figures.cost_cut < 1
    summary = report.summary()
    assert {"calls", "served", "cost_cut", "excess", "excess_upper"} <= set(summary)
    assert summary["categories"]["importance"]["served"] == 3
    assert "a quiet walk home" in report.render()


def test_with_a_second_answer_to_every_served_query_the_excess_is_paired() -> None:
    # The same events as above, each recorded with the model's second answer. The excess is
    # then over those second answers to the very queries served, not over every pair.
    calls = _walks({"a quiet walk": "9", "a quiet walk home": "8"})
    report = replay(calls, CacheConfig(threshold=0.5), embedder=HashEmbedder())
    figures = report.categories["importance"]
    assert [r.acceptable for r in report.results] == [None, True, False, True]
    # Served: 3 (ok; second 9 wrong), 9 (served 2 wrong; second 8 ok), 2 (ok; second 9 wrong).
    assert figures.paired and figures.own_wrong_rate == pytest.approx(2 / 3)
    assert figures.excess == pytest.approx(100 * (1 / 3 - 2 / 3))
    assert figures.excess_low is not None and figures.excess_upper is not None
    assert figures.excess_low < figures.excess < figures.excess_upper
    assert report.summary()["categories"]["importance"]["paired"] is True
    # One served query without a second answer: compared with every recorded pair instead.
    calls[1] = calls[1].model_copy(update={"other_answers": []})
    unpaired = replay(calls, CacheConfig(threshold=0.5), embedder=HashEmbedder())
    assert not unpaired.categories["importance"].paired
    # Results graded without their own calls are refused, not misread.
    with pytest.raises(ReplayError, match="3 calls"):
        replay_api.figures(unpaired.results, calls[:3], equivalences_for(calls, CacheConfig()))


def test_recorded_hits_are_left_out_and_counted(tmp_path: Path) -> None:
    recording = tmp_path / "day.jsonl"
    with CachedLLM(
        FakeOpenAI(_model), tmp_path / "c", embedder=HashEmbedder(), recorder=recording
    ) as client:
        outcomes = [outcome for outcome, _ in _send(client)]
    with recording.open("a") as damaged:
        damaged.write('{"kind": "call", "category": "importance"\n')  # a crash's torn line
    read = read_recording(recording)
    assert len(read.calls) == outcomes.count("miss")
    assert read.skipped.pop("unreadable line") == 1
    assert sum(read.skipped.values()) == outcomes.count("hit") > 0
    # Compressed for committing, it reads the same.
    import gzip

    packed = tmp_path / "day.jsonl.gz"
    packed.write_bytes(gzip.compress(recording.read_bytes()))
    assert read_recording(packed).calls == read.calls


def test_the_importer_names_every_malformed_line_and_keeps_every_good_one(
    tmp_path: Path,
) -> None:
    good = {"category": "importance", "agent": "a", "prompt": "rate: a walk", "answer": "3"}
    without_prompt = {k: v for k, v in good.items() if k != "prompt"}
    lines = [
        json.dumps(good),
        "{not json",
        json.dumps({**good, "answer": None}),
        "",
        json.dumps({"category": "importance", "answer": "3"}),
        json.dumps({**good, "keywords": ["a walk"], "time": 5, "model": "gpt-4o"}),
        json.dumps({**good, "promt": "typo"}),
        json.dumps({**without_prompt, "messages": [{"role": "user", "content": "hi"}]}),
        "[1, 2]",
    ]
    path = tmp_path / "calls.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ReplayInputError) as caught:
        read_calls(path)
    assert [n for n, _ in caught.value.problems] == [2, 3, 5, 7, 9]
    assert caught.value.good == 3
    message = str(caught.value)
    assert "line 2:" in message and "line 5: no 'messages'" in message and "promt" in message
    read = read_calls(path, strict=False)
    assert [c.messages[-1]["content"] for c in read.calls] == ["rate: a walk"] * 2 + ["hi"]
    assert read.calls[1].keywords == ["a walk"] and read.calls[1].time == 5
    assert read.calls[1].model == "gpt-4o"
    assert all(c.prompt_tokens > 0 and c.completion_tokens > 0 for c in read.calls)
    assert read.skipped == {"malformed line": 5}


def test_stored_embeddings_are_computed_once_and_kept_on_disk(tmp_path: Path) -> None:
    from llmcache.embedders import StoredEmbedder

    first = StoredEmbedder(HashEmbedder(), tmp_path)
    assert first.warm(["a walk", "a run", "a walk"]) == 2
    vectors = first.embed(["a run", "a walk"])
    first.save()
    again = StoredEmbedder(HashEmbedder(), tmp_path)
    assert (again.model_id, again.dim, len(again)) == (first.model_id, first.dim, 2)
    assert (again.embed(["a run", "a walk"]) == vectors).all()
    assert again.computed == 0 and again.reused == 2
    # A damaged store is computed again, not trusted.
    assert again.path is not None
    again.path.write_bytes(b"not a store")
    damaged = StoredEmbedder(HashEmbedder(), tmp_path)
    assert len(damaged) == 0
    assert (damaged.embed(["a walk"]) == vectors[1:]).all() and damaged.computed == 1


def test_a_store_takes_the_vectors_another_directory_holds(tmp_path: Path) -> None:
    from llmcache.embedders import StoredEmbedder

    shipped = StoredEmbedder(HashEmbedder(), tmp_path / "shipped")
    vectors = shipped.embed(["a walk", "a run"])
    shipped.save()
    own = StoredEmbedder(HashEmbedder(), tmp_path / "own")
    own.embed(["a walk"])
    assert own.add_from(tmp_path / "shipped") == 1  # the run it lacked; its own walk kept
    assert (own.embed(["a walk", "a run"]) == vectors).all() and own.computed == 1
    own.save()
    assert len(StoredEmbedder(HashEmbedder(), tmp_path / "own")) == 2
    # Nothing there, or a damaged store, adds nothing.
    assert own.add_from(tmp_path / "missing") == 0
    assert shipped.path is not None
    shipped.path.write_bytes(b"not a store")
    assert StoredEmbedder(HashEmbedder()).add_from(tmp_path / "shipped") == 0


def test_a_call_s_own_other_answers_join_its_spread_and_its_pairs(tmp_path: Path) -> None:
    calls = [
        _call("p", "3").model_copy(update={"other_answers": ["7", "8"]}),
        _call("q", "9"),
        _call("p", "4"),
    ]
    ask = {"model": "m", "messages": [{"role": "user", "content": "p"}]}
    upstream = RecordedUpstream(calls, seed=2)
    upstream.ask(0)
    assert upstream.chat.completions.create(**ask).choices[0].message.content == "3"
    drawn = {upstream.chat.completions.create(**ask).choices[0].message.content for _ in range(60)}
    assert drawn == {"7", "8", "4"}  # its own further answers and the other call's, never q's
    # The other call draws from its prompt's other call only: 3 (not 3's further answers).
    upstream.ask(2)
    upstream.chat.completions.create(**ask)
    assert {upstream.chat.completions.create(**ask).choices[0].message.content
            for _ in range(20)} == {"3"}  # fmt: skip
    # Pairs: (3, 7) and (3, 8) of the call's own answers disagree within 1, (3, 4) agrees.
    report = replay(calls, CacheConfig(mode=Mode.OFF), embedder=HashEmbedder())
    assert (report.categories["importance"].pairs, report.categories["importance"].pairs_agree) == (
        3,
        1,
    )
    # Read from a plain (gzip-compressed) file; a bad list is refused with its line.
    import gzip

    line = {"category": "importance", "prompt": "p", "answer": "3", "other_answers": ["7"]}
    path = tmp_path / "calls.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n" + json.dumps({**line, "other_answers": "7"}) + "\n")
    with pytest.raises(ReplayInputError, match="line 2: other_answers"):
        read_calls(path)
    assert read_calls(path, strict=False).calls[0].other_answers == ["7"]
    (tmp_path / "torn.jsonl.gz").write_bytes(gzip.compress(b"{}")[:8])
    with pytest.raises(ReplayInputError, match="cannot read"):
        read_calls(tmp_path / "torn.jsonl.gz")


def _rated(events: list[str], answers: dict[str, str]) -> list[ReplayCall]:
    return [
        ReplayCall(
            category="importance",
            agent="Isabella",
            messages=[{"role": "user", "content": _prompt("importance", event)}],
            keywords=[event],
            answer=answers.get(event, "5"),
            time=float(i),
        )
        for i, event in enumerate(events)
    ]


def test_a_replay_into_a_kept_cache_directory_starts_from_the_runs_before(
    tmp_path: Path,
) -> None:
    first = _rated(["fixing the door", "cleaning the shelf"], {})
    second = _rated(["fixing the door", "painting the window"], {})
    # A fresh cache each time: the second day's repeat of the first day's event is a miss.
    alone = replay(second, CacheConfig(threshold=0.99), embedder=HashEmbedder())
    assert [r.outcome for r in alone.results] == ["miss", "miss"]
    # Into one kept directory: the second day starts from the first day's answers.
    where = tmp_path / "cache"
    replay(first, CacheConfig(threshold=0.99), embedder=HashEmbedder(), cache_dir=where)
    kept = replay(second, CacheConfig(threshold=0.99), embedder=HashEmbedder(), cache_dir=where)
    assert [r.outcome for r in kept.results] == ["hit", "miss"]
    assert kept.results[0].identical and kept.overall.identical == 1
    assert where.exists()  # kept for the next run


def test_the_figures_count_answers_to_the_very_same_prompt_at_an_excess_of_0() -> None:
    # "fixing the door" repeated (the same prompt: identical), "fixing the doors" a near
    # neighbour served another event's answer, wrong by its truth.
    calls = _rated(
        ["fixing the door", "fixing the door", "fixing the doors", "fixing the door"],
        {"fixing the doors": "9"},
    )
    report = replay(calls, CacheConfig(threshold=0.5), embedder=HashEmbedder())
    figures = report.categories["importance"]
    assert (figures.served, figures.identical, figures.near_served) == (3, 2, 1)
    assert figures.near_wrong == 1
    # The model agreed with itself on every recorded pair: the near neighbour's excess is its
    # wrong rate (1 of 1), a third of what was served; the bound lies above that estimate.
    assert figures.expected == pytest.approx(100 / 3)
    assert figures.bound is not None and figures.bound >= figures.expected
    # Only answers to the very same prompt: an expected excess of 0, and a bound of 0.
    exact = replay(calls, CacheConfig(threshold=0.999), embedder=HashEmbedder())
    only = exact.categories["importance"]
    assert (only.identical, only.near_served, only.bound) == (2, 0, 0.0)
