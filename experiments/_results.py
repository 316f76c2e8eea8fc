"""The JSON results of every experiment: pydantic models, one file per experiment.

Each experiment writes ``<out>/<name>.json`` holding one of these models; the figures, the
notebooks and ``report.md`` read only these files, so re-plotting never re-simulates.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, Field

from llmcache.replay import Figures

__all__ = [
    "JUDGE_VERDICTS",
    "RESULT_MODELS",
    "AnswerSample",
    "BudgetGroup",
    "BudgetResult",
    "BudgetRun",
    "CollectResult",
    "CompareResult",
    "CorrelationResult",
    "CostResult",
    "GroupCost",
    "GuardStory",
    "JudgeReliability",
    "ModeCost",
    "ModeSummary",
    "ObservedResult",
    "PairShare",
    "PairedExcess",
    "PairwiseTally",
    "QualityPoint",
    "QualityResult",
    "RateCI",
    "RatingTable",
    "ReplayBed",
    "ReplayCost",
    "ReplayRow",
    "ReplayStudyResult",
    "RunInfo",
    "SaturationCurve",
    "SaturationResult",
    "SimilarityResult",
    "SkillRating",
    "TextCalibration",
    "load_result",
    "save_result",
]

EmbedName = Literal["full", "keyword"]


class CategoryCounts(BaseModel):
    """How one category's calls of a run were answered."""

    asked: int = 0
    first_try: int = 0  # valid at the model's first attempt
    resubmitted: int = 0  # needed more than one attempt
    escalated: int = 0  # answered (or last tried) by the superior model
    fell_back: int = 0  # no valid answer at all: the town used its default
    # Answered inside a prompt that asked several (importance ratings, agent_core.rating_batch), and
    # those prompts.
    batched: int = 0
    batches: int = 0
    # Accepted answers (recorded as valid) that echo their format's placeholder or literal, and
    # that are degenerate (agent_core's Template.flaws): 0 for a town that refuses them; None
    # in a result written before they were counted (not counted is not none found).
    echoes: int | None = None
    degenerate: int | None = None


class RunInfo(BaseModel):
    """One recorded simulation run."""

    run: int
    seed: int
    days: float
    agents: list[str]
    dataset: str
    wall_seconds: float
    prompts_recorded: int  # every logical call, dialogue included
    prompts_kept: int  # after dropping dialogue categories (resubmissions are separate lines)
    per_category: dict[str, int]  # kept prompts
    resubmitted: int  # logical calls that needed more than one attempt
    resubmission_rate: float  # resubmitted / prompts_recorded
    escalated: int  # logical calls answered (or last tried) by the superior model
    superior_rate: float
    failed: int  # calls that got no valid answer at all (the town fell back)
    llm: str  # what answered, e.g. "local: smollm2-135m, superior qwen2.5-coder-1.5b"
    machine: str = ""  # date, CPU and cores it was simulated on ("" if not recorded)
    categories: dict[str, CategoryCounts] = Field(default_factory=dict)  # every call


class CollectResult(BaseModel):
    profile: str
    runs: list[RunInfo]
    # The directory the runs were read from, when they were not simulated for this study.
    recorded_in: str | None = None


class SimilarityResult(BaseModel):
    """Fig 3.3: per query, the mean normalised similarity to every same-table entry of run 2."""

    query_run: int
    table_run: int
    embedder: str
    # mode -> group -> one mean similarity per query
    means: dict[str, dict[str, list[float]]]


class SkillRating(BaseModel):
    mu: float
    sigma: float
    games: int  # judgements this candidate took part in


class RatingTable(BaseModel):
    """TrueSkill ratings of every candidate label, overall and per group, from one judge."""

    judge: str
    overall: dict[str, SkillRating]
    per_group: dict[str, dict[str, SkillRating]]
    judgements: int  # rankings that went into the ratings
    failures: int  # rankings the judge could not make (recorded, not rated)


class PairShare(BaseModel):
    """A share of candidate pairs, with its 95% Wilson interval.

    A tie counts half (neither side preferred), so ``score`` may end in .5. Pairs taken from
    the same query are not independent, so the interval is a little too narrow there.
    """

    score: float  # pairs counted for, a tie as 0.5
    pairs: int
    rate: float | None  # None without pairs
    low: float
    high: float


# A judge's verdict on the true answer against a random same-table answer, read off the
# interval of its preference: chance is 50%.
JUDGE_VERDICTS = ("above chance", "at chance", "below chance", "not measured")


