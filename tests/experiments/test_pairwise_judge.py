"""The pairwise judge: both orders combined, the model's A/B odds from logprobs with the sampled
letter as fallback, ties; scripted servers only."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletion

from experiments._judge import Judge, JudgeCandidate, JudgeQuery, reliability
from experiments._pairwise_judge import PairwiseJudge, pair_prompt, preference
from experiments._results import JudgeReliability

_SHOWN = re.compile(r"Response A: (.*?)\n\nResponse B: (.*?)\n\nWhich response", re.S)

# (A's text, B's text) -> (sampled letter, {letter: probability} or None for no logprobs)
Script = Callable[[str, str], tuple[str, dict[str, float] | None]]


class _Server:
    """A scripted chat-completions client that may return top_logprobs, and records requests."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self.chat = self
        self.completions = self

    def create(self, **kwargs: Any) -> ChatCompletion:
        self.requests.append(kwargs)
        shown = _SHOWN.search(kwargs["messages"][0]["content"])
        assert shown is not None
        letter, odds = self.script(shown.group(1), shown.group(2))
        choice: dict[str, Any] = {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": letter},
        }
        if odds is not None and kwargs.get("logprobs"):
            top = [
                {"token": t, "logprob": math.log(p), "bytes": None}
                for t, p in odds.items()
                if p > 0
            ]
            choice["logprobs"] = {
                "content": [{"token": letter, "logprob": 0.0, "bytes": None, "top_logprobs": top}]
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


def _query(i: int = 0) -> JudgeQuery:
    texts = {
        "full": f"full answer {i}",
        "random": f"some other answer {i}",
        "true": f"TRUE answer {i}",
    }
    return JudgeQuery(
        query_id=f"q{i}",
        category="lunch",
        group="planning",
        prompt="What does Alice order for lunch?",
        truth=texts["true"],
        candidates=[JudgeCandidate(label=k, text=v) for k, v in texts.items()],
    )


def always_a(first: str, second: str) -> tuple[str, dict[str, float] | None]:
    return "A", None


def finds_truth(first: str, second: str) -> tuple[str, dict[str, float] | None]:
    """Sure of the true answer; between two others, leans to the first shown (70/30)."""
    if first.startswith("TRUE"):
        return "A", {"A": 0.9, "B": 0.1}
    if second.startswith("TRUE"):
        return "B", {"A": 0.1, "B": 0.9}
    return "A", {"A": 0.7, "B": 0.3}


def test_it_is_a_judge_and_asks_for_logprobs_only_when_told() -> None:
    server = _Server(finds_truth)
    judge = PairwiseJudge(server, model="m")
    assert isinstance(judge, Judge) and judge.name == "pairwise:m"
    judge.judge(_query())
    assert all(r["logprobs"] is True and r["top_logprobs"] == 5 for r in server.requests)
    plain = _Server(finds_truth)
    PairwiseJudge(plain, model="m", logprobs=False).judge(_query())
    assert not any("logprobs" in r for r in plain.requests)


def test_each_pair_is_asked_in_both_orders_or_one_seeded_order() -> None:
    server = _Server(finds_truth)
    PairwiseJudge(server, model="m").judge(_query())
    assert len(server.requests) == 3 * 2
    one = _Server(finds_truth)
    PairwiseJudge(one, model="m", both_orders=False).judge(_query())
    assert len(one.requests) == 3


def test_a_judge_that_always_says_a_ends_in_ties_at_chance() -> None:
    judge = PairwiseJudge(_Server(always_a), model="m")
    js = [judge.judge(_query(i)) for i in range(30)]
    assert all(j.ranks == {"full": 2.0, "random": 2.0, "true": 2.0} for j in js)
    assert all(j.reversal_pairs == 3 and j.reversal_same == 0.0 for j in js)
    r = reliability(judge.name, js)
    assert r.reversal is not None and r.reversal.rate == 0.0
    assert r.true_over_random is not None and r.true_over_random.rate == 0.5
    assert r.verdict == "at chance"


def test_the_odds_decide_and_cancel_position_bias() -> None:
    judge = PairwiseJudge(_Server(finds_truth), model="m")
    js = [judge.judge(_query(i)) for i in range(30)]
    # The true answer wins every pair; full vs random is a 70/30 lean to whichever came
    # first, which the reversed order cancels: a tie.
    assert all(j.ranks == {"true": 1.0, "full": 2.5, "random": 2.5} for j in js)
    r = reliability(judge.name, js)
    assert r.true_over_random is not None and r.true_over_random.rate == 1.0
    assert r.verdict == "above chance"
    # Per pair in single order: the two true pairs agree, full-vs-random flips.
    assert r.reversal is not None and r.reversal.rate == pytest.approx(2 / 3)


def test_without_logprobs_the_sampled_letter_counts() -> None:
    def sampled(first: str, second: str) -> tuple[str, dict[str, float] | None]:
        return ("B" if second.startswith("TRUE") else "A"), None

    j = PairwiseJudge(_Server(sampled), model="m").judge(_query())
    assert j.ranks["true"] == 1.0


def test_preference_reads_odds_ties_and_letters() -> None:
    def choice(content: str, odds: dict[str, float] | None) -> dict[str, Any]:
        c: dict[str, Any] = {"message": {"content": content}}
        if odds is not None:
            top = [{"token": t, "logprob": math.log(p)} for t, p in odds.items()]
            c["logprobs"] = {"content": [{"token": content, "top_logprobs": top}]}
        return c

    # Other tokens among the top five are ignored; " A" and "A" are the same letter.
    odds = {" A": 0.3, "A": 0.3, "B": 0.2, "T": 0.1, "The": 0.1}
    assert preference(choice("A", odds), ties=True) == pytest.approx((0.6 + 0.05) / 0.9)
    assert preference(choice("A", odds), ties=False) == pytest.approx(0.6 / 0.8)
    assert preference(choice("T", None), ties=True) == 0.5
    assert preference(choice("T", None), ties=False) is None
    assert preference(choice("b", None), ties=True) == 0.0
    assert preference(choice("", None), ties=True) is None
    # Logprobs without any letter among them fall back to the text.
    assert preference(choice("B", {"The": 0.9}), ties=True) == 0.0


def test_an_unreadable_pair_fails_the_judgement_and_api_errors_are_retried() -> None:
    def mumbles(first: str, second: str) -> tuple[str, dict[str, float] | None]:
        return "Well", None

    server = _Server(mumbles)
    j = PairwiseJudge(server, model="m", max_attempts=2).judge(_query())
    assert j.failed and j.error is not None and "no readable preference" in j.error
    assert len(server.requests) == 2 * 2  # one pair, both orders, two attempts each

    class _Down:
        def __init__(self) -> None:
            self.chat = self
            self.completions = self

        def create(self, **kwargs: Any) -> ChatCompletion:
            raise openai.APIConnectionError(request=None)  # type: ignore[arg-type]

    assert PairwiseJudge(_Down(), model="m").judge(_query()).failed


def test_ties_are_offered_only_when_allowed() -> None:
    assert '"T"' in pair_prompt("p", "a", "b", ties=True, max_chars=10)
    assert '"T"' not in pair_prompt("p", "a", "b", ties=False, max_chars=10)
    assert "[…]" in pair_prompt("p", "a" * 50, "b", ties=True, max_chars=10)


def test_the_verdict_model_is_the_shared_one() -> None:
    r = reliability("pairwise:m", [])
    assert isinstance(r, JudgeReliability) and r.verdict == "not measured"


def test_the_study_asks_pairwise_only_when_told(tmp_path: Any) -> None:
    from experiments import QUICK
    from experiments._judge import LLMJudge
    from experiments._judge_endpoint import JudgeEndpoint
    from experiments._reproduce import Study
    from llmcache.testing import HashEmbedder

    endpoint = JudgeEndpoint(model="judge-x", base_url="http://127.0.0.1:9/v1")
    default = Study(QUICK, tmp_path, embedder=HashEmbedder(), judge=endpoint)
    pairwise = Study(
        QUICK, tmp_path, embedder=HashEmbedder(), judge=endpoint, judge_protocol="pairwise"
    )
    try:
        assert [type(j) for j in default._judges("compare")][1] is LLMJudge
        judges = pairwise._judges("compare")
        assert isinstance(judges[1], PairwiseJudge) and judges[1].model == "judge-x"
    finally:
        default.close()
        pairwise.close()
