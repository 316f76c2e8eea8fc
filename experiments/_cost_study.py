"""Experiment 6, cost (Fig 3.12/3.13): description lengths, the study's cost model, and a replay.

Two views of the same question -- what does caching save on a held-out run?

- **The study's cost model** (``_cost``): characters / 4 = tokens at gpt-4o-mini and
  text-embedding-3-small prices; building a table costs the embeddings of its entries, using it
  costs the query embeddings plus the revise prompts. The revise prompt is built by the town's
  real revision builder from each mode's best candidate; the revised answer is taken to be as
  long as the cached one (the revision rewrites it). Priced twice: with the study's embedding
  price, and with our local embedder (no dollars).
- **A replay through llmcache** (measured): the table run's recorded answers are written into a
  real ``SemanticCache`` through ``CachedLLM`` (collect mode, replaying the recorded answers),
  then every held-out query is sent through ``CachedLLM`` in serve mode: read and choose hits
  cost nothing, revise hits make real revision calls to the real LLM, and a miss is answered
  by the call the held-out run made for it (its recorded answer at the server's recorded
  usage: what asking again would cost, without asking the model the run's calls a second
  time). The ledger's token counts priced at gpt-4o-mini give spent and avoided dollars.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from agent_core.llm import cache_config, town_options, town_request
from llmcache import CachedLLM, CacheOptions, EmbedMode, Mode, SemanticCache
from llmcache.types import PriceTable

from ._cost import (
    LOCAL_EMBEDDER_PRICES,
    STUDY_PRICES,
    CostPrompt,
    description_lengths,
    mode_costs,
    study_price_table,
)
from ._data import MODES, EmbeddingStore, Prompt, kept_groups
from ._replay import RecordedAnswers, ReplayClient
from ._results import CostResult, ReplayCost
from ._tables import TableIndex

__all__ = ["cost_study"]


def _request(p: Prompt) -> dict[str, Any]:
    """The keyword arguments the town sent for ``p`` (what the table's partition hashes)."""
    return town_request(p.call(), p.model)


def _options(p: Prompt) -> CacheOptions:
    return town_options(p.call())


def _revise_chars(query: Prompt, cached: Prompt) -> int:
    messages = query.call().revision(cached.response) or []
    return sum(len(str(m.get("content", ""))) for m in messages)


def _cost_prompts(
    table_run: Sequence[Prompt], queries: Sequence[Prompt], store: EmbeddingStore
) -> tuple[list[CostPrompt], list[CostPrompt]]:
    def base(p: Prompt, **extra: Any) -> CostPrompt:
        modifier = p.modifier if p.modifier in ("read", "choose", "revise") else "read"
        return CostPrompt(
            group=p.group,
            category=p.category,
            prompt_chars=p.prompt_chars,
            answer_chars=len(p.response),
            full_chars=len(p.description("full")),
            keyword_chars=len(p.description("keyword")),
            modifier=modifier,
            **extra,
        )

    table = [base(p) for p in table_run]
    keys = {p.key for p in table_run}
    indexes = {m: TableIndex(table_run, store, m) for m in MODES}
    out: list[CostPrompt] = []
    for q in queries:
        hit = q.key in keys
        prompt_chars: dict[str, int] = {}
        answer_chars: dict[str, int] = {}
        if hit and q.modifier == "revise":
            for m in MODES:
                items, sims = indexes[m].similarities(store.embed([q.description(m)])[0], q.key)
                best = items[int(sims.argmax())]
                prompt_chars[m] = _revise_chars(q, best)
                answer_chars[m] = len(best.response)
        out.append(
            base(q, hit=hit, revise_prompt_chars=prompt_chars, revise_answer_chars=answer_chars)
        )
    store.save()
    return table, out


def _replay(
    table_run: Sequence[Prompt],
    queries: Sequence[Prompt],
    *,
    client: Any,
    model: str,
    embedder: Any,
    max_attempts: int,
    prices: PriceTable,
    seed: int,
    progress: Callable[[int], None] | None,
) -> dict[str, ReplayCost]:
    out = {"none": ReplayCost(spent_usd=sum(q.cost_usd for q in queries), calls=len(queries))}
    for mode in MODES:
        with tempfile.TemporaryDirectory(prefix=f"cost-{mode}-") as tmp:
            cache = SemanticCache(
                tmp,
                embedder=embedder,
                # Seeded: serve mode draws among the answers of one prompt (variety).
                config=cache_config(
                    mode=Mode.COLLECT, embed=EmbedMode(mode), max_attempts=1
                ).updated(explore_seed=seed),
                prices=prices,
            )
            builder = CachedLLM(ReplayClient(table_run), cache=cache)
            for p in table_run:
                builder.chat.completions.create_with_info(**_request(p), cache=_options(p))
            answers = RecordedAnswers(queries, client, model)
            serving = CachedLLM(
                answers,
                cache=cache.with_config(mode=Mode.SERVE, max_attempts=max_attempts),
            )
            replay = ReplayCost()
            for q in queries:
                answers.begin()
                kwargs = _request(q)
                kwargs["model"] = model
                replay.calls += 1
                try:
                    _, info = serving.chat.completions.create_with_info(**kwargs, cache=_options(q))
                except Exception:  # an unanswerable query costs what its tries cost
                    continue
                replay.spent_usd += info.cost_usd
                replay.avoided_usd += info.avoided_usd
                replay.hits += info.outcome == "hit"
                replay.revise_calls += info.outcome == "hit" and info.modifier == "revise"
                if progress is not None:
                    progress(1)
            cache.close()
        out[mode] = replay
    return out


def cost_study(
    table_run: Sequence[Prompt],
    queries: Sequence[Prompt],
    store: EmbeddingStore,
    *,
    client: Any,
    model: str,
    max_attempts: int,
    sim_days: float,
    seed: int,
    progress: Callable[[int], None] | None = None,
) -> CostResult:
    table, qs = _cost_prompts(table_run, queries, store)
    groups, overall = description_lengths([*table, *qs], kept_groups())
    replay = _replay(
        table_run,
        queries,
        client=client,
        model=model,
        embedder=store.embedder,
        max_attempts=max_attempts,
        # Whatever model answers the replay is priced as the study's LLM.
        prices=study_price_table(),
        seed=seed,
        progress=progress,
    )
    return CostResult(
        chars_per_token=STUDY_PRICES.chars_per_token,
        prices=STUDY_PRICES.as_dict(),
        models={"llm": STUDY_PRICES.llm_model, "embed": STUDY_PRICES.embed_model},
        groups=groups,
        description_reduction=overall,
        study_prices=mode_costs(table, qs, STUDY_PRICES),
        local_embedder=mode_costs(table, qs, LOCAL_EMBEDDER_PRICES),
        replay=replay,
        sim_days=sim_days,
    )
