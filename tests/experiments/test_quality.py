"""The quality step's arithmetic: the sweep, the Wilson interval, the pairwise tally, the text
calibration, and the report's sentences read from a result (never canned)."""

from __future__ import annotations

import pytest

from experiments._data import ALL
from experiments._judge import Judgement
from experiments._quality import Served, calibrate, sweep, tally, thresholds
from experiments._report import _quality_section
from experiments._results import PairwiseTally, QualityResult
from experiments._stats import rate, wilson_interval


def _row(sim: float | None, outcome: str | None, miss: float = 1.0, hit: float = 0.0,
         category: str = "importance score", revise: bool = False) -> Served:  # fmt: skip
    return Served("g", category, sim, outcome, miss, hit, revise)  # type: ignore[arg-type]


def test_wilson_interval() -> None:
    assert wilson_interval(9, 10) == pytest.approx((0.5958, 0.9821), abs=1e-4)
    lo, hi = wilson_interval(0, 5)
    assert lo == 0.0 and 0.4 < hi < 0.45
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_sweep_counts_hits_misses_refusals_and_cost() -> None:
    rows = [
        _row(0.95, "acceptable"),  # a read hit costs nothing
        _row(0.85, "unacceptable"),
        _row(0.95, "refused", miss=2.0, hit=0.5, revise=True, category="plan decomposition"),
        _row(None, None, miss=1.0),  # no table: always a miss
    ]
    serve, mid, high = sweep(rows, [None, 0.9, 0.99])
    # Serve mode: 3 hits; the refused one is answered by the LLM (true, both costs paid).
    assert (serve.hits, serve.refused) == (3, 1)
    assert serve.acceptable.acceptable == 3 and serve.acceptable.answers == 4
    baseline = 1 + 1 + 2 + 1
    assert serve.cost_reduction == pytest.approx(1 - (0 + 0 + 2.5 + 1) / baseline)
    # 0.9: the 0.85 candidate misses and its query gets the truth.
    assert mid.hits == 2 and mid.acceptable.acceptable == 4
    assert mid.cost_reduction == pytest.approx(1 - (0 + 1 + 2.5 + 1) / baseline)
    # Nothing reaches 0.99: every query is a miss, nothing saved, everything acceptable.
    assert high.hits == 0 and high.cost_reduction == pytest.approx(0.0)
    assert high.acceptable.rate == 1.0


def test_untried_hits_stay_out_of_the_rate_and_cost_the_measured_mean() -> None:
    cat = "plan decomposition"
    rows = [
        _row(0.95, "acceptable", miss=4.0, hit=1.0, category=cat, revise=True),
        _row(0.95, "unacceptable", miss=4.0, hit=3.0, category=cat, revise=True),
        _row(0.95, "over budget", miss=4.0, category=cat, revise=True),
    ]
    (serve,) = sweep(rows, [None])
    assert serve.estimated == 1 and serve.acceptable.answers == 2
    assert serve.cost_reduction == pytest.approx(1 - (1 + 3 + 2) / 12)


def test_thresholds_start_with_serve_mode_and_span_the_study_range() -> None:
    levels = thresholds("keyword", 4)
    assert levels == [None, 0.5, 0.625, 0.75, 0.875, 1.0]
    assert thresholds("full", 2) == [None, 0.9, 0.95, 1.0]


def _judgement(ranks: dict[str, float], failed: bool = False) -> Judgement:
    return Judgement(query_id="q", group="g", judge="pairwise", ranks=ranks, failed=failed)


def test_pairwise_tally_disagreement_is_a_tie() -> None:
    js = [
        _judgement({"cached": 1.0, "true": 2.0}),
        _judgement({"cached": 1.5, "true": 1.5}),  # the two orders disagreed
        _judgement({"cached": 2.0, "true": 1.0}),
        _judgement({}, failed=True),
    ]
    assert tally(js) == PairwiseTally(cached=1, ties=1, true=1, failures=1)


def test_rate_keeps_counts_and_interval() -> None:
    r = rate(3, 4)
    assert (r.acceptable, r.answers, r.rate) == (3, 4, 0.75)
    assert r.low < 0.75 < r.high
    assert rate(0, 0).rate is None


