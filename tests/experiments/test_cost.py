"""The cost model, checked against a hand-worked example and the study's published totals."""

from __future__ import annotations

import pytest

from experiments._cost import (
    LOCAL_EMBEDDER_PRICES,
    STUDY_PRICES,
    CostPrompt,
    Prices,
    description_lengths,
    embed_usd,
    llm_usd,
    mode_cost,
    mode_costs,
    no_cache_cost,
)
from llmcache.types import PriceTable

EXACT = 1e-12


def test_public_api() -> None:
    import experiments._cost as mod

    assert sorted(mod.__all__) == [
        "CostPrompt",
        "LOCAL_EMBEDDER_PRICES",
        "Prices",
        "STUDY_PRICES",
        "description_lengths",
        "embed_usd",
        "llm_usd",
        "mode_cost",
        "mode_costs",
        "no_cache_cost",
        "study_price_table",
    ]


def test_prices_are_llmcaches_list_prices_of_the_studys_models() -> None:
    table = PriceTable().prices
    assert Prices.listed("gpt-4o-mini", "text-embedding-3-small") == STUDY_PRICES
    assert STUDY_PRICES.llm == table["gpt-4o-mini"] and STUDY_PRICES.chars_per_token == 4.0
    assert STUDY_PRICES.embed == table["text-embedding-3-small"]
    assert STUDY_PRICES.as_dict() == {"llm_in": 0.15, "llm_out": 0.60, "embed": 0.02}
    assert LOCAL_EMBEDDER_PRICES.embed.input_per_m == 0.0
    assert LOCAL_EMBEDDER_PRICES.llm == STUDY_PRICES.llm
    with pytest.raises(KeyError):
        Prices.listed("a model nobody lists", "text-embedding-3-small")
    # 4M characters = 1M tokens
    assert llm_usd(4_000_000, 0) == pytest.approx(0.15, rel=EXACT)
    assert llm_usd(0, 4_000_000) == pytest.approx(0.60, rel=EXACT)
    assert embed_usd(4_000_000) == pytest.approx(0.02, rel=EXACT)
    assert embed_usd(4_000_000, LOCAL_EMBEDDER_PRICES) == 0.0


# Test data, in characters; every length is a multiple of 4 so tokens are integers.
# Table run: two prompts.
#   T1 full 4000 (1000 tok), keyword 400 (100 tok); T2 full 2000 (500 tok), keyword 200 (50 tok)
TABLE = [
    CostPrompt(group="a", category="c1", prompt_chars=4000, answer_chars=400,
               full_chars=4000, keyword_chars=400),
    CostPrompt(group="a", category="c1", prompt_chars=2000, answer_chars=200,
               full_chars=2000, keyword_chars=200),
]  # fmt: skip
# Held-out run: three queries.
#   Q1 read hit:   prompt 1000 tok, answer 100 tok -> LLM (1000*.15 + 100*.6)/1e6 = 210e-6
#                  full 1000 tok, keyword 100 tok
#   Q2 revise hit: prompt 2000 tok, answer 200 tok -> LLM (300 + 120)/1e6 = 420e-6
#                  full 2000 tok, keyword 200 tok
#                  revise full: prompt 500 tok, answer 100 tok -> (75 + 60)/1e6 = 135e-6
#                  revise keyword: prompt 300 tok, answer 100 tok -> (45 + 60)/1e6 = 105e-6
#   Q3 miss (choose): prompt 500 tok, answer 50 tok -> LLM (75 + 30)/1e6 = 105e-6
#                  full 500 tok, keyword 30 tok
QUERIES = [
    CostPrompt(group="a", category="c1", prompt_chars=4000, answer_chars=400,
               full_chars=4000, keyword_chars=400, modifier="read"),
    CostPrompt(group="a", category="c2", prompt_chars=8000, answer_chars=800,
               full_chars=8000, keyword_chars=800, modifier="revise",
               revise_prompt_chars={"full": 2000, "keyword": 1200},
               revise_answer_chars={"full": 400, "keyword": 400}),
    CostPrompt(group="b", category="c3", prompt_chars=2000, answer_chars=200,
               full_chars=2000, keyword_chars=120, modifier="choose", hit=False),
]  # fmt: skip
# No caching: 210 + 420 + 105 = 735e-6
BASELINE = 735e-6
# Full: building (1000 + 500 tok) * 0.02/1e6 = 30e-6
#       usage: embeddings (1000 + 2000 + 500 tok) * 0.02/1e6 = 70e-6, + revise 135e-6,
#              + the miss's LLM call 105e-6 = 310e-6; total 340e-6
# Keyword: building (100 + 50 tok) * 0.02/1e6 = 3e-6
#       usage: embeddings (100 + 200 + 30 tok) * 0.02/1e6 = 6.6e-6, + revise 105e-6,
#              + the miss 105e-6 = 216.6e-6; total 219.6e-6
# Local embedder: embeddings free, so full usage 240e-6, keyword usage 210e-6, building 0.


