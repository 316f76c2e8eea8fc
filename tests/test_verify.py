"""Hit verification: near misses re-scored by a verifier, on the request path and off it."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from llmcache import CacheConfig, CachedLLM, CacheOptions, CategoryPolicy, Mode, SemanticCache
from llmcache._ledger import info_stats_key
from llmcache._verify import VerifyJob, VerifyQueue
from llmcache.errors import InvalidResponseError
from llmcache.testing import FakeOpenAI, ScriptedVerifier
from llmcache.types import Usage
from llmcache.verification import LLMVerifier, Verifier

DIM = 256
MSGS = [{"role": "user", "content": "Answer the question."}]


class PlannedEmbedder:
    """A test double whose cosines are chosen by the text: ``"base"`` is one axis, and
    ``"<cos>/<axis>"`` lies at cosine ``cos`` from it, off towards its own ``axis`` (so two
    such texts on different axes are at ``cos * cos`` from each other)."""

    model_id = "planned-v1"
    dim = DIM

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for row, text in enumerate(texts):
            if text == "base":
                out[row, 0] = 1.0
                continue
            cosine, axis = text.split("/")
            c = float(cosine)
            out[row, 0] = c
            out[row, int(axis)] = np.sqrt(1.0 - c * c)
        return out


def _client(tmp_path: Path, responder: Any, **config: Any) -> CachedLLM:
    cache = SemanticCache(
        tmp_path / "c",
        embedder=PlannedEmbedder(),
        # No twins: these tests count the LLM's calls (twins have tests of their own).
        config=CacheConfig(
            **{"threshold": 0.9, "twin_rate": 0.0, "serve_identical": False, **config}
        ),
    )
    return CachedLLM(FakeOpenAI(responder), cache=cache)


def _ask(client: CachedLLM, text: str, **options: Any) -> tuple[str, Any]:
    response, info = client.chat.completions.create_with_info(
        model="m", messages=MSGS, cache=CacheOptions(category="qa", keywords=[text], **options)
    )
    return response.choices[0].message.content, info


def _llm_calls(client: CachedLLM) -> int:
    return len(client._client.calls)  # type: ignore[attr-defined]


def _stored(client: CachedLLM) -> None:
    """Store the answer "cached" for the text "base"."""
    _, info = _ask(client, "base", mode=Mode.COLLECT)
    assert info.outcome == "collect"


def _seeded(tmp_path: Path, **config: Any) -> CachedLLM:
    answers = iter(["cached"])
    client = _client(tmp_path, lambda request: next(answers, "fresh"), **config)
    _stored(client)
    return client


def test_a_scripted_verifier_is_a_verifier() -> None:
    assert isinstance(ScriptedVerifier(lambda q, c: True), Verifier)
    assert isinstance(LLMVerifier(FakeOpenAI(lambda request: "{}"), "m"), Verifier)


def test_on_the_request_path_a_yes_serves_the_near_miss_as_a_verified_hit(tmp_path: Path) -> None:
    verifier = ScriptedVerifier(lambda query, cached: True, tokens=40, model="gpt-4o-mini")
    client = _seeded(tmp_path, verifier=verifier)
    calls = _llm_calls(client)
    content, info = _ask(client, "0.85/3")
    assert (content, info.outcome, info.verified) == ("cached", "hit", True)
    assert _llm_calls(client) == calls  # no LLM call: the verifier decided
    assert verifier.calls == [("0.85/3", "base", pytest.approx(0.85, abs=1e-5))]
    # Its cost is counted: the verifier's tokens at the cache's price for its model.
    expected = client.cache.prices.cost("gpt-4o-mini", Usage(prompt_tokens=40))
    assert info.verify_tokens == 40 and info.verify_usd == pytest.approx(expected)
    assert expected > 0 and info.cost_usd == pytest.approx(expected)
    assert info.label is None  # a verdict is a guess, not a label


def test_on_the_request_path_a_no_is_a_paid_miss(tmp_path: Path) -> None:
    client = _seeded(tmp_path, verifier=ScriptedVerifier(lambda query, cached: False))
    content, info = _ask(client, "0.85/3")
    assert (content, info.outcome, info.verified, info.label) == ("fresh", "miss", False, None)


def test_only_the_band_under_the_threshold_is_verified(tmp_path: Path) -> None:
    verifier = ScriptedVerifier(lambda query, cached: True)
    client = _seeded(tmp_path, verifier=verifier, verify_band=0.1)
    _, far = _ask(client, "0.70/4")  # under the band: a plain miss
    _, close = _ask(client, "0.95/5")  # above the threshold: a plain hit
    assert (far.outcome, far.verified) == ("miss", None)
    assert (close.outcome, close.verified) == ("hit", None)
    assert verifier.calls == []
    _, narrow = _ask(client, "0.85/6", verify_band=0.02)  # a call's own band
    assert (narrow.outcome, verifier.calls) == ("miss", [])


def test_verification_settings_layer_call_over_category_over_cache() -> None:
    mine, theirs = ScriptedVerifier(lambda q, c: True), ScriptedVerifier(lambda q, c: False)
    config = CacheConfig(
        verifier=theirs,
        categories={"plan": CategoryPolicy(verify_band=0.05, verify_path="background")},
    )
    plain = config.resolve(CacheOptions(category="other"))
    assert (plain.verifier, plain.verify_band, plain.verify_path) == (theirs, 0.1, "request")
    plan = config.resolve(CacheOptions(category="plan"))
    assert (plan.verify_band, plan.verify_path) == (0.05, "background")
    call = config.resolve(CacheOptions(category="plan", verifier=mine, verify_band=0.2))
    assert (call.verifier, call.verify_band) == (mine, 0.2)
    assert CacheConfig().resolve(CacheOptions(category="x")).verifier is None
    with pytest.raises(ValueError):
        CacheConfig(verify_path="later")
    with pytest.raises(ValueError):
        CacheOptions(category="x", verify_band=0.0)


def test_a_verifier_that_raises_makes_a_counted_miss_never_an_error(tmp_path: Path) -> None:
    def broken(query: str, cached: str) -> bool:
        raise RuntimeError("the verifier's server is down")

    client = _seeded(tmp_path, verifier=ScriptedVerifier(broken))
    content, info = _ask(client, "0.85/3")
    assert (content, info.outcome, info.verified, info.verify_failed) == (
        "fresh",
        "miss",
        None,
        True,
    )
    table = client.cache.stats().tables[0]
    assert (table.verifications, table.verify_failed, table.verified_yes) == (1, 1, 0)


def test_a_verifier_that_answers_no_verdict_makes_a_counted_miss(tmp_path: Path) -> None:
    class Sloppy:
        def verify(self, query: str, cached: str, *, cosine: float) -> Any:
            return True  # not a Verdict

    client = _seeded(tmp_path, verifier=Sloppy())
    content, info = _ask(client, "0.85/3")
    assert (content, info.outcome, info.verify_failed) == ("fresh", "miss", True)


def test_a_verified_answer_that_fails_the_validator_is_not_served(tmp_path: Path) -> None:
    def only_fresh(text: str) -> str:
        if text != "fresh":
            raise ValueError("not fresh")
        return text

    client = _seeded(tmp_path, verifier=ScriptedVerifier(lambda query, cached: True))
    content, info = _ask(client, "0.85/3", validator=only_fresh)
    assert (content, info.outcome, info.verified) == ("fresh", "miss", True)


def _half_right(tmp_path: Path, verifier: ScriptedVerifier, budget: float) -> CachedLLM:
    """A cache under ``budget`` whose entry "base" answers "42"; the LLM answers "42" to
    queries on even axes and "other" to those on odd ones, so at cosine 0.9 half the near
    misses have base's answer and half do not."""

    def answer(request: dict[str, Any]) -> str:
        content = request["messages"][-1]["content"]
        axis = int(content.rsplit("/", 1)[1]) if "/" in content else 0  # "base": axis 0
        return "42" if axis % 2 == 0 else "other"

    client = _client(tmp_path, answer, verifier=verifier, wrong_hit_budget=budget, explore_seed=7)
    _stored(client)
    return client


