"""Each template's tolerance on hand-made answers: what it accepts, what it rejects, and why.

An answer is acceptable when it meets the query's requirements and agrees with the query's
true answer within the template's tolerance (agent_core.tolerance). The text similarity here
is a stand-in with known values, so each case tests the rule, not an embedder.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_core.templates import (
    ACTOR_REACTION,
    ACTOR_STATUS,
    DECOMPOSITION,
    FINDING_LOCATION,
    IMPORTANCE,
    INITIAL_PLAN,
    INSIGHTS,
    MEMORY_SUMMARY,
    QUESTIONS,
    REVISION,
    TEMPLATES,
    Requirements,
)
from agent_core.tolerance import (
    DEFAULT_TEXT_BOUND,
    MIN_CALIBRATION_PAIRS,
    TextAgreement,
    calibrated_bound,
)


def _j(**fields: Any) -> str:
    return json.dumps(fields)


def _pairs(similar: set[frozenset[str]]) -> TextAgreement:
    """A similarity that is 0.95 for the listed pairs of texts and 0.1 for any other."""

    def similarity(a: str, b: str) -> float:
        return 0.95 if frozenset((a, b)) in similar else 0.1

    return TextAgreement(similarity=similarity, bound=0.9)


def test_every_cached_template_declares_a_tolerance() -> None:
    for t in TEMPLATES:
        assert t.tolerance, t.category
        assert all(tol.describe() for tol in t.tolerance)


def test_importance_within_one() -> None:
    assert IMPORTANCE.acceptable(_j(score=4), _j(score=5)).acceptable
    assert IMPORTANCE.acceptable(_j(score=6), _j(score=5)).acceptable
    verdict = IMPORTANCE.acceptable(_j(score=7), _j(score=5))
    assert not verdict.acceptable and "within ±1" in verdict.reason


def test_an_invalid_answer_is_never_acceptable() -> None:
    verdict = IMPORTANCE.acceptable(_j(score=11), _j(score=10))
    assert not verdict.acceptable and "requirements" in verdict.reason


OPTIONS = ["Wilson Family House: Kitchen", "Wilson Family House: Bedroom", "Cafe: Counter"]


def test_finding_location_same_option() -> None:
    req = Requirements(options=OPTIONS)
    # Named by its area alone, it is still the same option once the query reads it.
    assert FINDING_LOCATION.acceptable(
        _j(location="Kitchen"), _j(location=OPTIONS[0]), req
    ).acceptable
    assert not FINDING_LOCATION.acceptable(
        _j(location=OPTIONS[1]), _j(location=OPTIONS[0]), req
    ).acceptable
    # An option of another query is not an answer to this one.
    verdict = FINDING_LOCATION.acceptable(_j(location="Park: Bench"), _j(location=OPTIONS[0]), req)
    assert not verdict.acceptable and "requirements" in verdict.reason


REACT = ["continue reading", "use the stove", "go somewhere else"]


def test_actor_reaction_same_option_and_similar_activity_when_acting() -> None:
    req = Requirements(options=REACT)
    text = _pairs({frozenset(("cooking eggs", "making an omelette"))})
    truth = _j(choice=REACT[1], activity="cooking eggs", minutes=20)
    same = _j(choice=REACT[1], activity="making an omelette", minutes=30)
    other = _j(choice=REACT[1], activity="cleaning the stove", minutes=20)
    assert ACTOR_REACTION.acceptable(same, truth, req, text=text).acceptable
    assert not ACTOR_REACTION.acceptable(other, truth, req, text=text).acceptable
    wrong = _j(choice=REACT[0], activity="cooking eggs", minutes=20)
    assert not ACTOR_REACTION.acceptable(wrong, truth, req, text=text).acceptable
    # "continue ...": the town ignores the activity, and so does the tolerance.
    cont = _j(choice=REACT[0], activity="reading", minutes=10)
    cont2 = _j(choice=REACT[0], activity="sleeping", minutes=60)
    assert ACTOR_REACTION.acceptable(cont2, cont, req, text=text).acceptable
    # The town shows the options in a shuffled order: "continue" is known by what it says.
    shuffled = Requirements(options=[REACT[2], REACT[0], REACT[1]])
    assert ACTOR_REACTION.acceptable(cont2, cont, shuffled, text=text).acceptable
    leave = _j(choice=REACT[2], activity="walking home", minutes=20)
    elsewhere = _j(choice=REACT[2], activity="cleaning the stove", minutes=20)
    assert not ACTOR_REACTION.acceptable(elsewhere, leave, shuffled, text=text).acceptable


PLACES = ["Wilson Family House", "Cafe", "Library"]


def _plan(*items: tuple[str, str, str]) -> list[dict[str, str]]:
    return [{"start": s, "end": e, "activity": "x", "location": loc} for s, e, loc in items]


def test_decomposition_covers_the_window_at_the_true_places() -> None:
    req = Requirements(places=PLACES, window=("08:00", "10:00"))
    truth = _j(tasks=_plan(("08:00", "09:00", "Cafe"), ("09:00", "10:00", "Cafe")))
    mostly = _j(tasks=_plan(("08:00", "09:30", "Cafe"), ("09:30", "10:00", "Library")))
    moved = _j(tasks=_plan(("08:00", "08:30", "Cafe"), ("08:30", "10:00", "Library")))
    assert DECOMPOSITION.acceptable(mostly, truth, req).acceptable  # 75% at the true place
    verdict = DECOMPOSITION.acceptable(moved, truth, req)
    assert not verdict.acceptable and "25%" in verdict.reason
    # A plan for another window fails the query's requirements before any comparison.
    other = _j(tasks=_plan(("10:00", "11:00", "Cafe"), ("11:00", "12:00", "Cafe")))
    assert "requirements" in DECOMPOSITION.acceptable(other, truth, req).reason


def test_initial_plan_and_revision_at_the_true_places() -> None:
    req = Requirements(places=PLACES)
    day = [
        ("07:00", "08:00", "Wilson Family House"),
        ("08:00", "12:00", "Cafe"),
        ("12:00", "13:00", "Cafe"),
        ("13:00", "17:00", "Library"),
        ("17:00", "20:00", "Cafe"),
    ]
    truth = _j(plans=_plan(*day))
    near = _j(plans=_plan(*day[:4], ("17:00", "19:00", "Wilson Family House")))
    far = _j(plans=_plan(*[(s, e, "Library") for s, e, _ in day]))
    assert INITIAL_PLAN.acceptable(near, truth, req).acceptable
    assert not INITIAL_PLAN.acceptable(far, truth, req).acceptable
    rreq = Requirements(places=PLACES, window=("14:00", "18:00"))
    rtruth = _j(plans=_plan(("14:00", "16:00", "Cafe")))
    assert REVISION.acceptable(_j(plans=_plan(("14:30", "16:00", "Cafe"))), rtruth, rreq).acceptable
    assert not REVISION.acceptable(_j(plans=[]), rtruth, rreq).acceptable
    assert REVISION.acceptable(_j(plans=[]), _j(plans=[]), rreq).acceptable
    assert not REVISION.acceptable(rtruth, _j(plans=[]), rreq).acceptable


def test_statuses_that_mean_the_same() -> None:
    text = _pairs({frozenset(("being used to brew coffee", "brewing coffee"))})
    truth = _j(status="being used to brew coffee")
    for same in ("Being used to brew coffee.", "is used to brew coffee", "brewing coffee"):
        assert ACTOR_STATUS.acceptable(_j(status=same), truth, text=text).acceptable, same
    assert not ACTOR_STATUS.acceptable(_j(status="idle"), truth, text=text).acceptable


@pytest.mark.parametrize(
    ("template", "field", "make"),
    [
        (MEMORY_SUMMARY, "summary", lambda s: _j(summary=s)),
        (QUESTIONS, "questions", lambda s: _j(questions=[s, "b?", "c?"])),
        (
            INSIGHTS,
            "insights",
            lambda s: _j(
                insights=[{"insight": s, "evidence": [1]}] + [{"insight": "i", "evidence": [1]}] * 4
            ),
        ),
    ],
)
def test_free_text_by_the_calibrated_bound(template: Any, field: str, make: Any) -> None:
    truth, near, far = make("Alice bakes bread"), make("Alice is a baker"), make("Bob fishes")
    t, n = template.tolerance_text(truth), template.tolerance_text(near)
    text = _pairs({frozenset((t, n))})
    assert template.acceptable(near, truth, text=text).acceptable
    verdict = template.acceptable(far, truth, text=text)
    assert not verdict.acceptable and field in verdict.reason
    assert template.acceptable(truth, truth, text=text).acceptable  # equal needs no embedding
    with pytest.raises(ValueError, match="TextAgreement"):
        template.acceptable(far, truth)


def test_the_bound_is_a_low_quantile_of_true_pairs_and_thin_data_calibrates_nothing() -> None:
    cosines = [0.7, 0.85, 0.9, 0.95, 1.0]
    assert calibrated_bound(cosines) == pytest.approx(0.76)
    assert calibrated_bound(cosines, 0.5) == pytest.approx(0.9)
    assert calibrated_bound(cosines[: MIN_CALIBRATION_PAIRS - 1]) is None
    assert -1.0 < DEFAULT_TEXT_BOUND < 1.0
