"""``reproduce``: every experiment in order, results cached on disk, then figures and report."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from llmcache import EmbedMode
from llmcache.embedders import Embedder, default_embedder
from llmcache.llm import LLMConnection, open_llm

from ._adapter import Adapter
from ._answer_first_judge import AnswerFirstJudge
from ._budget_study import budget_study
from ._collect import collect, dataset_paths, recorded
from ._cost_study import cost_study
from ._data import MODES, EmbeddingStore, Prompt, load_run
from ._judge import Judge, LLMJudge, ReferenceJudge
from ._judge_endpoint import JudgeEndpoint
from ._judged import compare, correlation
from ._pairwise_judge import PairwiseJudge
from ._profiles import Profile
from ._quality import quality, text_agreements
from ._replay_study import DEV_BED, PARK, TOWN_RUNS, committed_recording, replay_study
from ._results import (
    RESULT_MODELS,
    BudgetResult,
    CollectResult,
    CompareResult,
    CorrelationResult,
    CostResult,
    ObservedResult,
    QualityResult,
    ReplayStudyResult,
    SaturationResult,
    SimilarityResult,
    load_result,
    save_result,
)
from ._retrieval import observed_actors, saturation, similarity_distribution
from ._score_judge import ScoreJudge
from ._seeding import SeededClient

__all__ = ["EXPERIMENTS", "JUDGE_PROTOCOLS", "Study", "reproduce"]

logger = logging.getLogger("experiments")

EXPERIMENTS = tuple(RESULT_MODELS)
# The ways the LLM judges can ask (``Study.judge_protocol``).
JUDGE_PROTOCOLS = ("rank", "pairwise", "score", "answer-first")


@dataclass
class Study:
    """One reproduction's state: profile, output directory, LLM connection, loaded runs."""

    profile: Profile
    out: Path
    progress: bool = True
    force: bool = False
    embedder: Embedder = field(default_factory=default_embedder)
    timings: dict[str, float] = field(default_factory=dict)
    # Runs recorded earlier (a directory of run<n>.jsonl[.gz] and summaries) to read instead of
    # simulating: every step reruns from them (docs/results/standard/data holds the standard
    # profile's).
    runs: Path | None = None
    # Where the LLM judges are asked, when not the study's own connection on the profile's
    # tier (``--judge-base-url`` / ``--judge-model``).
    judge: JudgeEndpoint | None = None
    # How the LLM judges ask: "rank" (all candidates at once, in a seeded order and its
    # reverse: the default), "pairwise" (two at a time, both orders, the model's odds for A/B
    # where the server gives logprobs; :class:`PairwiseJudge`), "score" (each answer scored
    # alone, the expected digit; :class:`ScoreJudge`) or "answer-first" (the judge's own
    # answer as the reference; :class:`AnswerFirstJudge`). experiments/README.md has the
    # measurements they were chosen by.
    judge_protocol: str = "rank"  # one of JUDGE_PROTOCOLS
    # The replay study's recording (run<n>.jsonl.gz of llmcache ReplayCall lines and a
    # provenance.json; None: the committed one, and while there is none the town runs' own
    # answers) and the town runs its prompts came from (for the queries' requirements).
    recording: Path | None = None
    town_runs: Path = TOWN_RUNS
    # The shared agent's day the replay study sets beside the town (None: left out).
    park: Path | None = PARK
    # The gpt-4o-mini development bed the replay study sets beside them (None: left out).
    dev_bed: Path | None = DEV_BED
    # An open connection to use instead of the configured backend (tests pass a stand-in).
    _conn: LLMConnection | None = None
    _runs: dict[int, list[Prompt]] = field(default_factory=dict)
    _store: EmbeddingStore | None = None
    _judge_client: Any = None

    # -- resources -------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._conn is not None

    @property
    def conn(self) -> LLMConnection:
        if self._conn is None:
            self._conn = open_llm()
        return self._conn

    def tier_model(self, tier: str) -> str:
        """The model a profile's tier names ("default" or "superior") on this backend."""
        b = self.conn.backend
        return b.superior_model if tier == "superior" else b.model

    @property
    def judge_model(self) -> str:
        if self.judge is not None:
            return self.judge.model
        return self.tier_model(self.profile.judge_tier)

    @property
    def pairwise_model(self) -> str:
        if self.judge is not None:
            return self.judge.model
        return self.tier_model(self.profile.pairwise_tier)

    @property
    def judge_description(self) -> str:
        """The judge as the study's files name it (model and server, never a key)."""
        if self.judge is not None:
            return self.judge.description
        return self.judge_model

    @property
    def judge_client(self) -> Any:
        """The client the LLM judges ask: the judge endpoint's own, else the study's."""
        if self.judge is None or self.judge.base_url is None:
            return self.conn.client
        if self._judge_client is None:
            self._judge_client = self.judge.client()
        return self._judge_client

    @property
    def store(self) -> EmbeddingStore:
        if self._store is None:
            self._store = EmbeddingStore(self.out / "embeddings", self.embedder)
        return self._store

    @property
    def table_runs(self) -> list[int]:
        """The runs the saturation tables are built from: 2, 3, 4 as in the study.

        The last run is held out for the comparison and the cost study; with only three runs
        (the quick profile) run 3 has to serve both.
        """
        last = self.profile.runs - 1 if self.profile.runs >= 5 else self.profile.runs
        return list(range(2, last + 1))

    @property
    def data(self) -> Path:
        """Where the runs are: recorded runs the study was given, or its own ``data``."""
        return self.runs if self.runs is not None else self.out / "data"

    def run(self, n: int) -> list[Prompt]:
        if n not in self._runs:
            dataset, _ = dataset_paths(self.data, n)
            if not dataset.exists():
                raise FileNotFoundError(
                    f"{dataset} is missing: run `python -m experiments collect`"
                )
            self._runs[n] = load_run(dataset, n)
        return self._runs[n]

    def close(self) -> None:
        if self._store is not None:
            self._store.save()
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._judge_client is not None:
            self._judge_client.close()
            self._judge_client = None

    # -- steps -----------------------------------------------------------------------------

    def path(self, name: str) -> Path:
        return self.out / f"{name}.json"

    def cached(self, name: str) -> bool:
        return not self.force and self.path(name).exists()

    @contextlib.contextmanager
    def _timed(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        logger.info("%s ...", name)
        yield
        self.timings[name] = round(time.perf_counter() - t0, 1)
        logger.info("%s: %.1f s", name, self.timings[name])

    def _bar(self, total: int, desc: str) -> Any:
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, disable=not self.progress, dynamic_ncols=True)

    def step(self, name: str) -> BaseModel:
        """Run one experiment (or load its cached result) and save its JSON."""
        if self.cached(name):
            return load_result(RESULT_MODELS[name], self.path(name))
        with self._timed(name):
            result: BaseModel = getattr(self, f"_{name}")()
        save_result(result, self.path(name))
        return result

    def _collect(self) -> CollectResult:
        if self.runs is not None:
            return recorded(self.profile, self.runs)
        b = self.conn.backend
        return collect(
            self.profile,
            self.out,
            client=self.conn.client,
            model=b.model,
            superior_model=b.escalation_model,
            llm_report=b.report(),
            embedder=self.embedder,
            progress=self.progress,
        )

    def _similarity(self) -> SimilarityResult:
        return similarity_distribution(
            self.run(1),
            self.run(2),
            self.store,
            per_group=self.profile.similarity_queries,
            seed=self.profile.seed,
        )

    def _saturation(self) -> SaturationResult:
        return saturation(
            self.run(1),
            [self.run(n) for n in self.table_runs],
            self.store,
            days=self.profile.days,
            thresholds=self.profile.thresholds,
            max_queries=self.profile.saturation_queries,
            seed=self.profile.seed,
        )

    def _observed(self) -> ObservedResult:
        sat = load_result(SaturationResult, self.path("saturation"))
        summaries = [dataset_paths(self.data, n)[1] for n in self.table_runs]
        return observed_actors(sat, summaries)

    def _seeded(self, client: Any, step: str) -> SeededClient:
        """``client``, every request of ``step`` sent with a sampling seed drawn from the
        profile's seed: the same commit's later steps give the same answers on a server that
        honours seeds. Per step, so a step's seeds do not depend on which others ran before."""
        return SeededClient(client, f"{self.profile.seed}:{step}")

    def _llm_judge(self, model: str, step: str, *, shuffles: int, name: str | None = None) -> Judge:
        client = self._seeded(self.judge_client, f"{step}:judge")
        if self.judge_protocol == "pairwise":
            return PairwiseJudge(client, model=model, seed=self.profile.seed, name=name)
        if self.judge_protocol == "score":
            return ScoreJudge(client, model=model, name=name)
        if self.judge_protocol == "answer-first":
            return AnswerFirstJudge(client, self.embedder, model=model, name=name)
        if self.judge_protocol != "rank":
            raise ValueError(f"unknown judge protocol {self.judge_protocol!r}: {JUDGE_PROTOCOLS}")
        return LLMJudge(client, model=model, shuffles=shuffles, seed=self.profile.seed, name=name)

    def _judges(self, step: str) -> list[Judge]:
        return [
            ReferenceJudge(self.embedder),
            self._llm_judge(self.judge_model, step, shuffles=self.profile.judge_shuffles),
        ]

    def _adapter(self, step: str) -> Adapter:
        return Adapter(
            client=self._seeded(self.conn.client, step),
            model=self.conn.backend.model,
            embedder=self.embedder,
            revise_budget=self.profile.revise_budget,
        )

    def _judge_progress(self, desc: str) -> tuple[Any, Callable[[str, int], None]]:
        bar = self._bar(0, desc)

        def tick(judge: str, n: int) -> None:
            bar.set_postfix(judge=judge)
            bar.update(n)

        return bar, tick

    def _correlation(self) -> CorrelationResult:
        bar, tick = self._judge_progress("correlation: judging")
        try:
            adapter = self._adapter("correlation")
            return correlation(
                self.run(1),
                self.run(2),
                self.store,
                adapter,
                self._judges("correlation"),
                per_group=self.profile.correlation_queries,
                llm_judge_queries=self.profile.llm_judge_queries,
                seed=self.profile.seed,
                progress=tick,
            )
        finally:
            bar.close()

    def _compare(self) -> CompareResult:
        bar, tick = self._judge_progress("compare: judging")
        try:
            adapter = self._adapter("compare")
            return compare(
                self.run(self.profile.runs),
                self.run(1),
                self.store,
                adapter,
                self._judges("compare"),
                per_group=self.profile.compare_queries,
                llm_judge_queries=self.profile.llm_judge_queries,
                seed=self.profile.seed,
                progress=tick,
            )
        finally:
            bar.close()

    def _cost(self) -> CostResult:
        held_out = self.run(self.profile.runs)
        bar = self._bar(2 * len(held_out), "cost: replaying the held-out run")
        try:
            return cost_study(
                self.run(1),
                held_out,
                self.store,
                client=self._seeded(self.conn.client, "cost"),
                model=self.conn.backend.model,
                max_attempts=self.profile.max_attempts,
                sim_days=self.profile.days,
                seed=self.profile.seed,
                progress=bar.update,
            )
        finally:
            bar.close()

    def _quality(self) -> QualityResult:
        held_out = self.run(self.profile.runs)
        pairwise = self.pairwise_model
        bar = self._bar(len(held_out), "quality: serving the held-out run")
        try:
            adapter = self._adapter("quality")
            return quality(
                self.run(1),
                held_out,
                [self.run(n) for n in range(1, self.profile.runs + 1)],
                self.store,
                adapter,
                # Cached vs true, each pair in both orders: disagreement is a tie.
                self._llm_judge(pairwise, "quality", shuffles=2, name=f"pairwise ({pairwise})"),
                llm_judge_queries=self.profile.llm_judge_queries,
                seed=self.profile.seed,
                progress=bar.update,
            )
        finally:
            bar.close()

    def _budget(self) -> BudgetResult:
        held_out = self.run(self.profile.runs)
        # Per mode: each δ pooled and per table, the static threshold, serve mode, random.
        configs = len(MODES) * (2 * len(self.profile.budgets) + 3)
        bar = self._bar(configs * len(held_out), "budget: the held-out run under a budget")
        try:
            runs = [self.run(n) for n in range(1, self.profile.runs + 1)]
            _, texts = text_agreements(runs, self.store)
            return budget_study(
                self.run(1),
                held_out,
                texts=texts,
                embedder=self.store.embedder,
                # Its second answers carry seeds of their own; its revisions get the step's.
                client=self._seeded(self.conn.client, "budget"),
                model=self.conn.backend.model,
                budgets=self.profile.budgets,
                revise_budget=self.profile.revise_budget,
                max_attempts=self.profile.max_attempts,
                reanswer_sample=self.profile.reanswer_sample,
                seed=self.profile.seed,
                progress=bar.update,
            )
        finally:
            bar.close()

    def _replay_study(self) -> ReplayStudyResult:
        # No LLM: the recording answers. Its embeddings are kept beside the study's own.
        recording = self.recording or committed_recording()
        return replay_study(
            recording=recording,
            town_runs=self.town_runs,
            park=self.park,
            dev_bed=self.dev_bed,
            embedder=self.embedder,
            embeddings=self.out / "embeddings",
            # A recording is replayed whole (it was recorded to be replayed in minutes); the
            # town's own runs, the stand-in without one, only for the profile's agents (the
            # quick profile's two: a study of minutes).
            agents=None if recording is not None else self.profile.agents,
            modes=[EmbedMode(m) for m in self.profile.replay_modes],
            seed=self.profile.seed,
            guard_seeds=self.profile.guard_seeds,
            progress=logger.info,
        )


def reproduce(study: Study, steps: tuple[str, ...] = EXPERIMENTS) -> dict[str, BaseModel]:
    """Run ``steps`` in order (those the profile runs: :meth:`Profile.runs_step`); new
    simulation data invalidates every cached result after it."""
    results: dict[str, BaseModel] = {}
    state_path = study.out / "state.json"
    before = _fingerprint(study)
    for name in (s for s in steps if study.profile.runs_step(s)):
        results[name] = study.step(name)
        if name == "collect" and _fingerprint(study) != _stored(state_path):
            study.force = True  # new data: nothing computed from the old data is reused
    state_path.parent.mkdir(parents=True, exist_ok=True)
    state_path.write_text(json.dumps({"data": _fingerprint(study), "before": before}) + "\n")
    return results


def _fingerprint(study: Study) -> list[list[Any]]:
    out = []
    for n in range(1, study.profile.runs + 1):
        p = dataset_paths(study.data, n)[0]
        out.append([p.name, p.stat().st_size if p.exists() else None])
    return out


def _stored(path: Path) -> Any:
    try:
        return json.loads(path.read_text())["data"]
    except (OSError, ValueError, KeyError):
        return None
