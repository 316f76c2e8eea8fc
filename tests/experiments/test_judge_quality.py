"""Judge quality before any judge figure: reversal agreement, the true answer against a random
same-table one, agreement with the reference judge, each with its interval; a judge not shown
above chance has its TrueSkill figures printed as "not a finding" (scripted judges, no model)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from experiments import Profile
from experiments._judge import (
    JudgeCandidate,
    Judgement,
    JudgeQuery,
    LLMJudge,
    ReferenceJudge,
    reliability,
)
from experiments._report import ReportContext, StudyResults, build_report
from experiments._results import CompareResult, CorrelationResult, JudgeReliability
from experiments._trueskill import rating_table
from llmcache.testing import FakeOpenAI, HashEmbedder

_BLOCK = re.compile(r"Response (\d+): (.*?)(?=\n\nResponse \d+: |\n\nRank the responses)", re.S)
LABELS = ["full", "keyword", "random", "true"]
MARK = "not a finding: the judge is at chance"


def _n(request: dict[str, Any]) -> int:
    schema = request["response_format"]["json_schema"]["schema"]
    return int(schema["properties"]["ranking"]["maxItems"])


def by_position(request: dict[str, Any]) -> str:
    """A judge that answers by position alone: the order it was shown is its ranking."""
    return json.dumps({"ranking": list(range(1, _n(request) + 1))})


def truth_first(request: dict[str, Any]) -> str:
    """A judge that always finds the true answer (here: the one marked TRUE), rest by text."""
    shown = [text for _, text in _BLOCK.findall(request["messages"][0]["content"])]
    order = sorted(range(len(shown)), key=lambda i: (not shown[i].startswith("TRUE"), shown[i]))
    return json.dumps({"ranking": [i + 1 for i in order]})


def _queries(n: int = 40) -> list[JudgeQuery]:
    out = []
    for i in range(n):
        texts = {
            "full": f"full answer {i} " + "f" * (i % 7),
            "keyword": f"keyword answer {i} " + "k" * (i % 5),
            "random": f"some other answer {i % 3}",
            "true": f"TRUE answer {i}",
        }
        out.append(
            JudgeQuery(
                query_id=f"compare:4:{i}",
                category="lunch",
                group="planning" if i % 2 else "importance",
                prompt="What does Alice order for lunch?",
                truth=texts["true"],
                candidates=[JudgeCandidate(label=k, text=v) for k, v in texts.items()],
            )
        )
    return out


def _judged(answer: Any) -> tuple[dict[str, list[Judgement]], dict[str, JudgeReliability]]:
    queries = _queries()
    judges = [ReferenceJudge(HashEmbedder()), LLMJudge(FakeOpenAI(answer), model="m")]
    judged = {j.name: [j.judge(q) for q in queries] for j in judges}
    rel = {
        name: reliability(name, js, other={o: v for o, v in judged.items() if o != name})
        for name, js in judged.items()
    }
    return judged, rel


def _report(judged: dict[str, list[Judgement]], rel: dict[str, JudgeReliability]) -> str:
    tables = {name: rating_table(name, js, labels=LABELS) for name, js in judged.items()}
    cmp_ = CompareResult(
        query_run=4,
        table_run=1,
        queries={"planning": 20, "importance": 20},
        modifier_failures={},
        ratings=tables,
        reliability=rel,
    )
    # The correlation's candidates hold no random answer: its verdict comes from the comparison.
    cor = CorrelationResult(
        regions={"full": LABELS[:3]},
        queries={"full": 40},
        filled={"full": {lb: 40 for lb in LABELS[:3]}},
        modifier_failures={"full": 0},
        ratings={name: {"full": t} for name, t in tables.items()},
        reliability={
            name: r.model_copy(update={"true_over_random": None}) for name, r in rel.items()
        },
    )
    ctx = ReportContext(
        profile=Profile(name="small", runs=3, days=0.5, agents=["Ann Lee"], escalate=False),
        llm="a test model",
        judge_model="m",
        embedder="hash",
        command="python -m experiments reproduce --profile small",
    )
    return build_report(StudyResults(compare=cmp_, correlation=cor), ctx)


def test_a_judge_that_answers_by_position_alone_is_reported_at_chance() -> None:
    judged, rel = _judged(by_position)
    r = rel["llm:m"]
    # Every pair is flipped when the order is reversed; combined, every candidate ties.
    assert r.reversal is not None and r.reversal.rate == 0.0 and r.reversal.pairs == 40 * 6
    assert r.true_over_random is not None
    assert r.true_over_random.rate == 0.5 and r.true_over_random.pairs == 40
    assert r.true_over_random.low < 0.5 < r.true_over_random.high
    assert r.verdict == "at chance"
    # Ties everywhere: nothing to compare with the reference judge.
    assert r.reference_agreement is None
    assert rel["reference"].verdict == "above chance"

    text = _report(judged, rel)
    assert "| llm:m | 0.0% [0.0%, 1.6%] of 240 pairs | 50.0% [" in text
    # Its TrueSkill lines (Fig 3.4/3.5 and 3.10/3.11) and side-by-side rows are marked...
    marked = [line for line in text.splitlines() if MARK in line]
    assert any(line.startswith("- llm:m judge (not a finding") for line in marked)
    assert any(line.startswith("- llm:m judge, full (not a finding") for line in marked)
    assert any("Fig 3.10" in line for line in marked)
    assert any("Fig 3.4/3.5" in line for line in marked)
    assert "- llm:m: at chance; its TrueSkill figures are printed but are not findings." in text
    # ...and the reference judge's are not.
    assert not any("reference" in line.split("|")[1] for line in marked if line.startswith("|"))
    assert "- reference: above chance; its TrueSkill figures are findings." in text
    # Which of the thesis's comparisons survive: the reference judge's, not this judge's.
    assert "- llm:m judge: none, the judge is at chance." in text
    assert "- llm:m judge, full: none, the judge is at chance." in text
    (survives,) = [
        line
        for line in text.splitlines()
        if line.startswith("- reference judge: ") and "±" not in line  # not the ratings line
    ]
    assert survives.endswith("true above full; true above keyword.")


def test_a_judge_that_always_prefers_the_true_answer_is_reported_at_100_percent() -> None:
    judged, rel = _judged(truth_first)
    r = rel["llm:m"]
    assert r.true_over_random is not None and r.true_over_random.rate == 1.0
    assert r.true_over_random.low > 0.5
    assert r.verdict == "above chance"
    assert r.reversal is not None and r.reversal.rate == 1.0  # reads content, not position
    assert r.reference_agreement is not None and r.reference_agreement.pairs > 0

    text = _report(judged, rel)
    assert "100.0% [91.2%, 100.0%] of 40 pairs | " in text
    assert "- llm:m: above chance; its TrueSkill figures are findings." in text
    assert "not a finding" not in text
    (survives,) = [
        line for line in text.splitlines() if line.startswith("- llm:m judge: ") and "±" not in line
    ]
    assert "full above random" in survives and "true above keyword" in survives


def test_verdicts_follow_the_interval() -> None:
    from experiments._judge import pair_share

    def verdict(score: float, pairs: int) -> str:
        return JudgeReliability(
            judge="j", shuffle_agreement=None, true_over_random=pair_share(score, pairs)
        ).verdict

    assert verdict(30, 40) == "above chance"
    assert verdict(22, 40) == "at chance"
    assert verdict(5, 40) == "below chance"
    assert verdict(0, 0) == "not measured"
    assert JudgeReliability(judge="j", shuffle_agreement=None).verdict == "not measured"


def test_old_results_without_judge_quality_still_load() -> None:
    old = {"judge": "llm:m", "shuffle_agreement": 0.46, "agreement_with": {"reference": 0.5}}
    r = JudgeReliability.model_validate(old)
    assert r.reversal is None and r.verdict == "not measured"


@pytest.mark.parametrize("ties", [0, 3])
def test_a_tie_counts_half(ties: int) -> None:
    from experiments._judge import pair_share

    share = pair_share(10 + ties / 2, 20 + ties)
    assert share.rate == pytest.approx((10 + ties / 2) / (20 + ties))
    assert share.low < share.rate < share.high
