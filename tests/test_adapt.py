"""HitStep.adapt: the public hit step (modifier, then validation, with its cost), on its own and
as the cached client runs it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from llmcache import CacheConfig, CachedLLM, CacheOptions, CategoryPolicy, Mode, SemanticCache
from llmcache.errors import ConfigurationError
from llmcache.modifiers import Choose, HitStep, ModifyContext, Revise
from llmcache.testing import FakeOpenAI, HashEmbedder
from llmcache.types import Adapted, Candidate, Similarity

MODEL = "gpt-4o-mini"  # a model the default price table prices
ASKED = [{"role": "user", "content": "How important is the idle tree? Answer 1-10."}]


def _cache(tmp_path: Path, **config: Any) -> SemanticCache:
    return SemanticCache(
        tmp_path / "c", embedder=HashEmbedder(dim=64), config=CacheConfig(**config)
    )


def _stored(cache: SemanticCache, answer: str, **options: Any) -> Candidate:
    """A real entry: ``answer`` collected through the cached client, as a lookup returns it."""
    client = CachedLLM(
        FakeOpenAI(lambda request: answer), cache=cache.with_config(mode=Mode.COLLECT)
    )
    client.chat.completions.create(model=MODEL, messages=ASKED, cache=_options(**options))
    (partition,) = cache.partitions()
    (entry,) = cache.entries(partition.key)
    return Candidate(entry=entry, similarity=Similarity(cosine=0.9))


def _options(**kw: Any) -> CacheOptions:
    return CacheOptions(**{"category": "importance", "agent": "Liam", "keywords": ["tree"], **kw})


def _revise(ctx: ModifyContext) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"Rewrite for the new query: {ctx.candidate.entry.content}"}
    ]


def test_read_serves_the_cached_answer_when_it_is_valid(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    candidate = _stored(cache, "7")
    adapted = cache.hit_step.adapt(candidate, _options(validator=int), messages=ASKED)
    assert adapted == Adapted(modifier="read", content="7", valid=True)


def test_an_answer_failing_the_querys_validator_is_not_valid_and_says_why(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    candidate = _stored(cache, "seven")

    def at_most_five(content: str) -> None:
        if not content.isdigit() or int(content) > 5:
            raise ValueError(f"not a score from 1 to 5: {content!r}")

    adapted = cache.hit_step.adapt(candidate, _options(validator=at_most_five), messages=ASKED)
    assert not adapted.valid
    assert adapted.content == "seven"  # the modifier's answer, kept for the record
    assert adapted.error is not None and "not a score from 1 to 5" in adapted.error


def test_choose_maps_the_cached_choice_onto_the_querys_options(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    candidate = _stored(cache, '"bench"', options=("bench", "tree"))
    adapted = cache.hit_step.adapt(
        candidate, _options(options=("lamp", "bench"), modifier=Choose()), messages=ASKED
    )
    assert (adapted.modifier, adapted.content, adapted.valid) == ("choose", "bench", True)
    # A query without options gives the modifier nothing to choose from.
    none = cache.hit_step.adapt(candidate, _options(modifier=Choose()), messages=ASKED)
    assert not none.valid and none.content is None


def test_the_category_policy_names_the_modifier(tmp_path: Path) -> None:
    cache = _cache(tmp_path, categories={"importance": CategoryPolicy(modifier=Choose())})
    candidate = _stored(cache, "bench", options=("bench",))
    adapted = cache.hit_step.adapt(candidate, _options(options=("bench", "lamp")), messages=ASKED)
    assert adapted.modifier == "choose"


def test_revise_asks_the_llm_with_the_querys_request_and_counts_the_cost(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    candidate = _stored(cache, "7")
    fake = FakeOpenAI(lambda request: "4")
    adapted = cache.hit_step.adapt(
        candidate,
        _options(modifier=Revise(_revise), validator=int, constraints={"max_tokens": 3}),
        messages=ASKED,
        request={"model": MODEL, "messages": ASKED, "temperature": 0},
        call=lambda request: fake.chat.completions.create(**request),
    )
    assert (adapted.modifier, adapted.content, adapted.valid) == ("revise", "4", True)
    (sent,) = fake.calls
    assert sent["model"] == MODEL and sent["temperature"] == 0 and sent["max_tokens"] == 3
    assert sent["messages"] == _revise_messages("7")
    assert adapted.usage.total_tokens > 0
    assert adapted.cost_usd == pytest.approx(cache.prices.cost(MODEL, adapted.usage))
    assert adapted.cost_usd > 0


def _revise_messages(content: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"Rewrite for the new query: {content}"}]


def test_a_revision_that_never_validates_is_not_valid_but_its_cost_is_counted(
    tmp_path: Path,
) -> None:
    cache = _cache(tmp_path)
    candidate = _stored(cache, "7")
    fake = FakeOpenAI(lambda request: "not a number")
    invalid: list[tuple[int, str]] = []
    adapted = cache.hit_step.adapt(
        candidate,
        _options(modifier=Revise(_revise), validator=int),
        messages=ASKED,
        request={"model": MODEL},
        call=lambda request: fake.chat.completions.create(**request),
        on_invalid=lambda attempt, model, content, usage, why: invalid.append((attempt, model)),
    )
    assert not adapted.valid and adapted.content is None
    assert len(fake.calls) >= 2  # resubmitted while invalid
    assert invalid == [(n, MODEL) for n in range(1, len(fake.calls) + 1)]
    assert adapted.usage.total_tokens > 0
    assert adapted.cost_usd == pytest.approx(cache.prices.cost(MODEL, adapted.usage))


def test_revise_without_a_way_to_call_the_llm_is_a_configuration_error(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    candidate = _stored(cache, "7")
    with pytest.raises(ConfigurationError, match="call="):
        cache.hit_step.adapt(candidate, _options(modifier=Revise(_revise)), messages=ASKED)


def test_a_live_hit_is_the_adapt_step_and_accounts_what_it_reports(tmp_path: Path) -> None:
    cache = _cache(tmp_path, mode=Mode.SERVE)
    candidate = _stored(cache, "7")
    options = _options(modifier=Revise(_revise), validator=int)
    fake = FakeOpenAI(lambda request: "4")
    direct = cache.hit_step.adapt(
        candidate,
        options,
        messages=ASKED,
        request={"model": MODEL, "messages": ASKED},
        call=lambda request: fake.chat.completions.create(**request),
    )
    live = CachedLLM(fake, cache=cache)
    reply, info = live.chat.completions.create_with_info(model=MODEL, messages=ASKED, cache=options)
    assert info.outcome == "hit" and info.modifier == direct.modifier
    assert reply.choices[0].message.content == direct.content
    assert fake.calls[0] == fake.calls[1]  # the same revision request, sent the same way
    assert info.revise_tokens == direct.usage.total_tokens
    assert info.revise_usd == pytest.approx(direct.cost_usd)
    assert info.usage.total_tokens == direct.usage.total_tokens > 0


def test_the_hit_step_needs_no_cache_only_its_configuration_embedder_and_prices(
    tmp_path: Path,
) -> None:
    cache = _cache(tmp_path, categories={"importance": CategoryPolicy(validator=int)})
    candidate = _stored(cache, "7")
    fake = FakeOpenAI(lambda request: "4")
    options = _options(modifier=Revise(_revise))
    request = {"model": MODEL, "messages": ASKED}
    step = HitStep(cache.config, HashEmbedder(dim=64), cache.prices)
    alone = step.adapt(
        candidate,
        options,
        messages=ASKED,
        request=request,
        call=lambda r: fake.chat.completions.create(**r),
    )
    through = cache.hit_step.adapt(
        candidate,
        options,
        messages=ASKED,
        request=request,
        call=lambda r: fake.chat.completions.create(**r),
    )
    assert alone == through
    assert (alone.modifier, alone.content, alone.valid) == ("revise", "4", True)
    # The category's validator comes from the configuration the step was given.
    assert step.adapt(candidate, _options(), messages=ASKED).valid
    bad = HitStep(cache.config, HashEmbedder(dim=64)).adapt(
        _stored_other(tmp_path, "seven"), _options(), messages=ASKED
    )
    assert not bad.valid and bad.error


def _stored_other(tmp_path: Path, answer: str) -> Candidate:
    return _stored(_cache(tmp_path / "other"), answer)
