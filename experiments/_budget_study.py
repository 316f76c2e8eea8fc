"""The wrong-hit budget on the town: a live cache under δ answers the held-out run, and what it
serves is set against the model's own second answers to the same queries.

The quality step asks what a static threshold would serve; this step asks what the cache serves
when it sets its thresholds itself, under a budget on the *excess* of unacceptable answers over
the model's own variability. Per embedding mode, the table run's answers are written into a real
:class:`~llmcache.SemanticCache` (as in the cost replay), then every held-out query, in the order
the town asked it, goes through :class:`~llmcache.CachedLLM`, once per configuration:

- **budget**: online, under each δ of the profile, the tables pooling their template's evidence;
  and once more with each table on its own evidence, to measure what pooling saves (the labels
  a table holds at its first hit);
- **audit**: online under the audit guard at each δ of the profile, every table starting at
  the static default threshold and pooling its template's evidence: it serves from the first
  hit, audits a share of would-be hits and tightens what its audits show over δ. An audited
  query is answered as a miss is (the caller gets the fresh answer: here the query's recorded
  one) and the cached answer is judged against it; audits are counted and priced apart;
- **static**: online at the library's static default threshold;
- **serve**: serve mode, every query whose table has an entry answered from it (the study's
  operating point);
- **random**: a random same-table answer through the same hit step, the baseline.

How the cache learns and what each answer costs:

- the **equivalence** that labels the tables is the query's own tolerance
  (:meth:`agent_core.Template.acceptable`: its requirements, then the template's tolerance of
  the fresh answer), the same rule the served answers are judged by;
- a **miss**, an **explored** or an **audited** hit is answered with the query's recorded
  answer (its true answer, at its recorded tokens) and stored, as a live run would store it;
  a **twin** (the second ask of a miss or an explored hit, for the model's own variability)
  goes to the real LLM;
- a **revision** (``revise`` hit) goes to the real LLM while the profile's revise budget lasts;
  a revise hit beyond it is *untried*: counted, and left out of every rate and cost.

Every served answer is judged against the true answer. For a sample of the served queries (up
to ``reanswer_sample`` per group and configuration) the real LLM answers the query once more,
and that second answer is judged against the same true answer: the **paired excess** is the
share of served answers not acceptable minus the share of second answers not acceptable, on the
same queries. That is what δ promises to bound. The **variety** is the number of distinct
answers per 100 served, beside the distinct true answers of the same queries.

Costs are measured tokens at the study's LLM price (:func:`~._cost.study_price_table`); the
baseline is the same queries without a cache. Exploration, twins and variety draws are seeded
(the profile's seed), and so is every live answer: the second answers by the query, the
revisions by the study's client (:class:`~._seeding.SeededClient`), so a rerun on a server
that honours a request's ``seed`` draws the same.
"""

from __future__ import annotations

import random
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any, Literal

from agent_core import TextAgreement, TownCall
from agent_core.llm import cache_config, town_options, town_request
from llmcache import CachedLLM, CacheOptions, EmbedMode, Mode, SemanticCache
from llmcache.embedders import Embedder

from ._adapter import Adapter
from ._cost import study_price_table
from ._data import ALL, MODES, Prompt, kept_groups
from ._replay import RecordedAnswers, ReplayClient
from ._results import BudgetGroup, BudgetResult, BudgetRun, PairedExcess
from ._stats import paired_difference_interval, rate

__all__ = ["STATIC_THRESHOLD", "Reanswers", "budget_study", "equivalence"]

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


class Reanswers:
    """The model's own second answer to a held-out query: asked once per query (shared by every
    configuration), with the query's own request and constraints, seeded by the query, and
    kept only when it is valid (up to ``max_attempts`` tries), as the town keeps its answers."""

    def __init__(self, client: Any, model: str, *, max_attempts: int, seed: int) -> None:
        self._client = client
        self._model = model
        self._max_attempts = max_attempts
        self._seed = seed
        self._answers: dict[tuple[int, int], str | None] = {}

    @property
    def asked(self) -> int:
        return sum(1 for a in self._answers.values() if a is not None)

    def answer(self, q: Prompt) -> str | None:
        key = (q.run, q.index)
        if key not in self._answers:
            self._answers[key] = self._ask(q)
        return self._answers[key]

    def _ask(self, q: Prompt) -> str | None:
        call = q.call()
        request = {**town_request(call, self._model), **town_options(call).constraints}
        for attempt in range(self._max_attempts):
            seed = (self._seed * 1_000_003 + q.index * 101 + attempt) % (2**31)
            try:
                response = self._client.chat.completions.create(**request, seed=seed)
                content = response.choices[0].message.content
                if content is None:
                    continue
                call.parse(content)  # the query's validator: schema, then its requirements
            except Exception:  # invalid, or the server failed: try again, then go without
                continue
            return str(content)
        return None