class JudgeReliability(BaseModel):
    """How far a judge's rankings can be trusted."""

    judge: str
    # Mean fraction of candidate pairs ordered the same way by two presentations of the same
    # candidates (shuffled / reversed); None when the judge is deterministic by construction.
    shuffle_agreement: float | None
    # Mean fraction of candidate pairs the two judges order the same way (ties excluded).
    agreement_with: dict[str, float] = Field(default_factory=dict)
    # The judge's rank of the true response: mean, and how often it was ranked first.
    true_mean_rank: float | None = None
    true_first_rate: float | None = None
    # Judge quality, each a share of pairs with its interval (None where the run could not
    # measure it). ``reversal``: pairs one presentation orders the same way as its exact
    # reverse, single-order (also for a judge that combines both orders). ``true_over_random``:
    # (true answer, random same-table answer) pairs in which the true answer is preferred.
    # ``reference_agreement``: pairs ordered as the reference judge orders them (ties left out).
    reversal: PairShare | None = None
    true_over_random: PairShare | None = None
    reference_agreement: PairShare | None = None

    @property
    def verdict(self) -> str:
        """One of :data:`JUDGE_VERDICTS`: where the true-over-random interval lies against 50%.

        A judge not shown above chance has TrueSkill figures that are not findings.
        """
        share = self.true_over_random
        if share is None or share.pairs == 0:
            return "not measured"
        if share.low > 0.5:
            return "above chance"
        if share.high < 0.5:
            return "below chance"
        return "at chance"


class CorrelationResult(BaseModel):
    """Fig 3.4/3.5, E.1-E.6: best candidate per similarity region, judged against the truth."""

    # mode -> the four regions' labels, e.g. "(0.9,0.925]"
    regions: dict[str, list[str]]
    queries: dict[str, int]  # mode -> queries judged
    filled: dict[str, dict[str, int]]  # mode -> region -> queries with a candidate there
    modifier_failures: dict[str, int]  # mode -> candidates the modifier could not adapt
    ratings: dict[str, dict[str, RatingTable]]  # judge -> mode -> ratings
    reliability: dict[str, JudgeReliability]  # judge -> reliability


class SaturationCurve(BaseModel):
    tables: str  # "run 2", "run 3", "run 4", or "combined"
    mean: list[float]  # best retrieval similarity (normalised) per threshold
    std: list[float]
    entries: list[int]  # table size at each threshold (summed over the partitions queried)
    # Fraction of queries whose table held an entry at each threshold (the rest had nothing
    # to retrieve and are left out of that point's mean).
    coverage: list[float] = Field(default_factory=list)


class SaturationResult(BaseModel):
    """Fig 3.6/3.7, F.1-F.3: best similarity of run 1's queries as the tables grow."""

    thresholds_days: list[float]
    thresholds_hours_of_data: list[float]  # the study's unit: 1 hour = 2.5 simulated days
    queries: int
    # mode -> curves: one per table run (spanning one run's days: the first points of
    # thresholds_days), then "combined" (the runs appended in order, spanning all thresholds)
    curves: dict[str, list[SaturationCurve]]
    saturation_days: dict[str, float | None]  # mode -> where the mean curve flattens


class ObservedResult(BaseModel):
    """Fig 3.8/3.9: observed actors vs best retrieval similarity at the same thresholds."""

    thresholds_days: list[float]
    observed_mean: list[float]  # mean observed actors per agent, tables' runs averaged
    similarity_mean: dict[str, list[float]]  # mode -> mean best similarity
    pearson_r: dict[str, float | None]
    pearson_p: dict[str, float | None]


class CompareResult(BaseModel):
    """Fig 3.10/3.11: best full vs best keyword vs random vs true, on a held-out run."""

    query_run: int
    table_run: int
    queries: dict[str, int]  # group -> queries judged
    modifier_failures: dict[str, int]  # mode -> candidates the modifier could not adapt
    ratings: dict[str, RatingTable]  # judge -> ratings of full / keyword / random / true
    reliability: dict[str, JudgeReliability]


class GroupCost(BaseModel):
    group: str
    full_chars: float  # mean embedding-description length
    keyword_chars: float
    reduction: float  # 1 - keyword / full


class ModeCost(BaseModel):
    """Dollars for one way of answering the held-out run (``none`` = no caching)."""

    mode: str  # "none", "full", "keyword"
    building_usd: float  # making the table: embedding its entries (its LLM calls happen anyway)
    usage_usd: float  # the held-out run: query embeddings + revise prompts (+ misses)
    total_usd: float
    reduction: float | None  # 1 - total / total without caching
    usage_reduction: float | None


