"""Tune: settings chosen on one part of a recording, confirmed on the other under a bound."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmcache import CacheConfig, EmbedMode
from llmcache.__main__ import main
from llmcache.replay import (
    CallResult,
    Figures,
    ReplayCall,
    Setting,
    check_mask,
    replay,
    select,
    tune,
)
from llmcache.replay import figures as figures_of
from llmcache.testing import HashEmbedder
from llmcache.verification import Within

THRESHOLDS = [round(0.80 + 0.02 * i, 2) for i in range(10)]


def _synthetic_part(
    rng: random.Random, n: int, wrong_at: float, slope: float, disagree: float, threshold: float
) -> Figures:
    """A part of a synthetic stream replayed at ``threshold``: every call's nearest cosine is
    uniform in [0.75, 1]; a hit at cosine c is wrong with probability
    ``max(0, wrong_at - slope * (c - 0.75))``; the model disagrees with itself on a share
    ``disagree`` of its pairs of answers to one prompt (calls 2k and 2k+1 share a prompt)."""
    rows, calls = [], []
    for i in range(n):
        cosine = rng.uniform(0.75, 1.0)
        served = cosine >= threshold
        wrong = rng.random() < max(0.0, wrong_at - slope * (cosine - 0.75))
        answer = "1" if i % 2 == 0 or rng.random() >= disagree else "5"
        calls.append(
            ReplayCall(
                category="c",
                messages=[{"role": "user", "content": f"prompt {i // 2}"}],
                answer=answer,
            )
        )
        rows.append(
            CallResult(
                index=i,
                category="c",
                agent="",
                outcome="hit" if served else "miss",
                cosine=cosine,
                query=f"prompt {i // 2}",
                served=("9" if wrong else answer) if served else None,
                truth=answer,
                acceptable=(not wrong) if served else None,
                cost_usd=0.0 if served else 1.0,
                baseline_usd=1.0,
            )
        )
    return figures_of(rows, calls, {"c": Within(1)})


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(20, 400),
    wrong_at=st.floats(0.0, 0.6),
    slope=st.floats(0.0, 2.4),
    disagree=st.floats(0.0, 0.5),
    delta=st.sampled_from([0.02, 0.05, 0.1]),
    check_shift=st.floats(0.0, 0.3),
)
def test_tuning_never_picks_a_setting_whose_check_bound_exceeds_delta(
    seed: int,
    n: int,
    wrong_at: float,
    slope: float,
    disagree: float,
    delta: float,
    check_shift: float,
) -> None:
    # The check part may be worse than the tune part (traffic drifts): its wrong rates by
    # cosine are shifted up by check_shift.
    rng = random.Random(seed)
    measured = [
        (
            Setting(embed=EmbedMode.KEYWORD, threshold=t),
            _synthetic_part(rng, n, wrong_at, slope, disagree, t),
            _synthetic_part(rng, n, wrong_at + check_shift, slope, disagree, t),
        )
        for t in THRESHOLDS
    ]
    choice = select("c", measured, delta)
    if choice.setting is not None:
        check = dict((c, f) for c, _, f in measured)[choice.setting]
        assert choice.check == check
        # The promise: the check part's one-sided 95% bound of the expected excess within δ.
        assert check.bound is not None and check.bound <= 100 * delta
        assert check.served > 0 and check.cost_cut > 0
    else:
        assert choice.why


def test_the_parts_split_by_time_or_by_agents() -> None:
    calls = [
        ReplayCall(
            category="c",
            agent=agent,
            messages=[{"role": "user", "content": str(i)}],
            answer="1",
            time=float(10 - i),  # recorded out of order: time decides, not the line
        )
        for i, agent in enumerate("aabbbc")
    ]
    assert check_mask(calls, "time", 0.5) == [True, True, True, False, False, False]
    assert check_mask(calls, "agents", 0.5) == [False, False, True, True, True, True]
    with pytest.raises(ValueError, match="between 0 and 1"):
        check_mask(calls, "time", 1.0)


def _day(n: int = 240) -> list[ReplayCall]:
    """A day of ratings: events asked again, and pairs of events that share most words but
    are rated far apart (which a low threshold serves one another's answers)."""
    rng = random.Random(5)
    out = []
    for i in range(n):
        k = rng.randrange(30)
        event = f"walking to the {'park' if k % 2 else 'park bench'} number {k // 2}"
        rating = (k // 2) % 4 + (6 if k % 2 else 1)
        out.append(
            ReplayCall(
                category="importance",
                agent="Isabella",
                messages=[{"role": "user", "content": f"Rate: {event}"}],
                keywords=[event],
                answer=str(rating + rng.choice([0, 0, 1])),
                time=float(i),
            )
        )
    return out


def test_tune_writes_a_file_that_replays_within_the_bound_on_the_check_part(
    tmp_path: Path,
) -> None:
    calls = _day()
    result = tune(calls, delta=0.05, thresholds=[0.6, 0.8, 0.95, 0.99], embedder=HashEmbedder())
    choice = result.choices["importance"]
    assert choice.setting is not None, choice.why
    check = result.check.categories["importance"]
    assert check.excess_upper is not None and check.excess_upper <= 5.0
    assert check.cost_cut > 0
    path = result.config.to_file(tmp_path / "tuned.json", tuning=result.tuning())
    loaded = CacheConfig.from_file(path)
    assert loaded == result.config
    assert json.loads(path.read_text())["tuning"]["categories"]["importance"]["why"]
    # The file replays as tuned: the same figures on the whole day.
    again = replay(calls, path, embedder=HashEmbedder())
    assert again.overall.served == result.check.overall.served + result.tuned_on.overall.served


def test_a_category_nothing_qualifies_for_is_left_uncached_and_says_why() -> None:
    # Every event rated at random from 1 to 10: no threshold serves acceptable answers.
    # Every prompt differs (its number): none is answered from the model's own answer to the
    # very same prompt, which tune counts at an excess of 0 however random the model is.
    rng = random.Random(2)
    calls = [
        ReplayCall(
            category="whim",
            messages=[{"role": "user", "content": f"Rate ({i}): thing {rng.randrange(8)}"}],
            keywords=[f"thing {rng.randrange(8)}"],
            answer=str(rng.randrange(1, 11)),
            time=float(i),
        )
        for i in range(120)
    ]
    result = tune(calls, thresholds=[0.5, 0.9], embedder=HashEmbedder())
    assert result.choices["whim"].setting is None
    assert "no setting" in result.choices["whim"].why or "confirmed none" in (
        result.choices["whim"].why
    )
    assert result.config.categories["whim"].bypass
    assert result.check.overall.served == 0


def test_the_commands_replay_and_tune_a_plain_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "calls.jsonl"
    lines = [
        {"category": c.category, "agent": c.agent, "prompt": c.messages[0]["content"],
         "keywords": c.keywords, "answer": c.answer, "time": c.time}
        for c in _day(120)
    ]  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    common = ["--embedder", "hash", "--embeddings", str(tmp_path / "emb")]
    assert main(["replay", str(path), *common, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["calls"] == 120 and summary["categories"]["importance"]["calls"] == 120
    assert {"served", "cost_cut", "excess", "excess_upper"} <= set(summary)
    out = tmp_path / "tuned.json"
    assert main(["tune", str(path), *common, "--thresholds", "0.9,0.99", "--out", str(out)]) == 0
    assert "written" in capsys.readouterr().out
    assert main(["replay", str(path), *common, "--config", str(out)]) == 0
    assert "importance" in capsys.readouterr().out
    path.write_text(path.read_text() + "{broken\n")
    assert main(["replay", str(path), *common]) == 1
    assert "line 121" in capsys.readouterr().err


def test_where_calls_carry_slots_tuning_tries_each_slot_as_the_keywords() -> None:
    # Two slots: the clock (different in nearly every call, and telling nothing about the
    # rating) and the event (which decides it). Keyed by both, a repeated event rarely looks
    # repeated; keyed by the clock alone, unrelated events look alike.
    rng = random.Random(3)
    calls = []
    for i in range(200):
        k = rng.randrange(25)
        event = f"event{k} happens"
        clock = f"{rng.randrange(24):02d}:{rng.randrange(60):02d}"
        calls.append(
            ReplayCall(
                category="importance",
                agent="Isabella",
                messages=[{"role": "user", "content": f"At {clock}, rate: {event}"}],
                slots={"clock": clock, "event": event},
                answer=str(1 + (k * 7) % 10),
                time=float(i),
            )
        )
    result = tune(
        calls,
        thresholds=[0.7, 0.95],
        embeds=[EmbedMode.KEYWORD],
        lead_words=(0,),
        embedder=HashEmbedder(),
    )
    # Three keyword choices (every slot, the clock, the event) at two thresholds.
    assert result.candidates == 6
    setting = result.choices["importance"].setting
    assert setting is not None and setting.slots == ("event",), result.render()
    assert result.keyword_slots == {"importance": ["event"]}
    assert result.tuning()["categories"]["importance"]["keyword_slots"] == ["event"]
    check = result.check.categories["importance"]
    assert check.excess_upper is not None and check.excess_upper <= 5.0