@dataclass
class _Served:
    """One served answer: its query, and whether it was acceptable for the true answer."""

    query: Prompt
    content: str
    acceptable: bool


@dataclass
class _Tally:
    """Per group: what one configuration did with the held-out queries, and what it cost."""

    groups: dict[str, BudgetGroup] = field(
        default_factory=lambda: defaultdict(lambda: BudgetGroup(queries=0))
    )
    served: dict[str, list[_Served]] = field(default_factory=lambda: defaultdict(list))

    def add(self, group: str, **counts: float) -> None:
        for g in (group, ALL):
            row = self.groups[g]
            for name, value in counts.items():
                setattr(row, name, getattr(row, name) + value)

    def serve(self, q: Prompt, content: str, acceptable: bool) -> None:
        for g in (q.group, ALL):
            self.served[g].append(_Served(q, content, acceptable))


def _build(table_run: Sequence[Prompt], cache: SemanticCache) -> None:
    builder = CachedLLM(ReplayClient(table_run), cache=cache)
    for p in table_run:
        call = p.call()
        builder.chat.completions.create_with_info(
            **town_request(call, p.model), cache=town_options(call)
        )


def _options(call: TownCall, text: TextAgreement) -> CacheOptions:
    return town_options(call).model_copy(update={"equivalence": equivalence(call, text)})


@dataclass
class _Setup:
    """What every configuration of one study shares."""

    table_run: Sequence[Prompt]
    queries: Sequence[Prompt]
    texts: Callable[[str], TextAgreement]
    embedder: Embedder
    client: Any
    model: str
    revise_budget: int
    max_attempts: int
    seed: int
    progress: Callable[[int], None] | None

    def acceptable(self, q: Prompt, served: str) -> bool:
        verdict = q.call().template.acceptable(
            served, q.response, q.call().requirements, text=self.texts(q.category)
        )
        return verdict.acceptable

    def tick(self) -> None:
        if self.progress is not None:
            self.progress(1)


def _online(
    setup: _Setup,
    mode: str,
    config: Literal["budget", "audit", "static", "serve"],
    *,
    budget: float | None = None,
    pooled: bool = True,
) -> tuple[BudgetRun, _Tally]:
    """The held-out run through a live cache: online (under ``budget``, kept by the proving
    guard or by the audit guard, or at the static threshold) or in serve mode."""
    tally = _Tally()
    answers = RecordedAnswers(
        [*setup.table_run, *setup.queries], setup.client, setup.model, setup.revise_budget
    )
    first_hit: dict[str, int] = {}
    labels: Counter[str] = Counter()
    with tempfile.TemporaryDirectory(prefix=f"budget-{mode}-") as tmp:
        cache = SemanticCache(
            Path(tmp),
            embedder=setup.embedder,
            config=cache_config(mode=Mode.COLLECT, embed=EmbedMode(mode), max_attempts=1).updated(
                explore_seed=setup.seed
            ),
            prices=study_price_table(),
        )
        try:
            _build(setup.table_run, cache)
            serving = cache.with_config(
                mode=Mode.SERVE if config == "serve" else Mode.ONLINE,
                max_attempts=setup.max_attempts,
                wrong_hit_budget=budget,
                guard="audit" if config == "audit" else None,
                pool_evidence=pooled,
            )
            llm = CachedLLM(answers, cache=serving)
            for q in setup.queries:
                call = q.call()
                tally.add(q.group, queries=1)
                answers.begin()
                try:
                    completion, info = llm.chat.completions.create_with_info(
                        **town_request(call, q.model), cache=_options(call, setup.texts(q.category))
                    )
                except Exception:  # counted: a refused revision, or a query nothing answers
                    tally.add(q.group, **({"untried": 1} if answers.refused else {"failed": 1}))
                    continue
                finally:
                    setup.tick()
                table = f"{q.category} / {q.agent}"
                labels[table] += info.label is not None
                content = completion.choices[0].message.content or ""
                if info.outcome == "hit":
                    first_hit.setdefault(table, labels[table])
                    tally.serve(q, content, setup.acceptable(q, content))
                tally.add(
                    q.group,
                    hits=int(info.outcome == "hit"),
                    explored=int(info.explored),
                    audits=int(info.audited),
                    audit_usd=info.audit_usd,
                    twins=int(info.twin),
                    baseline_usd=q.cost_usd,
                    spent_usd=info.cost_usd,
                )
            _table_figures(serving, setup.queries, tally, first_hit, pooled=pooled)
        finally:
            cache.close()
    run = BudgetRun(
        mode=mode,
        config=config,
        budget=budget,
        threshold=STATIC_THRESHOLD if config in ("static", "audit") else None,
        pooled=pooled,
        groups={},
        revise_calls=answers.revise_calls,
    )
    if config == "budget":
        run.first_hit_labels = dict(sorted(first_hit.items()))
        run.never_served_labels = {t: n for t, n in sorted(labels.items()) if t not in first_hit}
    return run, tally