def _ask_keyed(client: CachedLLM, text: str) -> tuple[str, Any]:
    """Like _ask, with the keyword also in the prompt, so the LLM double can answer by it."""
    messages = [{"role": "user", "content": f"Answer the question {text}"}]
    response, info = client.chat.completions.create_with_info(
        model="m", messages=messages, cache=CacheOptions(category="qa", keywords=[text])
    )
    return response.choices[0].message.content, info


def test_under_a_budget_a_yes_is_served_only_once_earlier_yeses_prove_it(tmp_path: Path) -> None:
    # The verifier knows the truth: yes on even axes. The table's own labels at 0.9 are half
    # wrong, so its threshold stays strict; the labels of its yeses are all right.
    verifier = ScriptedVerifier(lambda query, cached: int(query.split("/")[1]) % 2 == 0)
    client = _half_right(tmp_path, verifier, budget=0.2)
    served: list[Any] = []
    for axis in range(2, DIM):
        content, info = _ask_keyed(client, f"0.90/{axis}")
        assert info.threshold == 0.97  # the table's own threshold never moves
        assert info.verified is (axis % 2 == 0)
        if info.outcome == "hit":
            assert content == "42" and info.verified
            served.append(axis)
        else:
            assert content == ("42" if axis % 2 == 0 else "other")
            # Every miss labels its near miss by comparing answers, never by the verdict.
            assert info.label is (axis % 2 == 0)
    # Nothing was served before 49 yeses proved 0.9 within the budget (its confidence
    # sequence under 0.2 takes 49 right labels), then most of the later yeses were.
    assert served and served[0] >= 2 + 2 * 49 and len(served) >= 10
    key = info_stats_key(info)
    table_labels = client.cache.budget.labels(key)  # every call but the served ones labels
    asked = DIM - 2
    assert (table_labels.count, table_labels.wrong) == (asked - len(served), asked // 2)
    verified = client.cache.budget.labels(key, "verified")
    assert verified.wrong == 0 and verified.explored > 0
    table = client.cache.stats().tables[0]
    assert table.verified_threshold is not None and table.verified_threshold <= 0.9
    assert table.verified_labels == verified.count and table.verified_explored == verified.explored
    assert "yes thresh" in client.cache.stats().render()


def test_under_a_budget_a_verifier_that_is_wrong_serves_nothing(tmp_path: Path) -> None:
    # A verifier that says yes to everything: its yeses are half wrong, so none is served.
    verifier = ScriptedVerifier(lambda query, cached: True)
    client = _half_right(tmp_path, verifier, budget=0.1)
    outcomes = [_ask_keyed(client, f"0.90/{axis}")[1] for axis in range(2, DIM)]
    assert all(info.outcome == "miss" and info.verified for info in outcomes)
    verified = client.cache.budget.labels(info_stats_key(outcomes[0]), "verified")
    assert verified.count == len(outcomes) and verified.wrong == len(outcomes) // 2
    # Without a budget the same verifier serves every near miss: the budget is what stops it.
    plain = _half_right(tmp_path / "plain", ScriptedVerifier(lambda q, c: True), budget=0.1)
    plain.cache.config = plain.cache.config.model_copy(update={"wrong_hit_budget": None})
    assert _ask_keyed(plain, "0.90/3")[1].outcome == "hit"


def test_stats_and_render_show_verification_per_table(tmp_path: Path) -> None:
    verdicts = iter([True, False, True])
    verifier = ScriptedVerifier(lambda query, cached: next(verdicts), tokens=10, model="m")
    client = _seeded(tmp_path, verifier=verifier)
    for axis in (3, 4, 5):
        _ask(client, f"0.85/{axis}")
    table = client.cache.stats().tables[0]
    assert (table.verifications, table.verified_yes, table.verified_no) == (3, 2, 1)
    assert table.verify_tokens == 30 and table.verify_usd > 0
    assert table.tokens_spent >= 30  # inside what the table spent
    rendered = client.cache.stats().render()
    assert "verification" in rendered and "verify $" in rendered
    quiet = _seeded(tmp_path / "quiet")
    _ask(quiet, "0.85/3")
    assert "verification" not in quiet.cache.stats().render()


def test_off_the_path_the_miss_is_paid_then_verified_and_a_later_lookup_hits(
    tmp_path: Path,
) -> None:
    verifier = ScriptedVerifier(lambda query, cached: True)
    # One answer for every question: the verifier is right, and exploration agrees with it.
    client = _client(
        tmp_path,
        lambda request: "42",
        verifier=verifier,
        verify_path="background",
        wrong_hit_budget=0.2,
        # Configured where the near misses lie (0.9 from "base" is a rounding under 0.9, in the
        # bin from 0.895): the proving guard's proof descends from the configured threshold.
        threshold=0.895,
    )
    _stored(client)
    # Near misses (0.9 from "base", 0.81 from each other) under the strict threshold 0.97: each
    # answered and stored as a miss, then verified off the path, every yes a right label at 0.9,
    # until the labels prove 0.9 within the budget and the next one is a would-be hit.
    queued = 0
    for axis in range(1, 60):
        _, info = _ask(client, f"0.90/{axis}")
        # Under a budget the miss labels its near miss by comparing answers; the verdict off
        # the path only adds to the labels of the table's yeses.
        assert info.verified is None and info.label is True
        if not info.verify_queued:
            break
        assert info.outcome == "miss" and info.threshold == 0.97
        queued += 1
        assert client.cache.wait_for_verifications(timeout=10)
    assert 20 <= queued < 59 and len(verifier.calls) == queued
    assert info.threshold is not None and info.threshold <= 0.9
    # From now on queries at 0.9 hit with no verifier call (the first would-be hits are
    # explored, as every budget explores, and paid for).
    outcomes = [_ask(client, f"0.90/{axis}")[1] for axis in range(60, 85)]
    assert any(o.outcome == "hit" for o in outcomes)
    assert all(o.verified is None and not o.verify_queued for o in outcomes)
    assert len(verifier.calls) == queued
    table = client.cache.stats().tables[0]
    assert (table.verify_queued, table.verifications, table.verified_yes) == (queued,) * 3
    assert (table.verified_labels, table.verified_labels_wrong) == (queued, 0)


def test_off_the_path_with_no_label_from_answers_the_verdict_is_the_label(
    tmp_path: Path,
) -> None:
    verdicts = iter([True, False])
    client = _seeded(
        tmp_path,
        verifier=ScriptedVerifier(lambda query, cached: next(verdicts)),
        verify_path="background",
    )
    # No budget: the call compares no answers, so the verdicts are the table's labels.
    _, first = _ask(client, "0.85/3")
    _, second = _ask(client, "0.85/4")
    assert client.cache.wait_for_verifications(timeout=10)
    assert (first.label, second.label) == (None, None)
    labels = client.cache.budget.labels(info_stats_key(first))
    assert (labels.count, labels.wrong) == (2, 1)


def test_closing_with_verifications_pending_drops_and_counts_them(tmp_path: Path) -> None:
    release = threading.Event()

    def slow(query: str, cached: str) -> bool:
        release.wait(10)
        return False

    verifier = ScriptedVerifier(slow)
    client = _seeded(tmp_path, verifier=verifier, verify_path="background")
    for axis in (3, 4, 5):
        _ask(client, f"0.85/{axis}")
    deadline = time.monotonic() + 10
    while not verifier.calls and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(verifier.calls) == 1  # one being verified, two waiting
    threading.Timer(0.2, release.set).start()
    client.cache.close()
    reopened = SemanticCache(tmp_path / "c", embedder=PlannedEmbedder())
    try:
        table = reopened.stats().tables[0]
        assert (table.verify_queued, table.verify_dropped) == (3, 2)
        assert (table.verifications, table.verified_no) == (1, 1)  # the one in progress
        # The answers themselves were stored before any verification was queued.
        assert len(reopened.entries(reopened.partitions()[0].key)) == 4
    finally:
        reopened.close()


def test_a_full_queue_drops_and_counts(tmp_path: Path) -> None:
    cache = SemanticCache(tmp_path / "c", embedder=PlannedEmbedder())
    release = threading.Event()
    verifier = ScriptedVerifier(lambda query, cached: release.wait(10))
    queue = VerifyQueue(cache.ledger, cache.budget, cache.prices, max_pending=1)
    key = json.dumps(["qa", "", "m", "k"])
    job = VerifyJob(key=key, verifier=verifier, query="a", cached="b", cosine=0.85)
    assert queue.submit(job) is True
    assert queue.submit(job) is False
    release.set()
    assert queue.wait(10) and queue.pending == 0
    queue.close()
    assert queue.submit(job) is False  # closed
    counters = cache.ledger.counters()[key]
    assert (counters["vf_dropped"], counters["vf_yes"]) == (2, 1)
    cache.close()


def test_llm_verifier_asks_a_yes_no_question_with_a_json_schema() -> None:
    fake = FakeOpenAI(lambda request: '{"same": true}')
    verifier = LLMVerifier(fake, "gpt-4o-mini")
    verdict = verifier.verify("How old is Liam?", "What is Liam's age?", cosine=0.86)
    assert verdict.same is True and verdict.model == "gpt-4o-mini"
    assert verdict.usage.total_tokens > 0
    request = fake.calls[0]
    assert request["response_format"]["json_schema"]["schema"]["required"] == ["same"]
    assert request["temperature"] == 0
    prompt = request["messages"][-1]["content"]
    assert "What is Liam's age?" in prompt and "How old is Liam?" in prompt


@pytest.mark.parametrize(
    ("answer", "same"),
    [('{"same": false}', False), ('```json\n{"same": true}\n```', True), ("yes", None)],
)
def test_llm_verifier_reads_its_answer_or_raises(answer: str, same: bool | None) -> None:
    verifier = LLMVerifier(FakeOpenAI(lambda request: answer), "m")
    if same is None:
        with pytest.raises(InvalidResponseError):
            verifier.verify("a", "b", cosine=0.8)
    else:
        assert verifier.verify("a", "b", cosine=0.8).same is same


def test_llm_verifier_in_a_cache_counts_its_cost(tmp_path: Path) -> None:
    verifier = LLMVerifier(FakeOpenAI(lambda request: '{"same": true}'), "gpt-4o-mini")
    client = _seeded(tmp_path, verifier=verifier)
    content, info = _ask(client, "0.85/3")
    assert (content, info.outcome, info.verified) == ("cached", "hit", True)
    assert info.verify_tokens > 0 and info.verify_usd > 0


def _stream(client: CachedLLM, text: str) -> tuple[str, Any]:
    stream = client.chat.completions.create(
        model="m", messages=MSGS, stream=True, cache=CacheOptions(category="qa", keywords=[text])
    )
    content = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    return content, stream.cache_info


def test_a_streamed_near_miss_is_verified_on_the_path_or_after_the_stream(tmp_path: Path) -> None:
    on_path = _seeded(tmp_path / "a", verifier=ScriptedVerifier(lambda query, cached: True))
    content, info = _stream(on_path, "0.85/3")
    assert (content, info.outcome, info.verified) == ("cached", "hit", True)
    verifier = ScriptedVerifier(lambda query, cached: True)
    off_path = _seeded(tmp_path / "b", verifier=verifier, verify_path="background")
    content, info = _stream(off_path, "0.85/3")
    assert (content, info.outcome, info.verify_queued) == ("fresh", "miss", True)
    assert off_path.cache.wait_for_verifications(timeout=10) and len(verifier.calls) == 1
