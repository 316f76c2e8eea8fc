"""TrueSkill ratings from judgements, with the study's environment."""

from __future__ import annotations

import pytest
import trueskill

import experiments._trueskill as rating_module
from experiments._judge import Judgement
from experiments._trueskill import STUDY_ENV, rate, rating_table


def _j(
    ranks: dict[str, float], *, group: str = "g", failed: bool = False, qid: str = "q"
) -> Judgement:
    return Judgement(
        query_id=qid,
        group=group,
        judge="x",
        ranks={} if failed else ranks,
        failed=failed,
        error="no valid ranking" if failed else None,
    )


def test_public_names_exist() -> None:
    for name in rating_module.__all__:
        assert hasattr(rating_module, name), name


def test_environment_has_the_study_parameters() -> None:
    assert STUDY_ENV.mu == 25.0
    assert STUDY_ENV.sigma == pytest.approx(25 / 3)
    assert STUDY_ENV.beta == pytest.approx(25 / 3)
    assert STUDY_ENV.tau == pytest.approx(25 / 300)
    assert STUDY_ENV.draw_probability == pytest.approx(0.10)
    assert STUDY_ENV is not trueskill.global_env()


def test_rating_leaves_the_global_environment_alone() -> None:
    before = trueskill.global_env()
    rate([_j({"a": 1, "b": 2})])
    after = trueskill.global_env()
    assert after is before
    assert after.beta == pytest.approx(25 / 6)


def test_one_match_equals_trueskill_with_the_study_env() -> None:
    out = rate([_j({"a": 1, "b": 2})])
    (a,), (b,) = STUDY_ENV.rate(
        [(STUDY_ENV.create_rating(),), (STUDY_ENV.create_rating(),)], ranks=[0, 1]
    )
    assert out["a"].mu == pytest.approx(a.mu)
    assert out["b"].mu == pytest.approx(b.mu)
    assert out["a"].sigma == pytest.approx(a.sigma)
    # The doubled beta makes one win count for less than under the package default.
    default = trueskill.TrueSkill()
    (d,), _ = default.rate([(default.create_rating(),), (default.create_rating(),)], ranks=[0, 1])
    assert 25 < out["a"].mu < d.mu


def test_a_constant_winner_rises_and_everyone_gets_surer() -> None:
    out = rate([_j({"A": 1, "B": 2}, qid=str(i)) for i in range(20)])
    assert out["A"].mu > 25 > out["B"].mu
    assert out["A"].mu - out["B"].mu > 10
    assert out["A"].sigma < 25 / 3 and out["B"].sigma < 25 / 3
    assert out["A"].games == out["B"].games == 20


def test_ties_keep_the_ratings_together() -> None:
    out = rate([_j({"A": 1.5, "B": 1.5}, qid=str(i)) for i in range(20)])
    assert out["A"].mu == pytest.approx(25, abs=1e-6)
    assert out["B"].mu == pytest.approx(out["A"].mu, abs=1e-6)
    assert out["A"].sigma < 25 / 3


def test_float_ranks_become_dense_integer_ranks() -> None:
    # Mean positions like 1.5 / 1.5 / 3 are a draw for the first two, then a loss.
    out = rate([_j({"a": 1.5, "b": 1.5, "c": 3.0})])
    direct = STUDY_ENV.rate([(STUDY_ENV.create_rating(),) for _ in range(3)], ranks=[0, 0, 1])
    for label, (r,) in zip("abc", direct, strict=True):
        assert out[label].mu == pytest.approx(r.mu)
        assert out[label].sigma == pytest.approx(r.sigma)


def test_order_matters_and_is_kept() -> None:
    win, loss = _j({"A": 1, "B": 2}), _j({"A": 2, "B": 1})
    forward = rate([win, win, loss])
    backward = rate([loss, win, win])
    assert forward["A"].mu != pytest.approx(backward["A"].mu)


def test_requested_labels_come_first_and_unseen_ones_keep_the_prior() -> None:
    out = rate([_j({"true": 1, "(0.9,0.925]": 2})], labels=["(0.95,0.975]", "(0.9,0.925]"])
    assert list(out) == ["(0.95,0.975]", "(0.9,0.925]", "true"]
    unseen = out["(0.95,0.975]"]
    assert (unseen.mu, unseen.sigma, unseen.games) == (25.0, pytest.approx(25 / 3), 0)
    assert out["true"].games == 1


def test_failed_and_single_label_judgements_are_not_rated() -> None:
    out = rate([_j({}, failed=True), _j({"A": 1}), _j({"A": 1, "B": 2})])
    assert out["A"].games == 1
    assert out["B"].games == 1


def test_rating_table_overall_per_group_and_counts() -> None:
    judgements = [
        _j({"A": 1, "B": 2}, group="planning", qid="1"),
        _j({"A": 1, "B": 2}, group="planning", qid="2"),
        _j({"A": 2, "B": 1}, group="reaction", qid="3"),
        _j({}, group="reaction", failed=True, qid="4"),
    ]
    table = rating_table("reference", iter(judgements), labels=["A", "B", "C"])
    assert table.judge == "reference"
    assert table.judgements == 3
    assert table.failures == 1
    assert set(table.per_group) == {"planning", "reaction"}
    assert table.per_group["planning"]["A"].mu > table.per_group["planning"]["B"].mu
    assert table.per_group["reaction"]["B"].mu > table.per_group["reaction"]["A"].mu
    assert table.per_group["reaction"]["A"].games == 1
    assert table.per_group["planning"]["C"].games == 0
    assert table.overall == rate(judgements, labels=["A", "B", "C"])
    assert table.overall["A"].games == 3