def _random(setup: _Setup, mode: str) -> tuple[BudgetRun, _Tally]:
    """A random answer from the query's table (run 1's entries of its category and agent),
    through the same hit step; a candidate the step refuses is answered by the LLM (the true
    answer, at its recorded cost)."""
    tally = _Tally()
    rng = random.Random(f"{setup.seed}:budget-random:{mode}")
    by_table: dict[tuple[str, str], list[Prompt]] = defaultdict(list)
    for p in setup.table_run:
        by_table[(p.category, p.agent)].append(p)
    adapter = Adapter(
        client=setup.client,
        model=setup.model,
        embedder=setup.embedder,
        revise_budget=setup.revise_budget,
    )
    for q in setup.queries:
        setup.tick()
        table = by_table.get((q.category, q.agent))
        outcome = adapter.outcome(q, rng.choice(table), 0.5, "random") if table else None
        if outcome is not None and outcome.status == "over budget":
            tally.add(q.group, queries=1, untried=1)
            continue
        tally.add(q.group, queries=1, baseline_usd=q.cost_usd)
        if outcome is None or outcome.status != "adapted":
            # No table, or the hit step refused the candidate: the LLM answers (the true
            # answer), after what the refused revision cost.
            spent = q.cost_usd + (outcome.cost_usd if outcome is not None else 0.0)
            tally.add(q.group, spent_usd=spent)
            continue
        tally.add(q.group, hits=1, spent_usd=outcome.cost_usd)
        tally.serve(q, outcome.content, setup.acceptable(q, outcome.content))
    return BudgetRun(
        mode=mode, config="random", groups={}, revise_calls=adapter.revise_calls
    ), tally


def _table_figures(
    cache: SemanticCache,
    queries: Sequence[Prompt],
    tally: _Tally,
    first_hit: dict[str, int],
    *,
    pooled: bool,
) -> None:
    """The tables' own view at the end, per group: labels, tables closed, held back (their
    own labels show them over budget) and whether any of those served, the median threshold
    in force of the open tables, and the model's self-disagreement as the cache estimated it:
    over the pairs of every table of the group, or of every pool when the tables pool (a
    pool's tables all show its pairs, which are counted once)."""
    group_of = {q.category: q.group for q in queries}
    figures: dict[str, Counter[str]] = defaultdict(Counter)
    thresholds: dict[str, list[float]] = defaultdict(list)
    disagreement: dict[str, dict[tuple[str, ...], tuple[int, int]]] = defaultdict(dict)
    for table in cache.stats().tables:
        group = group_of.get(table.category)
        if group is None:
            continue
        budget = table.wrong_hit_budget
        over = budget is not None and table.excess_ci is not None and table.excess_ci[0] > budget
        name = f"{table.category} / {table.agent}"
        for g in (group, ALL):
            figures[g]["tables"] += 1
            figures[g]["labels"] += table.labels
            figures[g]["tables_closed"] += int(table.closed)
            figures[g]["tables_tightened"] += int(table.threshold_source == "tightened")
            figures[g]["tables_serving"] += int(table.hits > 0)
            figures[g]["held_back"] += int(over)
            figures[g]["served_while_over"] += int(over and name in first_hit)
            if not table.closed and table.threshold_in_force is not None:
                thresholds[g].append(table.threshold_in_force)
            if table.self_disagreement is not None:
                n = table.self_disagreement_pairs
                source = (table.category, table.model) if pooled else (table.key,)
                disagreement[g][source] = (round(table.self_disagreement * n), n)
    for g, row in tally.groups.items():
        for name, value in figures.get(g, Counter()).items():
            setattr(row, name, value)
        row.threshold_median = median(thresholds[g]) if thresholds.get(g) else None
        differ = sum(d for d, _ in disagreement[g].values())
        pairs = sum(n for _, n in disagreement[g].values())
        if pairs:
            row.self_disagreement = differ / pairs


def _distinct(contents: Sequence[str]) -> float | None:
    return 100.0 * len(set(contents)) / len(contents) if contents else None