class ReplayCost(BaseModel):
    """One mode of the held-out run replayed through ``CachedLLM`` in serve mode, as llmcache's
    ledger counted it (real token counts; ``none``: the run's own recorded calls)."""

    spent_usd: float = 0.0
    avoided_usd: float = 0.0
    calls: int = 0
    hits: int = 0
    revise_calls: int = 0  # hits whose cached answer was revised by a real LLM call


class ModeSummary(BaseModel):
    """One way of answering the held-out run, every view of its cost side by side."""

    mode: str  # "none", "full", "keyword"
    study: ModeCost  # the study's cost model at the study's prices
    local: ModeCost | None  # the same with our local embedder (embeddings cost nothing)
    replay: ReplayCost
    replay_saving: float | None  # 1 - replay spent / replay spent without a cache


class CostResult(BaseModel):
    """Fig 3.12/3.13: description length and cost, at the study's prices and ours."""

    chars_per_token: float
    prices: dict[str, float]  # $ per 1M tokens: llm_in, llm_out, embed
    # Which models those prices are llmcache's list prices of: "llm", "embed".
    models: dict[str, str] = Field(default_factory=dict)
    groups: list[GroupCost]
    description_reduction: float  # over all kept prompts
    study_prices: list[ModeCost]  # 4 chars/token, gpt-4o-mini + text-embedding-3-small
    local_embedder: list[ModeCost]  # the same LLM prices, embeddings free (local MiniLM)
    # Measured by replaying the held-out run through CachedLLM in serve mode: mode -> cost.
    replay: dict[str, ReplayCost]
    sim_days: float  # simulated time the held-out run covers

    def summary(self) -> list[ModeSummary]:
        """``none``, ``full`` and ``keyword`` (those the study model priced), each with its
        replay and the replay's saving against the uncached run."""
        local = {m.mode: m for m in self.local_embedder}
        uncached = self.replay.get("none", ReplayCost()).spent_usd
        out = []
        for study in self.study_prices:
            replay = self.replay.get(study.mode, ReplayCost())
            saving = 1.0 - replay.spent_usd / uncached if uncached else None
            out.append(
                ModeSummary(
                    mode=study.mode,
                    study=study,
                    local=local.get(study.mode),
                    replay=replay,
                    replay_saving=saving,
                )
            )
        return out


class RateCI(BaseModel):
    """A rate of acceptable answers with its 95% Wilson interval."""

    acceptable: int
    answers: int
    rate: float | None  # None without answers
    low: float
    high: float


class QualityPoint(BaseModel):
    """One operating point of a cost-quality curve: every held-out query answered at a
    similarity threshold (``None``: serve mode, every query whose table has an entry hits)."""

    threshold: float | None  # normalised similarity (cos + 1) / 2; a hit needs >= it
    hits: int  # queries the cache answered (served or refused by validation)
    refused: int  # hits the modifier could not make valid: the LLM answered instead
    estimated: int  # revise hits beyond the revise budget: cost estimated, not in the rate
    cost_reduction: float | None  # 1 - cost / cost without a cache (measured tokens)
    acceptable: RateCI  # of the answers the agents got (the cache's and the LLM's)


class TextCalibration(BaseModel):
    """The text bound of one category, from pairs of true answers of the same query."""

    pairs: int  # true pairs of this category
    bound: float  # cosine
    source: Literal["category", "pooled", "default"]  # whose pairs set it


class PairwiseTally(BaseModel):
    """The pairwise judge's verdicts, served answer vs true answer, both orders asked."""

    cached: int = 0  # the served answer preferred in both orders
    ties: int = 0  # the two orders disagree: a tie
    true: int = 0  # the true answer preferred in both orders
    failures: int = 0


class QualityResult(BaseModel):
    """Acceptable answers per group and mode, and the cost-quality curves of a threshold
    sweep on the held-out run."""

    query_run: int
    table_run: int
    queries: dict[str, int]  # group -> held-out queries
    calibration: dict[str, TextCalibration]  # category -> text bound
    # mode -> group (and "all") -> points: serve mode first, then rising thresholds
    curves: dict[str, dict[str, list[QualityPoint]]]
    # group (and "all") -> a random same-table answer served for every query with a table
    random: dict[str, RateCI]
    revise_calls: int
    # group (and "all") -> one true answer of a query asked more than once, judged against
    # another: how often the LLM agrees with itself (the ceiling for a cache)
    reanswer: dict[str, RateCI] = Field(default_factory=dict)
    # mode -> group -> the pairwise judge's verdicts on served answers
    pairwise: dict[str, dict[str, PairwiseTally]] = Field(default_factory=dict)
    reliability: dict[str, JudgeReliability] = Field(default_factory=dict)

    def serve(self, mode: str, group: str = "all") -> QualityPoint | None:
        """The serve-mode point (the study's one operating point) of a curve."""
        points = self.curves.get(mode, {}).get(group, [])
        return points[0] if points and points[0].threshold is None else None


