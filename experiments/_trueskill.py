"""TrueSkill ratings of candidate labels from many judgements, with the study's settings.

Each judgement is one free-for-all match: every candidate label is a one-player team, placed
by its rank (equal ranks are draws). The study doubled TrueSkill's default ``beta`` (25/6 ->
25/3): the skill gap that gives a 76% chance of winning is twice as wide, so a single
surprising ranking moves the ratings less.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import trueskill

from ._judge import Judgement
from ._results import RatingTable, SkillRating

__all__ = ["STUDY_ENV", "rate", "rating_table"]

# Our own environment object: ``trueskill.setup`` would change the package's global one for
# every other user in the process.
STUDY_ENV: Any = trueskill.TrueSkill(
    mu=25.0,
    sigma=25.0 / 3,
    beta=25.0 / 3,  # doubled from the package default 25/6, as in the study
    tau=25.0 / 300,
    draw_probability=0.10,
)


def _dense_ranks(ranks: Sequence[float]) -> list[int]:
    """Float ranks (1 = best, ties equal) -> 0-based dense integers, which trueskill sorts."""
    levels = {r: i for i, r in enumerate(sorted(set(ranks)))}
    return [levels[r] for r in ranks]


def rate(
    judgements: Iterable[Judgement], *, labels: Sequence[str] | None = None
) -> dict[str, SkillRating]:
    """The TrueSkill rating of every label, from the judgements in the order given.

    TrueSkill is an online update, so the result depends on that order (slightly, once many
    matches are in); callers that want reproducible numbers pass a fixed order. Failed
    judgements, and those ranking fewer than two labels (no match to play), are skipped.
    ``games`` counts the matches a label took part in. The result holds ``labels`` first, in
    their order (any never seen keep the prior rating with ``games=0``), then every other
    label seen, in order of first appearance.
    """
    ratings: dict[str, Any] = {label: STUDY_ENV.create_rating() for label in labels or ()}
    games: dict[str, int] = defaultdict(int)
    for j in judgements:
        if j.failed or len(j.ranks) < 2:
            continue
        players = list(j.ranks)
        for label in players:
            if label not in ratings:
                ratings[label] = STUDY_ENV.create_rating()
            games[label] += 1
        teams = [(ratings[label],) for label in players]
        new = STUDY_ENV.rate(teams, ranks=_dense_ranks([j.ranks[p] for p in players]))
        for label, (rating,) in zip(players, new, strict=True):
            ratings[label] = rating
    return {
        label: SkillRating(mu=float(r.mu), sigma=float(r.sigma), games=games[label])
        for label, r in ratings.items()
    }


def rating_table(
    judge_name: str, judgements: Iterable[Judgement], *, labels: Sequence[str] | None = None
) -> RatingTable:
    """Ratings overall and per group (``Judgement.group``), each rated in the given order.

    ``judgements`` counts the judgements that went into the overall ratings, ``failures`` the
    failed ones (recorded, never rated).
    """
    items = list(judgements)
    by_group: dict[str, list[Judgement]] = defaultdict(list)
    for j in items:
        by_group[j.group].append(j)
    return RatingTable(
        judge=judge_name,
        overall=rate(items, labels=labels),
        per_group={group: rate(js, labels=labels) for group, js in sorted(by_group.items())},
        judgements=sum(1 for j in items if not j.failed and len(j.ranks) >= 2),
        failures=sum(1 for j in items if j.failed),
    )
