"""The judges that look at one answer at a time: ScoreJudge (a score per answer from the
digit's odds) and AnswerFirstJudge (the judge's own answer as the reference); and the reading
of token odds they share. Scripted servers only."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletion

from experiments._answer_first_judge import AnswerFirstJudge, expected_rating
from experiments._judge import Judge, JudgeCandidate, JudgeQuery, reliability
from experiments._odds import rating_distribution
from experiments._score_judge import ScoreJudge, expected_score, score_prompt
from llmcache.testing import HashEmbedder

# The prompt's text -> (sampled tokens, each token's top odds or None for no logprobs)
Script = Callable[[str], tuple[list[str], list[dict[str, float]] | None]]


class _Server:
    """A scripted chat-completions client that may return top_logprobs, and records requests."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self.chat = self
        self.completions = self

    def create(self, **kwargs: Any) -> ChatCompletion:
        self.requests.append(kwargs)
        tokens, odds = self.script(kwargs["messages"][0]["content"])
        choice: dict[str, Any] = {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": "".join(tokens)},
        }
        if odds is not None and kwargs.get("logprobs"):
            choice["logprobs"] = {
                "content": [
                    {
                        "token": t,
                        "logprob": 0.0,
                        "bytes": None,
                        "top_logprobs": [
                            {"token": k, "logprob": math.log(p), "bytes": None}
                            for k, p in o.items()
                            if p > 0
                        ],
                    }
                    for t, o in zip(tokens, odds, strict=True)
                ]
            }
        return ChatCompletion.model_validate(
            {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": kwargs["model"],
                "choices": [choice],
            }
        )


def _query(i: int = 0, truth: str = "7", other: str = "2") -> JudgeQuery:
    return JudgeQuery(
        query_id=f"q{i}",
        category="importance",
        group="importance",
        prompt=f"Rate how poignant event {i} is, 1 to 10:",
        truth=truth,
        candidates=[
            JudgeCandidate(label="random", text=other),
            JudgeCandidate(label="true", text=truth),
            JudgeCandidate(label="empty", text=None),
        ],
    )


_SHOWN = re.compile(r"Their response: (.*?)\n\n", re.S)


# ------------------------------------------------------------------------------- token odds


def test_a_rating_of_ten_split_over_two_tokens_is_read_as_ten() -> None:
    choice = {
        "logprobs": {
            "content": [
                {
                    "token": "1",
                    "top_logprobs": [
                        {"token": "1", "logprob": math.log(0.8)},
                        {"token": "9", "logprob": math.log(0.2)},
                    ],
                },
                {"token": "0", "top_logprobs": [{"token": "0", "logprob": math.log(0.5)}]},
            ]
        }
    }
    odds = rating_distribution(choice)
    assert odds == pytest.approx({1: 0.4, 9: 0.2, 10: 0.4})
    assert rating_distribution({"message": {"content": "7"}}) is None  # no odds


# ------------------------------------------------------------------------------- ScoreJudge


def _scores_by_answer(scores: dict[str, dict[str, float]]) -> Script:
    def script(prompt: str) -> tuple[list[str], list[dict[str, float]] | None]:
        shown = _SHOWN.search(prompt)
        assert shown is not None
        odds = scores[shown.group(1)]
        return [max(odds, key=odds.__getitem__)], [odds]

    return script


def test_the_score_judge_ranks_by_the_expected_digit_and_shows_one_answer_at_a_time() -> None:
    server = _Server(_scores_by_answer({"7": {"8": 0.6, "6": 0.4}, "2": {"3": 0.5, "2": 0.5}}))
    judge = ScoreJudge(server, model="m")
    assert isinstance(judge, Judge) and judge.name == "score:m"
    j = judge.judge(_query())
    assert j.ranks == {"true": 1.0, "random": 2.0, "empty": 3.0}
    assert j.reversal_pairs == 0  # no order to reverse
    assert len(server.requests) == 2 and all(r["top_logprobs"] == 10 for r in server.requests)
    # The task comes before the answer, so a server's prompt cache shares it across answers.
    a, b = (r["messages"][0]["content"] for r in server.requests)
    prefix = score_prompt("x", "y", max_chars=99).split("x")[0]
    assert a.startswith(prefix) and a.split("Their response")[0] == b.split("Their response")[0]


def test_equal_scores_tie_and_a_position_blind_judge_is_at_chance() -> None:
    judge = ScoreJudge(_Server(lambda prompt: (["5"], [{"5": 1.0}])), model="m")
    js = [judge.judge(_query(i)) for i in range(20)]
    assert all(j.ranks["true"] == j.ranks["random"] == 1.5 for j in js)
    r = reliability(judge.name, js)
    assert r.true_over_random is not None and r.true_over_random.rate == 0.5
    assert r.verdict == "at chance"


def test_without_odds_the_sampled_digit_counts_and_unreadable_scores_fail() -> None:
    assert expected_score({"message": {"content": " 8"}}) == 8.0
    assert expected_score({"message": {"content": "great"}}) is None
    judge = ScoreJudge(_Server(lambda prompt: (["great"], None)), model="m")
    j = judge.judge(_query())
    assert j.failed and j.error is not None and "no readable score" in j.error