class PairedExcess(BaseModel):
    """Served answers against the model's own second answers to the same queries: on each of
    ``pairs`` served queries, was the served answer acceptable for its true answer, and was a
    second fresh answer? ``excess`` is the difference of the two unacceptable rates, with its
    two-sided 95% interval for paired data (Newcombe's)."""

    pairs: int = 0
    served_bad: int = 0  # served answers not acceptable
    reanswer_bad: int = 0  # second fresh answers not acceptable
    both_bad: int = 0
    excess: float | None = None
    low: float | None = None
    high: float | None = None


class BudgetGroup(BaseModel):
    """One group of the held-out run answered by one cache configuration."""

    queries: int  # held-out queries of the group sent through the cache
    untried: int = 0  # revise hits beyond the revise budget: left out of every figure below
    failed: int = 0  # queries the cache could not answer (counted, left out)
    hits: int = 0  # answers the cache served
    acceptable: RateCI | None = None  # of them, acceptable against the true answer
    reanswer: RateCI | None = None  # the model's second answers to a sample of the same queries
    paired: PairedExcess = Field(default_factory=PairedExcess)
    distinct_served: float | None = None  # distinct served answers per 100 served
    distinct_fresh: float | None = None  # distinct true answers per 100 of the same queries
    explored: int = 0  # would-be hits also sent to the LLM, to label the table
    audits: int = 0  # "audit": would-be hits audited (the LLM asked, its answer served)
    audit_usd: float = 0.0  # "audit": what the audits cost (inside spent_usd)
    twins: int = 0  # misses asked twice, for the model's own variability
    labels: int = 0  # labels the group's tables hold at the end
    tables: int = 0  # the group's tables at the end
    tables_closed: int = 0  # of them, tables that serve nothing (NO_HIT_THRESHOLD)
    tables_tightened: int = 0  # "audit": tables moved up from their start by their audits
    tables_serving: int = 0  # tables that served at least one hit
    held_back: int = 0  # tables whose own labels show them over budget at the end
    served_while_over: int = 0  # of those, tables that served a hit (the budget's promise: 0)
    threshold_median: float | None = None  # median threshold in force of the open tables
    self_disagreement: float | None = None  # the cache's own estimate (pairs), at the end
    baseline_usd: float = 0.0  # the same queries without a cache (recorded tokens)
    spent_usd: float = 0.0  # with the cache: misses, explorations, twins, revisions
    cost_reduction: float | None = None  # 1 - spent / baseline


class BudgetRun(BaseModel):
    """The held-out run through one cache configuration."""

    mode: str  # embedding mode
    config: Literal["budget", "audit", "static", "serve", "random"]
    budget: float | None = None  # δ for "budget" (the proving guard) and "audit"
    # the static threshold (raw cosine) for "static"; the audit guard's start for "audit"
    threshold: float | None = None
    pooled: bool = True  # "budget": whether tables pooled their template's evidence
    groups: dict[str, BudgetGroup]  # group (and "all") -> figures
    revise_calls: int = 0  # revisions this configuration sent to the LLM
    # "budget": per table that served, the labels of its own it held at its first hit
    first_hit_labels: dict[str, int] = Field(default_factory=dict)
    # "budget": the tables that never served, and the labels of their own they ended with
    never_served_labels: dict[str, int] = Field(default_factory=dict)


class BudgetResult(BaseModel):
    """The wrong-hit budget on the town: the held-out run answered online under a budget on
    the excess over the model's own variability, beside a static threshold, serve mode and a
    random same-table answer, every served answer judged against the true answer and paired
    with the model's own second answer to the same query."""

    query_run: int
    table_run: int
    runs: list[BudgetRun]
    reanswer_sample: int = 0  # second answers asked per group and configuration, at most
    reanswers_asked: int = 0  # second answers the model gave (shared by configurations)


