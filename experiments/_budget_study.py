"""The wrong-hit budget on the town: a live cache under δ answers the held-out run.

The quality step asks what a static threshold would serve; this step asks what the cache serves
when it sets its thresholds itself. Per embedding mode, the table run's answers are written
into a real :class:`~llmcache.SemanticCache` (as in the cost replay), then every held-out query,
in the order the town asked it, goes through :class:`~llmcache.CachedLLM` in online mode, once
per budget δ of the profile and once at the library's static default threshold:

- the **equivalence** that labels the tables is the query's own tolerance
  (:meth:`agent_core.Template.acceptable`: its requirements, then the template's tolerance of
  the fresh answer), the same rule the served answers are judged by;
- a **miss** or an **explored** hit is answered with the query's recorded answer (its true
  answer, at its recorded tokens) and stored, as a live run would store it;
- a **revision** (``revise`` hit) goes to the real LLM while the profile's revise budget lasts;
  a revise hit beyond it is *untried*: counted, and left out of every rate and cost;
- every answer the cache **serves** is judged against the true answer by the template's
  tolerance: the share judged wrong is what δ promises to bound.

Costs are measured tokens at the study's LLM price (:func:`~._cost.study_price_table`); the
baseline is the same queries without a cache. Exploration draws are seeded (the profile's
seed, ``CacheConfig.explore_seed``), so a rerun explores the same calls -- as long as every
revision it asks for gets the same answer, which a sampling LLM need not give.
"""

from __future__ import annotations

import tempfile
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from statistics import median
from types import SimpleNamespace
from typing import Any

from agent_core import TextAgreement, TownCall
from agent_core.llm import cache_config, town_options, town_request
from llmcache import CachedLLM, CacheOptions, EmbedMode, Mode, SemanticCache
from llmcache.embedders import Embedder

from ._cost import study_price_table
from ._data import ALL, MODES, Prompt, kept_groups
from ._replay import ReplayClient
from ._results import BudgetGroup, BudgetResult, BudgetRun
from ._stats import wilson_interval

__all__ = ["STATIC_THRESHOLD", "budget_study", "equivalence", "summarise"]

#: The library's static default threshold (raw cosine), the comparison the budget is read against.
STATIC_THRESHOLD = cache_config().threshold


def equivalence(call: TownCall, text: TextAgreement) -> Callable[[str, str], bool]:
    """A call's equivalence for the budget's labels: the cached answer (after its modifier) is
    right when the template accepts it for this query with the fresh answer as the truth."""
    t = call.template
    requirements = call.requirements

    def same(cached: str, fresh: str) -> bool:
        try:
            return t.acceptable(cached, fresh, requirements, text=text).acceptable
        except ValueError:  # an answer that does not parse is not the same answer
            return False

    return same


class _OutOfRevisions(Exception):
    """A revision asked for after the revise budget ran out."""


class _Answers:
    """The budget replay's LLM: a recorded query gets its recorded answer at its recorded
    tokens; anything else (a revision of a cached answer) goes to the real LLM while the revise
    budget lasts, and raises after it."""

    def __init__(self, recorded: Sequence[Prompt], client: Any, model: str, budget: int) -> None:
        self._replay = ReplayClient(recorded)
        self._client = client
        self._model = model
        self._budget = budget
        self.revise_calls = 0
        self.refused = False  # set when a revision was refused; the caller resets it
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def create(self, **kwargs: Any) -> Any:
        try:
            return self._replay.chat.completions.create(**kwargs)
        except KeyError:  # not a recorded query: a revision
            pass
        if self.revise_calls >= self._budget:
            self.refused = True
            raise _OutOfRevisions("the revise budget of this configuration is spent")
        self.revise_calls += 1
        return self._client.chat.completions.create(**{**kwargs, "model": self._model})


class _Tally:
    """Per group: what the cache did with the held-out queries, and what it cost."""

    def __init__(self) -> None:
        self.groups: dict[str, BudgetGroup] = defaultdict(lambda: BudgetGroup(queries=0))

    def add(self, group: str, **counts: float) -> None:
        for g in (group, ALL):
            row = self.groups[g]
            for name, value in counts.items():
                setattr(row, name, getattr(row, name) + value)


def summarise(row: BudgetGroup) -> BudgetGroup:
    """``row`` with its rates filled in from its counts."""
    lo, hi = wilson_interval(row.wrong, row.hits)
    return row.model_copy(
        update={
            "wrong_rate": row.wrong / row.hits if row.hits else None,
            "wrong_low": lo,
            "wrong_high": hi,
            "cost_reduction": 1.0 - row.spent_usd / row.baseline_usd if row.baseline_usd else None,
        }
    )


def _build(table_run: Sequence[Prompt], cache: SemanticCache) -> None:
    builder = CachedLLM(ReplayClient(table_run), cache=cache)
    for p in table_run:
        call = p.call()
        builder.chat.completions.create_with_info(
            **town_request(call, p.model), cache=town_options(call)
        )


def _options(call: TownCall, text: TextAgreement) -> CacheOptions:
    return town_options(call).model_copy(update={"equivalence": equivalence(call, text)})