def test_api_errors_are_retried_then_fail_the_judgement() -> None:
    class _Down:
        chat = completions = None

        def __init__(self) -> None:
            self.chat = self.completions = self  # type: ignore[assignment]
            self.calls = 0

        def create(self, **kwargs: Any) -> Any:
            self.calls += 1
            raise openai.APIConnectionError(request=None)  # type: ignore[arg-type]

    down = _Down()
    assert ScoreJudge(down, model="m", max_attempts=3).judge(_query()).failed
    assert down.calls == 3


# ------------------------------------------------------------------------- AnswerFirstJudge


def test_the_answer_first_judge_prefers_the_answer_nearest_its_own_expected_rating() -> None:
    # The judge's own rating: 6 or 8, equally likely -> 7.0; "7" beats "2".
    server = _Server(lambda prompt: (["8"], [{"6": 0.5, "8": 0.5}]))
    judge = AnswerFirstJudge(server, HashEmbedder(dim=32), model="m")
    assert isinstance(judge, Judge) and judge.name == "answer-first:m"
    j = judge.judge(_query())
    assert j.ranks == {"true": 1.0, "random": 2.0, "empty": 3.0}
    # It answers the task as asked, greedily, and never sees the candidates or the truth.
    (request,) = server.requests
    assert request["messages"] == [{"role": "user", "content": _query().prompt}]
    assert request["temperature"] == 0 and request["logprobs"] is True
    # Greedy, so a prompt judged again (the study judges each mode) is not asked again.
    assert judge.judge(_query()).ranks == j.ranks and len(server.requests) == 1


def test_a_judge_that_always_prefers_the_truth_is_reported_at_100_percent() -> None:
    # A judge whose own answer is always the true one.
    truths = {f"Rate how poignant event {i} is, 1 to 10:": str(1 + i % 9) for i in range(20)}
    judge = AnswerFirstJudge(
        _Server(lambda prompt: ([truths[prompt]], None)), HashEmbedder(dim=32), model="m"
    )
    js = [judge.judge(_query(i, truth=str(1 + i % 9), other="10")) for i in range(20)]
    r = reliability(judge.name, js)
    assert r.true_over_random is not None and r.true_over_random.rate == 1.0
    assert r.verdict == "above chance"


def test_a_one_rating_answer_becomes_its_expectation_and_other_answers_stay_as_given() -> None:
    odds = [{"{": 1.0}, {"3": 0.5, "5": 0.5}, {"}": 1.0}]
    choice = {
        "message": {"content": '{"score": 3}'},
        "logprobs": {
            "content": [
                {
                    "token": t,
                    "top_logprobs": [{"token": k, "logprob": math.log(p)} for k, p in o.items()],
                }
                for t, o in zip(["{", "3", "}"], odds, strict=True)
            ]
        },
    }
    assert expected_rating(choice) == '{"score": 4.0}'
    assert expected_rating({"message": {"content": "4\n\nBecause it matters."}}) == "4"
    plan = '{"start": "06:00", "activity": "wake up"}'
    assert expected_rating({"message": {"content": plan}}) == plan
    assert expected_rating({"message": {"content": "  "}}) is None


def test_no_answer_of_its_own_fails_the_judgement() -> None:
    judge = AnswerFirstJudge(_Server(lambda prompt: ([""], None)), HashEmbedder(dim=32), model="m")
    j = judge.judge(_query())
    assert j.failed and j.empty == ["empty"]


@pytest.mark.parametrize(
    ("protocol", "kind"), [("score", ScoreJudge), ("answer-first", AnswerFirstJudge)]
)
def test_the_study_asks_with_the_protocol_it_is_told(
    tmp_path: Any, protocol: str, kind: type
) -> None:
    from experiments import QUICK
    from experiments._judge_endpoint import JudgeEndpoint
    from experiments._reproduce import JUDGE_PROTOCOLS, Study

    assert protocol in JUDGE_PROTOCOLS
    endpoint = JudgeEndpoint(model="judge-x", base_url="http://127.0.0.1:9/v1")
    study = Study(QUICK, tmp_path, embedder=HashEmbedder(), judge=endpoint, judge_protocol=protocol)
    wrong = Study(QUICK, tmp_path, embedder=HashEmbedder(), judge=endpoint, judge_protocol="vote")
    try:
        judges = study._judges("compare")
        assert isinstance(judges[1], kind) and judges[1].model == "judge-x"
        with pytest.raises(ValueError, match="unknown judge protocol"):
            wrong._judges("compare")
    finally:
        study.close()
        wrong.close()


def test_the_report_says_a_one_answer_judge_shows_no_order() -> None:
    from experiments._report import _judge_quality_lines

    judge = ScoreJudge(_Server(lambda prompt: (["5"], [{"5": 1.0}])), model="m")
    rel = {judge.name: reliability(judge.name, [judge.judge(_query(i)) for i in range(10)])}
    (row,) = [
        line for line in _judge_quality_lines(rel, source="x") if line.startswith("| score:m")
    ]
    assert "no order shown" in row and "at chance" in row
