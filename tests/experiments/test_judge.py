"""The judges: the LLM judge's parsing, retries and position-bias control; the reference judge;
agreement between presentations and between judges."""

from __future__ import annotations

import json
import re
from typing import Any

import openai
import pytest

import experiments._judge as judge_module
from experiments._judge import (
    Judge,
    JudgeCandidate,
    Judgement,
    JudgeQuery,
    LLMJudge,
    ReferenceJudge,
    pairwise_agreement,
    ranking_prompt,
    reliability,
)
from llmcache.testing import FakeOpenAI, HashEmbedder, scripted

PROMPT = "Alice Wilson is at the cafe. What does she order for lunch? Answer in JSON."

_BLOCK = re.compile(r"Response (\d+): (.*?)(?=\n\nResponse \d+: |\n\nRank the responses)", re.S)


def _query(
    texts: dict[str, str | None], *, query_id: str = "q1", truth: str | None = None
) -> JudgeQuery:
    return JudgeQuery(
        query_id=query_id,
        category="lunch",
        group="planning",
        prompt=PROMPT,
        truth=truth if truth is not None else str(texts.get("true") or ""),
        candidates=[JudgeCandidate(label=k, text=v) for k, v in texts.items()],
    )


def _n(request: dict[str, Any]) -> int:
    schema = request["response_format"]["json_schema"]["schema"]
    return int(schema["properties"]["ranking"]["maxItems"])


def _shown(request: dict[str, Any]) -> list[str]:
    """The response texts in the order the prompt presented them."""
    content = request["messages"][0]["content"]
    blocks = _BLOCK.findall(content)
    assert [int(i) for i, _ in blocks] == list(range(1, len(blocks) + 1))
    return [text for _, text in blocks]


def position_one(request: dict[str, Any]) -> str:
    """A judge with pure position bias: whatever comes first is best."""
    return json.dumps({"ranking": list(range(1, _n(request) + 1))})


def longest_first(request: dict[str, Any]) -> str:
    """A judge that reads the answers: the longest text is best."""
    shown = _shown(request)
    order = sorted(range(len(shown)), key=lambda i: -len(shown[i]))
    return json.dumps({"ranking": [i + 1 for i in order]})


FOUR = {"a": "x" * 10, "b": "y" * 20, "c": "z" * 30, "true": "w" * 40}


# --------------------------------------------------------------------------- models, protocol


def test_public_names_exist() -> None:
    for name in judge_module.__all__:
        assert hasattr(judge_module, name), name


def test_both_judges_satisfy_the_protocol() -> None:
    assert isinstance(LLMJudge(FakeOpenAI(), model="m"), Judge)
    assert isinstance(ReferenceJudge(HashEmbedder()), Judge)


def test_query_rejects_duplicate_labels() -> None:
    with pytest.raises(ValueError, match="unique"):
        JudgeQuery(
            query_id="q",
            category="c",
            group="g",
            prompt="p",
            truth="t",
            candidates=[JudgeCandidate(label="a", text="x"), JudgeCandidate(label="a", text="y")],
        )


def test_constructor_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        LLMJudge(FakeOpenAI(), model="m", shuffles=0)
    with pytest.raises(ValueError):
        LLMJudge(FakeOpenAI(), model="m", max_attempts=0)


# --------------------------------------------------------------------------- the request


