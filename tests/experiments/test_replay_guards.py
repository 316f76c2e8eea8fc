"""The replay study's guard rows: what each guard did per category (read from the replayed
calls), and the report's sentences about the guard issue's goals, computed from them."""

from __future__ import annotations

from experiments._replay_report import AUDITS_TO_CATCH, replay_lines
from experiments._replay_study import _guard_stories
from experiments._results import GuardStory, ReplayBed, ReplayRow, ReplayStudyResult
from llmcache.replay import CallResult, Figures


def _r(
    category: str,
    *,
    threshold: float | None = 0.9,
    audited: bool = False,
    explored: bool = False,
    served: bool = False,
    closed: bool = False,
    identical: bool = False,
) -> CallResult:
    return CallResult(
        index=0,
        category=category,
        agent="a",
        outcome="hit" if served else "miss",
        audited=audited,
        explored=explored,
        threshold=threshold,
        closed=closed,
        identical=identical,
        query="q",
        served="s" if served else None,
        truth="t",
    )


def test_the_audit_guard_s_move_is_counted_in_audits_before_it() -> None:
    seed = [
        _r("bad", audited=True),
        _r("good", audited=True),
        _r("bad", audited=True),
        _r("bad", threshold=0.93),  # moved up after 2 audits of its category
        _r("bad", audited=True, threshold=0.93),
        _r("good", threshold=None),  # no candidate: no threshold in force looked at
        _r("good", served=True),
    ]
    closing = [_r("bad", audited=True), _r("bad", threshold=2.0, closed=True), _r("good")]
    stories = _guard_stories([seed, closing], 0.9, audit=True)
    assert stories["bad"] == GuardStory(asked=[3, 1], moved_after=[2, 1], closed=[False, True])
    assert stories["good"] == GuardStory(asked=[1, 0], moved_after=[None, None], closed=[False] * 2)
    assert stories["bad"].median_moved_after() == 1.5
    assert stories["good"].median_moved_after() is None


def test_the_proving_guard_s_story_is_its_explorations_before_it_first_served() -> None:
    seed = [
        _r("t", explored=True, threshold=0.97),
        # The very same prompt's stored answer, served at once: no proof yet.
        _r("t", served=True, identical=True, threshold=0.97),
        _r("t", explored=True, threshold=0.97),
        _r("t", served=True),
        _r("t", explored=True),
        _r("u", explored=True),
    ]
    stories = _guard_stories([seed], 0.9, audit=False)
    assert stories["t"] == GuardStory(asked=[3], moved_after=[2], closed=[False])
    assert stories["u"] == GuardStory(asked=[1], moved_after=[None], closed=[False])


def _f(cut: float, served: int, excess: float, upper: float, audited: int = 0) -> Figures:
    return Figures(
        calls=100,
        served=served,
        acceptable=served,
        cost_cut=cut,
        audited=audited,
        excess=excess,
        excess_low=excess - 5,
        excess_upper=upper,
    )


def _result(story: GuardStory, audit_cut: float) -> ReplayStudyResult:
    static = ReplayRow(
        bed="town",
        mode="full",
        config="static",
        overall=_f(0.5, 60, 8.0, 12.0),
        categories={"finding location": _f(0.5, 60, 8.0, 12.0), "fine": _f(0.5, 60, 1.0, 4.0)},
    )
    audit = ReplayRow(
        bed="town",
        mode="full",
        config="audit",
        overall=_f(audit_cut, 40, 2.0, 6.5, audited=9),
        asked_share=0.018,
        categories={"finding location": _f(0.3, 20, 2.0, 9.0), "fine": _f(0.5, 60, 1.0, 8.0)},
        guards={
            "finding location": story,
            "fine": GuardStory(asked=[9], moved_after=[None], closed=[False]),
        },
    )
    bed = ReplayBed(
        name="town",
        source="s",
        model="m",
        equivalence="e",
        split="tuned on runs 1, 2, reported on run 3",
        tune_calls=200,
        check_calls=100,
        rows=[static, audit],
    )
    return ReplayStudyResult(delta=0.05, seed=0, beds=[bed])


def test_the_report_reads_the_audit_guard_against_its_goals() -> None:
    caught = GuardStory(asked=[30, 40, 90], moved_after=[20, None, 70], closed=[True, False, False])
    text = "\n".join(replay_lines(_result(caught, 0.46)))
    # 46% of the static default's 50% is 92%: kept; the bound 6.5 is within 5 + 2.
    assert "cost cut 46.0%, 92.0% of the static default's 50.0%" in text
    assert "at least 90.0%: met" in text and "at most 7: met" in text
    assert "9 audits in the held-out run (1.8% of its bill without a cache)" in text
    # Only the group the static default ran over δ is read for its catch: moved in 2 of 3,
    # a median of 40 audits (the seed that never moved counts its 40).
    assert "finding location ran +8.0 points over the model" in text
    assert "moved it up in 2 of 3 seeded replays (1 closed), after a median of 40 audits" in text
    assert f"within {AUDITS_TO_CATCH}: met" in text
    assert "fine ran" not in text
    # A group served 60 times with a bound of 8 points is named as over the goal.
    assert "audit guard, fine: 60 served with an excess upper bound of +8.0 points" in text


def test_a_guard_that_catches_in_too_few_seeds_or_too_late_misses_its_goal() -> None:
    late = GuardStory(asked=[80, 90, 95], moved_after=[70, 75, 80], closed=[False] * 3)
    rare = GuardStory(asked=[10, 20, 30], moved_after=[5, None, None], closed=[False] * 3)
    for story in (late, rare):
        text = "\n".join(replay_lines(_result(story, 0.2)))
        assert f"within {AUDITS_TO_CATCH}: missed" in text
        assert "at least 90.0%: missed" in text