def test_hand_worked_example_study_prices() -> None:
    assert no_cache_cost(QUERIES) == pytest.approx(BASELINE, rel=EXACT)
    none, full, keyword = mode_costs(TABLE, QUERIES, STUDY_PRICES)

    assert none.mode == "none"
    assert none.building_usd == 0.0
    assert none.usage_usd == pytest.approx(BASELINE, rel=EXACT)
    assert none.total_usd == pytest.approx(BASELINE, rel=EXACT)
    assert none.reduction == pytest.approx(0.0, abs=EXACT)

    assert full.mode == "full"
    assert full.building_usd == pytest.approx(30e-6, rel=EXACT)
    assert full.usage_usd == pytest.approx(310e-6, rel=EXACT)
    assert full.total_usd == pytest.approx(340e-6, rel=EXACT)
    assert full.reduction == pytest.approx(1 - 340 / 735, rel=EXACT)
    assert full.usage_reduction == pytest.approx(1 - 310 / 735, rel=EXACT)

    assert keyword.mode == "keyword"
    assert keyword.building_usd == pytest.approx(3e-6, rel=EXACT)
    assert keyword.usage_usd == pytest.approx(216.6e-6, rel=EXACT)
    assert keyword.total_usd == pytest.approx(219.6e-6, rel=EXACT)
    assert keyword.reduction == pytest.approx(1 - 219.6 / 735, rel=EXACT)
    assert keyword.usage_reduction == pytest.approx(1 - 216.6 / 735, rel=EXACT)


def test_hand_worked_example_local_embedder() -> None:
    none, full, keyword = mode_costs(TABLE, QUERIES, LOCAL_EMBEDDER_PRICES)
    assert none.total_usd == pytest.approx(BASELINE, rel=EXACT)  # LLM prices unchanged
    assert full.building_usd == 0.0 and keyword.building_usd == 0.0
    assert full.usage_usd == pytest.approx(240e-6, rel=EXACT)
    assert keyword.usage_usd == pytest.approx(210e-6, rel=EXACT)
    assert keyword.reduction == pytest.approx(1 - 210 / 735, rel=EXACT)


def test_mode_cost_single_calls_and_errors() -> None:
    full = mode_cost("full", TABLE, QUERIES)  # the baseline is computed when not given
    assert full.total_usd == pytest.approx(340e-6, rel=EXACT)
    assert mode_cost("full", TABLE, QUERIES, baseline=BASELINE) == full
    # No queries: nothing to save against, so no reduction.
    empty = mode_cost("keyword", TABLE, [])
    assert empty.usage_usd == 0.0 and empty.reduction is None and empty.usage_reduction is None
    # A revise hit without its revise prompt length must not be costed as free.
    bad = QUERIES[1].model_copy(update={"revise_prompt_chars": {}})
    with pytest.raises(ValueError, match="revise"):
        mode_cost("full", TABLE, [bad])
    with pytest.raises(ValueError, match="mode"):
        mode_cost("fuzzy", TABLE, QUERIES)  # type: ignore[arg-type]


def test_description_lengths() -> None:
    groups, overall = description_lengths(TABLE + QUERIES[2:])
    # a: full (4000 + 2000) / 2 = 3000, keyword (400 + 200) / 2 = 300, reduction 0.9
    # b: full 2000, keyword 120, reduction 0.94; overall 1 - 720 / 8000 = 0.91
    assert [g.group for g in groups] == ["a", "b"]
    assert (groups[0].full_chars, groups[0].keyword_chars) == (3000, 300)
    assert groups[0].reduction == pytest.approx(0.9, rel=EXACT)
    assert groups[1].reduction == pytest.approx(0.94, rel=EXACT)
    assert overall == pytest.approx(0.91, rel=EXACT)
    ordered, _ = description_lengths(TABLE + QUERIES[2:], groups=["b", "missing", "a"])
    assert [g.group for g in ordered] == ["b", "a"]
    assert description_lengths([]) == ([], 0.0)


def test_study_headline_is_consistent_with_the_model() -> None:
    """The study's totals, read with this model: building = table embeddings only.

    Published: no caching $3.3; full $1.11 in total with usage 76.6% below no caching;
    keyword $0.65 with usage 84.2% below. Usage = baseline * (1 - usage reduction); the rest of
    the total is building, which must be positive and far below the baseline (a table run's
    LLM calls, counted in, would alone cost about the baseline), and cheaper for keyword.
    """
    baseline = 3.3
    published = {"full": (1.11, 0.766), "keyword": (0.65, 0.842)}
    building = {}
    for mode, (total, usage_reduction) in published.items():
        usage = baseline * (1 - usage_reduction)
        building[mode] = total - usage
        assert 0 < building[mode] < 0.2 * baseline
    assert building["full"] == pytest.approx(0.3378, abs=1e-9)
    assert building["keyword"] == pytest.approx(0.1286, abs=1e-9)
    assert building["keyword"] < building["full"]
    assert 1 - published["keyword"][0] / baseline == pytest.approx(0.803, abs=5e-4)  # headline

    # The same figures come out of the model itself: one query whose LLM call costs the
    # baseline, one table prompt per mode whose embedding costs the building, and a revise hit
    # whose revise call makes up the rest of the usage.
    per_char_llm = STUDY_PRICES.llm.input_per_m / STUDY_PRICES.chars_per_token / 1e6
    per_char_embed = STUDY_PRICES.embed.input_per_m / STUDY_PRICES.chars_per_token / 1e6
    for mode, (total, usage_reduction) in published.items():
        usage = baseline * (1 - usage_reduction)
        desc = 1000
        query = CostPrompt(
            group="g", category="c", prompt_chars=round(baseline / per_char_llm), answer_chars=0,
            full_chars=desc, keyword_chars=desc, modifier="revise",
            revise_prompt_chars={mode: round((usage - desc * per_char_embed) / per_char_llm)},
        )  # fmt: skip
        table_chars = round(building[mode] / per_char_embed)
        table = [CostPrompt(group="g", category="c", prompt_chars=0, answer_chars=0,
                            full_chars=table_chars, keyword_chars=table_chars)]  # fmt: skip
        cost = mode_cost(mode, table, [query])  # type: ignore[arg-type]
        assert cost.total_usd == pytest.approx(total, abs=1e-6)
        assert cost.usage_reduction == pytest.approx(usage_reduction, abs=1e-6)