def _one(
    table_run: Sequence[Prompt],
    queries: Sequence[Prompt],
    *,
    mode: str,
    budget: float | None,
    texts: Callable[[str], TextAgreement],
    embedder: Embedder,
    answers: _Answers,
    max_attempts: int,
    seed: int,
    progress: Callable[[int], None] | None,
) -> BudgetRun:
    tally = _Tally()
    with tempfile.TemporaryDirectory(prefix=f"budget-{mode}-") as tmp:
        cache = SemanticCache(
            Path(tmp),
            embedder=embedder,
            config=cache_config(mode=Mode.COLLECT, embed=EmbedMode(mode), max_attempts=1).updated(
                explore_seed=seed
            ),
            prices=study_price_table(),
        )
        try:
            _build(table_run, cache)
            serving = cache.with_config(
                mode=Mode.ONLINE, max_attempts=max_attempts, wrong_hit_budget=budget
            )
            llm = CachedLLM(answers, cache=serving)
            for q in queries:
                call = q.call()
                text = texts(q.category)
                tally.add(q.group, queries=1)
                answers.refused = False
                try:
                    completion, info = llm.chat.completions.create_with_info(
                        **town_request(call, q.model), cache=_options(call, text)
                    )
                except Exception:  # counted: a refused revision, or a query nothing answers
                    tally.add(q.group, **({"untried": 1} if answers.refused else {"failed": 1}))
                    continue
                finally:
                    if progress is not None:
                        progress(1)
                served = completion.choices[0].message.content or ""
                wrong = 0
                if info.outcome == "hit":
                    verdict = call.template.acceptable(
                        served, q.response, call.requirements, text=text
                    )
                    wrong = int(not verdict.acceptable)
                tally.add(
                    q.group,
                    hits=int(info.outcome == "hit"),
                    wrong=wrong,
                    explored=int(info.explored),
                    baseline_usd=q.cost_usd,
                    spent_usd=info.cost_usd,
                )
            _table_figures(serving, queries, tally)
        finally:
            cache.close()
    return BudgetRun(
        mode=mode,
        budget=budget,
        threshold=None if budget is not None else STATIC_THRESHOLD,
        groups={g: summarise(row) for g, row in tally.groups.items()},
        revise_calls=answers.revise_calls,
    )


def _table_figures(cache: SemanticCache, queries: Sequence[Prompt], tally: _Tally) -> None:
    """The tables' own view at the end: labels, the cache's estimate of its wrong-hit rate, the
    median threshold in force of the tables still serving, and the tables closed, per group."""
    group_of = {q.category: q.group for q in queries}
    tables: dict[str, int] = defaultdict(int)
    closed: dict[str, int] = defaultdict(int)
    labels: dict[str, int] = defaultdict(int)
    wrong: dict[str, int] = defaultdict(int)
    in_force: dict[str, int] = defaultdict(int)
    thresholds: dict[str, list[float]] = defaultdict(list)
    for table in cache.stats().tables:
        group = group_of.get(table.category)
        if group is None:
            continue
        for g in (group, ALL):
            tables[g] += 1
            labels[g] += table.labels
            if table.closed:
                closed[g] += 1
            elif table.threshold_in_force is not None:
                thresholds[g].append(table.threshold_in_force)
            if table.wrong_rate is not None:
                in_force[g] += table.labels_in_force
                wrong[g] += round(table.wrong_rate * table.labels_in_force)
    for g, row in tally.groups.items():
        row.labels = labels.get(g, 0)
        row.tables = tables.get(g, 0)
        row.tables_closed = closed.get(g, 0)
        row.threshold_median = median(thresholds[g]) if thresholds.get(g) else None
        row.estimated_wrong_rate = wrong[g] / in_force[g] if in_force.get(g) else None


def budget_study(
    table_run: Sequence[Prompt],
    queries: Sequence[Prompt],
    *,
    texts: Callable[[str], TextAgreement],
    embedder: Embedder,
    client: Any,
    model: str,
    budgets: Sequence[float],
    revise_budget: int,
    max_attempts: int,
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
) -> BudgetResult:
    """The held-out run ``queries`` answered online from tables of ``table_run``, per mode: at
    each budget δ of ``budgets`` and at the static default threshold. ``texts`` gives each
    category's text agreement (its calibrated bound); ``revise_budget`` revisions are shared
    by the configurations. See the module docstring."""
    groups = set(kept_groups())
    kept = [q for q in queries if q.group in groups]
    levels: list[float | None] = [*budgets, None]
    per_config = max(0, revise_budget // (len(MODES) * len(levels)))
    runs = [
        _one(
            table_run,
            kept,
            mode=mode,
            budget=level,
            texts=texts,
            embedder=embedder,
            answers=_Answers([*table_run, *queries], client, model, per_config),
            max_attempts=max_attempts,
            seed=seed,
            progress=progress,
        )
        for mode in MODES
        for level in levels
    ]
    return BudgetResult(
        query_run=queries[0].run if queries else 0,
        table_run=table_run[0].run if table_run else 0,
        runs=runs,
    )