class GuardStory(BaseModel):
    """What a guard did to one category's tables over a whole replayed stream, per seed: the
    calls it asked beside the served ones (audits, or the proving guard's explorations), and
    how many of those came before it first moved the threshold in force up from its start
    (``None``: never), and whether that move closed the table."""

    asked: list[int]
    moved_after: list[int | None]
    closed: list[bool]

    def median_moved_after(self) -> float | None:
        """The median over seeds of the asks before the first move (``None``: no seed moved;
        a seed that never moved counts as moving after every ask it made)."""
        if all(m is None for m in self.moved_after):
            return None
        pairs = zip(self.moved_after, self.asked, strict=True)
        return float(statistics.median(m if m is not None else a for m, a in pairs))


class ReplayRow(BaseModel):
    """One configuration of the replay study on its bed's held-out calls: overall and per
    category (llmcache's replay :class:`~llmcache.replay.Figures`: calls, served, cost cut,
    acceptable, the model's own agreement and the excess over it with its 95% interval).
    ``audit`` and ``prove`` are the two guards at the study's δ, each starting from the static
    default threshold; ``exact`` serves repeats of a prompt only (a bed that asks for it);
    ``lead`` is the static default with the first ``lead_words`` words of the embedded text
    exact (keyword mode only); ``guards`` says per category what the guard did (over
    ``seeds``)."""

    bed: str
    mode: str  # embedding mode; "-" for the random answer
    config: Literal["tuned", "static", "lead", "exact", "audit", "prove", "serve", "random"]
    overall: Figures
    categories: dict[str, Figures]
    settings: dict[str, str] = Field(default_factory=dict)  # per category, what was chosen
    guards: dict[str, GuardStory] = Field(default_factory=dict)
    # The guard's asks in the held-out run (audits, or explorations) as a share of its bill
    # without a cache (what the evidence cost once the tuning part had settled it).
    asked_share: float | None = None
    # The leading words a fixed row held exact (``CacheConfig.lead_words``; 0: none).
    lead_words: int = 0


class ReplayBed(BaseModel):
    """One recording the replay study ran on: where it came from, which model answered it,
    how served answers are graded, how it was split, and every configuration's figures."""

    name: str
    source: str
    model: str
    equivalence: str
    split: str
    tune_calls: int
    check_calls: int
    rows: list[ReplayRow]
    provenance: dict[str, object] = Field(default_factory=dict)
    # Calls whose query (its messages) was found in the town's runs, so that its options and
    # requirements were known when its answers were compared (None: not a town bed).
    requirements_found: int | None = None


class AnswerSample(BaseModel):
    """One answer of the held-out run, for a reader to judge."""

    agent: str
    keywords: list[str]
    answer: str


class ReplayStudyResult(BaseModel):
    """The replay study: settings tuned on a recording's first runs and reported on its last,
    beside the static default, serve mode and a random answer; the town's recording and the
    shared agent's recorded ratings. ``samples``: a seeded few of each category's answers of
    the held-out run; ``placeholder_echoes`` and ``degenerate`` count those of its answers
    (``answers`` per category) that echo their format or are degenerate."""

    delta: float
    seed: int
    beds: list[ReplayBed]
    samples: dict[str, list[AnswerSample]] = Field(default_factory=dict)
    answers: dict[str, int] = Field(default_factory=dict)
    placeholder_echoes: dict[str, int] = Field(default_factory=dict)
    degenerate: dict[str, int] = Field(default_factory=dict)
    seconds: float = 0.0
    # Texts embedded by this run, and the vectors at hand when it began: shipped with the
    # recording, or kept from an earlier run in the same directory (what ``seconds`` depends
    # on most). None: a result written before they were counted.
    embedded: int | None = None
    embeddings_at_hand: int | None = None


#: Each experiment's result model, by the experiment's name (its file is ``<name>.json``), in
#: the order the study runs them.
RESULT_MODELS: dict[str, type[BaseModel]] = {
    "collect": CollectResult,
    "similarity": SimilarityResult,
    "saturation": SaturationResult,
    "observed": ObservedResult,
    "correlation": CorrelationResult,
    "compare": CompareResult,
    "cost": CostResult,
    "quality": QualityResult,
    "budget": BudgetResult,
    "replay_study": ReplayStudyResult,
}

_M = TypeVar("_M", bound=BaseModel)


def save_result(result: BaseModel, path: str | Path) -> Path:
    """Write ``result`` as indented JSON (atomically: a crash never leaves half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(result.model_dump_json(indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def load_result(model: type[_M], path: str | Path) -> _M:
    return model.model_validate_json(Path(path).read_text(encoding="utf-8"))