def _sample(served: Sequence[_Served], n: int, seed: int) -> list[_Served]:
    """Up to ``n`` served answers, drawn by one seeded order of the queries that every
    configuration shares: configurations that served the same queries pair the same ones,
    so the model is asked as few second answers as can be."""
    if len(served) <= n:
        return list(served)

    def rank(s: _Served) -> float:
        return random.Random(f"{seed}:reanswer:{s.query.run}:{s.query.index}").random()

    return sorted(served, key=rank)[:n]


def _summarise(
    run: BudgetRun, tally: _Tally, setup: _Setup, reanswers: Reanswers, sample: int
) -> BudgetRun:
    """Fill ``run``'s groups: rates, the paired excess on a sample of the served queries,
    variety and cost reduction."""
    for g, row in tally.groups.items():
        served = tally.served.get(g, [])
        row.acceptable = rate(sum(s.acceptable for s in served), len(served))
        row.distinct_served = _distinct([s.content for s in served])
        row.distinct_fresh = _distinct([s.query.response for s in served])
        if g != ALL:
            pairs = []
            for s in _sample(served, sample, setup.seed):
                second = reanswers.answer(s.query)
                if second is not None:
                    pairs.append((not s.acceptable, not setup.acceptable(s.query, second)))
            row.paired = _paired(pairs)
        row.cost_reduction = 1.0 - row.spent_usd / row.baseline_usd if row.baseline_usd else None
    # "all" pairs every group's sample (each group weighs by its own sample).
    everything: list[tuple[bool, bool]] = []
    for g, row in tally.groups.items():
        if g != ALL:
            p = row.paired
            everything += [(True, True)] * p.both_bad
            everything += [(True, False)] * (p.served_bad - p.both_bad)
            everything += [(False, True)] * (p.reanswer_bad - p.both_bad)
            everything += [(False, False)] * (p.pairs - p.served_bad - p.reanswer_bad + p.both_bad)
    if ALL in tally.groups:
        tally.groups[ALL].paired = _paired(everything)
    for row in tally.groups.values():
        p = row.paired
        row.reanswer = rate(p.pairs - p.reanswer_bad, p.pairs) if p.pairs else None
    run.groups = dict(tally.groups)
    return run


def _paired(pairs: Sequence[tuple[bool, bool]]) -> PairedExcess:
    both = sum(1 for a, b in pairs if a and b)
    first = sum(1 for a, b in pairs if a and not b)
    second = sum(1 for a, b in pairs if b and not a)
    neither = len(pairs) - both - first - second
    interval = paired_difference_interval(both, first, second, neither)
    if interval is None:
        return PairedExcess()
    excess, low, high = interval
    return PairedExcess(
        pairs=len(pairs),
        served_bad=both + first,
        reanswer_bad=both + second,
        both_bad=both,
        excess=excess,
        low=low,
        high=high,
    )


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
    reanswer_sample: int = 100,
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
) -> BudgetResult:
    """The held-out run ``queries`` answered from tables of ``table_run``, per mode, in every
    configuration (see the module docstring). ``texts`` gives each category's text agreement
    (its calibrated bound); ``revise_budget`` revisions are shared by the configurations;
    ``reanswer_sample`` second answers are asked per group and configuration, at most."""
    groups = set(kept_groups())
    kept = [q for q in queries if q.group in groups]
    configs: list[tuple[Literal["budget", "audit", "static", "serve"], float | None, bool]] = [
        *(("budget", b, True) for b in budgets),
        *(("budget", b, False) for b in budgets),
        *(("audit", b, True) for b in budgets),
        ("static", None, True),
        ("serve", None, True),
    ]
    per_config = max(0, revise_budget // (len(MODES) * (len(configs) + 1)))
    setup = _Setup(
        table_run, kept, texts, embedder, client, model, per_config, max_attempts, seed, progress
    )
    reanswers = Reanswers(client, model, max_attempts=max_attempts, seed=seed)
    runs: list[BudgetRun] = []
    for mode in MODES:
        for config, budget, pooled in configs:
            run, tally = _online(setup, mode, config, budget=budget, pooled=pooled)
            runs.append(_summarise(run, tally, setup, reanswers, reanswer_sample))
        run, tally = _random(setup, mode)
        runs.append(_summarise(run, tally, setup, reanswers, reanswer_sample))
    return BudgetResult(
        query_run=queries[0].run if queries else 0,
        table_run=table_run[0].run if table_run else 0,
        runs=runs,
        reanswer_sample=reanswer_sample,
        reanswers_asked=reanswers.asked,
    )