def test_calibration_uses_pairs_of_true_answers_of_the_same_query(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from experiments._data import Prompt

    def prompt(run: int, summary: str, statements: str) -> Prompt:
        return Prompt(
            run=run, index=0, category="memory summary", group="memory summary", agent="A",
            modifier="read", keywords=[statements], options=None,
            messages=[{"role": "user", "content": statements}],
            response=f'{{"summary": "{summary}"}}', sim_minute=0, elapsed_minutes=0,
            observed_actors=0, metadata={}, model="m", escalated=False, attempts=1,
            prompt_tokens=1, completion_tokens=1, cost_usd=0.0,
        )  # fmt: skip

    # Six queries, each answered in two runs: six true pairs of memory summaries.
    runs = [[prompt(r, f"summary {q} run {r}", f"s{q}") for q in range(6)] for r in (1, 2)]
    seen: list[tuple[str, str]] = []

    def similarity(a: str, b: str) -> float:
        seen.append((a, b))
        return 0.5 + 0.05 * len(seen)

    cal = calibrate(runs, similarity)
    assert len(seen) == 6 and all(a.split(" run")[0] == b.split(" run")[0] for a, b in seen)
    own = cal["memory summary"]
    assert (own.pairs, own.source) == (6, "category")
    assert own.bound == pytest.approx(0.575)  # the 10th percentile of 0.55 .. 0.80
    # Categories without pairs of their own take the pooled bound.
    assert cal["high-level questions"].source == "pooled"
    assert cal["high-level questions"].bound == own.bound
    # No pairs at all: the documented default, and the report must say the data is thin.
    thin = calibrate([runs[0]], similarity)
    assert {c.source for c in thin.values()} == {"default"}


def _result(serve_rate: tuple[int, int], random_rate: tuple[int, int]) -> QualityResult:
    def curve(k: int, n: int) -> list[dict[str, object]]:
        return [
            {"threshold": None, "hits": n, "refused": 0, "estimated": 0,
             "cost_reduction": 0.97, "acceptable": rate(k, n).model_dump()},
            {"threshold": 0.9, "hits": 1, "refused": 0, "estimated": 0,
             "cost_reduction": 0.05, "acceptable": rate(n, n).model_dump()},
        ]  # fmt: skip

    k, n = serve_rate
    return QualityResult.model_validate(
        {
            "query_run": 3,
            "table_run": 1,
            "queries": {"importance": n},
            "calibration": {
                "memory summary": {"pairs": 1, "bound": 0.8, "source": "default"},
            },
            "curves": {"keyword": {"importance": curve(k, n), ALL: curve(k, n)}},
            "random": {
                "importance": rate(*random_rate).model_dump(),
                ALL: rate(*random_rate).model_dump(),
            },
            "revise_calls": 0,
        }
    )


def test_the_report_reads_its_sentences_off_the_result() -> None:
    good = "\n".join(_quality_section(_result((99, 100), (40, 100)), None).lines)
    assert "**Headline**" in good and "99.0% [" in good and "97.0% cost cut" in good
    assert "goal (≥ 90% cut) met" in good
    assert "Calibration data is thin" in good and "default" in good
    # Worse than random: the report says so.
    bad = "\n".join(_quality_section(_result((10, 100), (60, 100)), None).lines)
    assert "fewer acceptable answers than a random answer" in bad
    assert "goal (≥ 90% cut) missed" in bad
    assert "identical query" not in bad  # not measured: no sentence
    # The LLM's agreement with itself, when measured, is stated with its counts.
    own = _result((10, 100), (60, 100)).model_copy(
        update={"reanswer": {ALL: rate(31, 50), "importance": rate(31, 50)}}
    )
    text = "\n".join(_quality_section(own, None).lines)
    assert "identical query" in text and "62.0% [" in text and "(31/50) of pairs" in text


def test_the_readme_documents_every_cached_categorys_tolerance() -> None:
    from pathlib import Path

    from agent_core.templates import TEMPLATES

    text = (Path(__file__).resolve().parents[2] / "experiments" / "README.md").read_text()
    table = text.split("| category | tolerance |", 1)[1].split("\n\n", 1)[0]
    for t in TEMPLATES:
        if not t.bypass:
            assert t.category in table, t.category


def test_reanswers_judge_true_answers_of_one_query_against_each_other() -> None:
    from agent_core import TextAgreement, TownCall
    from experiments._data import Prompt
    from experiments._quality import reanswers

    call = TownCall(category="importance score", agent="A", summary_block="Name: A", slots={})

    def prompt(run: int, index: int, text: str, score: int) -> Prompt:
        return Prompt(
            run=run, index=index, category="importance score", group="importance", agent="A",
            modifier="read", keywords=[text], options=None,
            messages=[{"role": "user", "content": text}],
            response=f'{{"score": {score}}}', sim_minute=0, elapsed_minutes=0,
            observed_actors=0, metadata=call.record_metadata(), model="m", escalated=False,
            attempts=1,
            prompt_tokens=1, completion_tokens=1, cost_usd=0.0,
        )  # fmt: skip

    # One query asked in three runs (scores 3, 4, 7: only 3 and 4 lie within ±1 of each
    # other), one asked twice with equal scores, one asked once (no pair).
    runs = [
        [prompt(1, 0, "q", 3), prompt(1, 1, "r", 5), prompt(1, 2, "once", 1)],
        [prompt(2, 0, "q", 4), prompt(2, 1, "r", 5)],
        [prompt(3, 0, "q", 7)],
    ]
    text = TextAgreement(lambda a, b: 1.0, 0.5)
    got = reanswers(runs, lambda category: text)
    assert set(got) == {"importance", ALL}
    assert (got["importance"].acceptable, got["importance"].answers) == (2, 4)
    assert got[ALL] == got["importance"]
    assert reanswers([runs[0]], lambda category: text) == {}