def test_request_carries_the_ranking_schema_and_parameters() -> None:
    fake = FakeOpenAI(position_one)
    LLMJudge(fake, model="judge-m", max_tokens=50, temperature=0.0).judge(_query(FOUR))
    request = fake.calls[0]
    assert request["model"] == "judge-m"
    assert request["max_tokens"] == 50
    assert request["temperature"] == 0.0
    fmt = request["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["name"] == "ranking"
    assert fmt["json_schema"]["strict"] is True
    schema = fmt["json_schema"]["schema"]
    assert schema["required"] == ["ranking"]
    ranking = schema["properties"]["ranking"]
    assert ranking["items"] == {"type": "integer", "enum": [1, 2, 3, 4]}
    assert ranking["minItems"] == ranking["maxItems"] == 4


def test_temperature_is_not_sent_unless_set() -> None:
    fake = FakeOpenAI(position_one)
    LLMJudge(fake, model="m").judge(_query(FOUR))
    assert "temperature" not in fake.calls[0]


def test_prompt_has_task_numbered_responses_and_instruction() -> None:
    text = ranking_prompt("What now?", ["eat", "sleep", "work"])
    assert text.index("What now?") < text.index("Response 1: eat")
    assert text.index("Response 1: eat") < text.index("Response 2: sleep")
    assert text.index("Response 3: work") < text.index("Rank the responses from best to worst")
    assert '{"ranking": [3, 1, 2]}' in text


def test_long_candidates_are_truncated_in_the_prompt() -> None:
    fake = FakeOpenAI(position_one)
    query = _query({"a": "A" * 5000, "true": "short answer"})
    LLMJudge(fake, model="m", max_chars=300).judge(query)
    content = fake.calls[0]["messages"][0]["content"]
    assert "A" * 300 in content
    assert "A" * 301 not in content


# --------------------------------------------------------------------------- bias control


def test_presentations_are_a_seeded_shuffle_then_its_exact_reverse() -> None:
    fake = FakeOpenAI(position_one)
    judge = LLMJudge(fake, model="m", seed=3)
    query = _query(FOUR)
    judge.judge(query)
    assert len(fake.calls) == 2
    label_of = {text: label for label, text in FOUR.items()}
    first = [label_of[t] for t in _shown(fake.calls[0])]
    second = [label_of[t] for t in _shown(fake.calls[1])]
    assert second == first[::-1]
    assert sorted(first) == sorted(FOUR)
    # Seeded by seed and query id: the same orders again, and another seed shuffles otherwise.
    assert judge.presentation_orders(query) == [first, second]
    assert LLMJudge(fake, model="m", seed=3).presentation_orders(query)[0] == first
    others = {
        tuple(LLMJudge(fake, model="m", seed=s).presentation_orders(query)[0]) for s in range(8)
    }
    assert len(others) > 1


def test_more_shuffles_add_new_seeded_orders() -> None:
    fake = FakeOpenAI(longest_first)
    j = LLMJudge(fake, model="m", shuffles=4).judge(_query(FOUR))
    assert len(fake.calls) == 4
    assert len(j.presentations) == 4
    assert j.agreement == 1.0


def test_pure_position_bias_ends_in_ties_and_zero_agreement() -> None:
    fake = FakeOpenAI(position_one)
    j = LLMJudge(fake, model="m").judge(_query(FOUR))
    assert not j.failed
    assert j.agreement == 0.0
    # Mirrored positions average out: every candidate sits at (n + 1) / 2.
    assert j.ranks == {label: 2.5 for label in FOUR}
    assert j.presentations[1] == j.presentations[0][::-1]


def test_judging_by_content_is_consistent() -> None:
    fake = FakeOpenAI(longest_first)
    j = LLMJudge(fake, model="m").judge(_query(FOUR))
    assert j.agreement == 1.0
    assert j.ranks == {"true": 1.0, "c": 2.0, "b": 3.0, "a": 4.0}
    assert j.presentations == [["true", "c", "b", "a"]] * 2


def test_empty_candidates_are_never_shown_and_rank_last() -> None:
    fake = FakeOpenAI(longest_first)
    texts: dict[str, str | None] = {"a": "aaaa", "e1": None, "true": "tttttttt", "e2": None}
    j = LLMJudge(fake, model="m").judge(_query(texts))
    for call in fake.calls:
        assert len(_shown(call)) == 2
        assert _n(call) == 2
    assert j.ranks == {"true": 1.0, "a": 2.0, "e1": 3.5, "e2": 3.5}
    assert sorted(j.empty) == ["e1", "e2"]
    assert all("e1" not in p and "e2" not in p for p in j.presentations)


def test_single_real_candidate_needs_no_llm() -> None:
    fake = FakeOpenAI(position_one)
    j = LLMJudge(fake, model="m").judge(_query({"r1": None, "true": "yes", "r2": None}))
    assert fake.calls == []
    assert j.ranks == {"true": 1.0, "r1": 2.5, "r2": 2.5}
    assert j.agreement is None
    assert not j.failed


def test_partial_disagreement_gives_partial_ties() -> None:
    # Presentation 1 by content; presentation 2 always "1, 2, 3": they agree on one pair only.
    answers = iter([longest_first, position_one])
    fake = FakeOpenAI(lambda request: next(answers)(request))
    texts = {"a": "x", "b": "yy", "true": "zzz"}
    judge = LLMJudge(fake, model="m", seed=1)
    j = judge.judge(_query(texts))
    assert len(j.presentations) == 2
    first, second = j.presentations
    assert first == ["true", "b", "a"]
    # Exact expectation from the presentation order the judge used.
    assert second == judge.presentation_orders(_query(texts))[1]
    positions = {lab: (first.index(lab) + 1 + second.index(lab) + 1) / 2 for lab in texts}
    assert j.ranks == positions
    pairs = [("a", "b"), ("a", "true"), ("b", "true")]
    same = sum(
        (first.index(x) < first.index(y)) == (second.index(x) < second.index(y)) for x, y in pairs
    )
    assert j.agreement == same / 3


# --------------------------------------------------------------------------- parsing, retries

INVALID = {
    "duplicate": '{"ranking": [1, 1, 2]}',
    "out of range": '{"ranking": [1, 2, 4]}',
    "too short": '{"ranking": [1, 2]}',
    "missing key": '{"order": [1, 2, 3]}',
    "not JSON": "Response 2 is the best, then 1, then 3.",
    "prose around JSON": 'Sure! {"ranking": [1, 2, 3]} Hope this helps.',
    "booleans": '{"ranking": [true, 2, 3]}',
    "not a list": '{"ranking": "1, 2, 3"}',
    "not an object": "[1, 2, 3]",
}
THREE = {"a": "x", "b": "yy", "true": "zzz"}


@pytest.mark.parametrize("answer", INVALID.values(), ids=INVALID.keys())
def test_invalid_answers_are_retried_then_the_presentation_dropped(answer: str) -> None:
    fake = FakeOpenAI(scripted([answer, answer, '{"ranking": [3, 1, 2]}']))
    j = LLMJudge(fake, model="m", max_attempts=2).judge(_query(THREE))
    assert len(fake.calls) == 3  # two attempts at presentation 1, one at presentation 2
    assert not j.failed
    assert len(j.presentations) == 1
    assert j.agreement is None  # one presentation left: nothing to agree with
    order = LLMJudge(FakeOpenAI(), model="m").presentation_orders(_query(THREE))[1]
    assert j.presentations[0] == [order[2], order[0], order[1]]
    assert j.ranks[order[2]] == 1.0
    # The retry told the model what was wrong.
    retry = fake.calls[1]["messages"]
    assert [m["role"] for m in retry] == ["user", "assistant", "user"]
    assert "invalid" in retry[2]["content"]


def test_a_valid_retry_keeps_the_presentation() -> None:
    fake = FakeOpenAI(scripted(['{"ranking": [2, 2, 1]}', '{"ranking": [1, 2, 3]}']))
    j = LLMJudge(fake, model="m").judge(_query(THREE))
    assert len(fake.calls) == 3
    assert len(j.presentations) == 2


def test_code_fence_around_json_is_accepted() -> None:
    fake = FakeOpenAI(lambda request: '```json\n{"ranking": [1, 2, 3]}\n```')
    j = LLMJudge(fake, model="m").judge(_query(THREE))
    assert len(fake.calls) == 2
    assert len(j.presentations) == 2


def test_all_presentations_failing_is_recorded_not_raised() -> None:
    fake = FakeOpenAI(lambda request: "I cannot rank these.")
    j = LLMJudge(fake, model="m", max_attempts=3).judge(_query(THREE))
    assert len(fake.calls) == 6
    assert j.failed
    assert j.error is not None and "not JSON" in j.error
    assert j.ranks == {}
    assert j.presentations == []
    assert (j.query_id, j.group, j.judge) == ("q1", "planning", "llm:m")


def test_api_errors_count_as_failed_attempts() -> None:
    def down(request: dict[str, Any]) -> str:
        raise openai.APIConnectionError(message="down", request=None)  # type: ignore[arg-type]

    j = LLMJudge(FakeOpenAI(down), model="m").judge(_query(THREE))
    assert j.failed
    assert j.error is not None and "APIConnectionError" in j.error


def test_name_defaults_to_the_model_and_can_be_set() -> None:
    assert LLMJudge(FakeOpenAI(), model="qwen").name == "llm:qwen"
    assert LLMJudge(FakeOpenAI(), model="qwen", name="judge").name == "judge"


# --------------------------------------------------------------------------- reference judge


def test_reference_judge_structured_numbers() -> None:
    query = _query({"near": '{"score": 7}', "far": '{"score": 2}', "true": '{"score": 8}'})
    judge = ReferenceJudge(HashEmbedder())
    assert judge.scores(query) == {"near": 0.875, "far": 0.25, "true": 1.0}
    j = judge.judge(query)
    assert j.ranks == {"true": 1.0, "near": 2.0, "far": 3.0}
    assert j.presentations == [["true", "near", "far"]]
    assert j.agreement is None
    assert j.judge == "reference"


def test_reference_judge_structured_fields() -> None:
    truth = '{"dish": "tomato soup", "price": 10, "tags": ["warm", "cheap"]}'
    texts: dict[str, str | None] = {
        # Same dish and tags, price off by 5: 1, 0.5, 1.
        "same": '{"dish": "tomato soup", "price": 5, "tags": ["warm", "cheap"]}',
        # Missing dish (0), exact price (1), no tags (0).
        "missing": '{"price": 10}',
        "other": '{"dish": "grilled steak", "price": 40, "tags": ["rare"]}',
        "empty": None,
        "true": truth,
    }
    scores = ReferenceJudge(HashEmbedder()).scores(_query(texts))
    assert scores["same"] == pytest.approx(2.5 / 3)
    assert scores["missing"] == pytest.approx(1 / 3)
    assert 1 / 3 < scores["other"] < scores["same"]  # unrelated strings: cos ~ 0 -> ~0.5
    assert "empty" not in scores
    j = ReferenceJudge(HashEmbedder()).judge(_query(texts))
    assert j.ranks["true"] == 1.0
    assert j.ranks["same"] == 2.0
    assert j.ranks["empty"] == 5.0
    assert j.empty == ["empty"]


def test_reference_judge_free_text() -> None:
    texts: dict[str, str | None] = {
        "close": "She orders a bowl of tomato soup and bread at the cafe.",
        "far": "The library opens at nine tomorrow morning.",
        "true": "She orders tomato soup and bread at the cafe.",
    }
    j = ReferenceJudge(HashEmbedder()).judge(_query(texts))
    assert j.ranks == {"true": 1.0, "close": 2.0, "far": 3.0}


def test_reference_judge_ties_equal_scores() -> None:
    texts: dict[str, str | None] = {
        "a": '{"score": 4}',
        "b": '{"score": 12}',
        "c": '{"score": 4}',
        "true": '{"score": 8}',
    }
    j = ReferenceJudge(HashEmbedder()).judge(_query(texts))
    # b: 1 - 4/12 = 0.667 beats a and c: 1 - 4/8 = 0.5, which tie on places 3 and 4.
    assert j.ranks["b"] == 2.0
    assert j.ranks["a"] == j.ranks["c"] == 3.5
    assert j.ranks["true"] == 1.0


def test_reference_judge_batches_embeddings() -> None:
    class Counting(HashEmbedder):
        calls = 0

        def embed(self, texts: Any) -> Any:
            Counting.calls += 1
            return super().embed(texts)

    texts: dict[str, str | None] = {"a": "one two", "b": "three four", "true": "five six"}
    ReferenceJudge(Counting()).judge(_query(texts))
    assert Counting.calls == 1


# --------------------------------------------------------------------------- agreement


def _j(
    qid: str,
    ranks: dict[str, float],
    *,
    agreement: float | None = None,
    failed: bool = False,
    empty: list[str] | None = None,
) -> Judgement:
    return Judgement(
        query_id=qid,
        group="g",
        judge="x",
        ranks={} if failed else ranks,
        failed=failed,
        error="boom" if failed else None,
        agreement=agreement,
        empty=empty or [],
    )


def test_pairwise_agreement_counts_ordered_pairs() -> None:
    a = _j("q", {"true": 1, "a": 2, "b": 3})
    b = _j("q", {"true": 1, "a": 3, "b": 2})
    assert pairwise_agreement(a, b) == pytest.approx(2 / 3)
    assert pairwise_agreement(a, a) == 1.0


def test_pairwise_agreement_skips_ties_missing_labels_and_empties() -> None:
    a = _j("q", {"true": 1.5, "a": 1.5, "b": 3, "only_a": 4})
    b = _j("q", {"true": 1, "a": 2, "b": 3})
    # (true, a) tied in a; only_a missing in b: (true, b) and (a, b) remain, both agree.
    assert pairwise_agreement(a, b) == 1.0
    c = _j("q", {"true": 1, "a": 2, "e": 3}, empty=["e"])
    d = _j("q", {"true": 2, "a": 1, "e": 3}, empty=["e"])
    # Without the empty label only (true, a) counts, and they disagree on it.
    assert pairwise_agreement(c, d) == 0.0


def test_pairwise_agreement_none_without_comparable_pairs() -> None:
    assert pairwise_agreement(_j("q", {"a": 1, "b": 1}), _j("q", {"a": 1, "b": 2})) is None
    assert pairwise_agreement(_j("q", {}, failed=True), _j("q", {"a": 1, "b": 2})) is None


def test_reliability_exact_numbers() -> None:
    mine = [
        _j("q1", {"true": 1, "a": 2, "b": 3}, agreement=1.0),
        _j("q2", {"true": 2, "a": 1, "b": 3}, agreement=0.0),
        _j("q3", {}, failed=True),
        _j("q4", {"true": 1.5, "a": 1.5, "b": 3}, agreement=None),
        _j("q5", {"a": 1, "b": 2}, agreement=None),  # no "true", no match in the other judge
    ]
    theirs = [
        _j("q4", {"true": 1, "a": 2, "b": 3}),  # 1.0 (the tied pair left out)
        _j("q2", {"true": 1, "a": 2, "b": 3}),  # 2/3
        _j("q1", {"true": 1, "a": 3, "b": 2}),  # 2/3
        _j("q3", {"true": 1, "a": 2, "b": 3}),  # ours failed: not compared
    ]
    r = reliability("llm", mine, other={"reference": theirs, "never": []})
    assert r.judge == "llm"
    assert r.shuffle_agreement == 0.5
    assert r.agreement_with == {"reference": pytest.approx(7 / 9)}
    assert r.true_mean_rank == pytest.approx((1 + 2 + 1.5) / 3)
    # q4's tie for first does not count as first.
    assert r.true_first_rate == pytest.approx(1 / 3)


def test_reliability_of_a_deterministic_judge() -> None:
    r = reliability("reference", [_j("q1", {"true": 1, "a": 2})])
    assert r.shuffle_agreement is None
    assert r.agreement_with == {}
    assert r.true_mean_rank == 1.0
    assert r.true_first_rate == 1.0
    empty = reliability("reference", [_j("q1", {}, failed=True)])
    assert empty.true_mean_rank is None
    assert empty.true_first_rate is None
