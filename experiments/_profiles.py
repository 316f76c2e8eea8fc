"""How big a reproduction is: the quick profile CI runs, the standard one (every category, all
eight agents), and the study-sized full profile. How long each takes, measured, is in
experiments/README.md ("Profiles")."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from agent_core.llm import DEFAULT_CONCURRENCY, DEFAULT_RATING_BATCH

__all__ = ["FULL", "PROFILES", "QUICK", "STANDARD", "Profile", "get_profile"]


ReplayMode = Literal["keyword", "full"]
_REPLAY_MODES: tuple[ReplayMode, ...] = ("keyword", "full")


class Profile(BaseModel):
    """Sizes of one reproduction. Everything the experiments sample is seeded."""

    name: str
    runs: int = Field(ge=3, description="simulation runs (seeds 1..runs); the study had 5")
    days: float = Field(gt=0, description="simulated days per run; the study had 15")
    agents: list[str] | None = Field(
        default=None, description="agents simulated (None: all eight, as in the study)"
    )
    max_attempts: int = Field(default=20, ge=1, description="attempts before escalation")
    escalate: bool = Field(default=True, description="use the superior model after that")
    concurrency: int = Field(
        default=1,
        ge=1,
        description="prompts of one run in flight where the town asks several together "
        "(1: strictly one after another, as the seeded faults of a scripted double need)",
    )
    parallel_runs: int = Field(
        default=1, ge=1, description="runs simulated at the same time against one server"
    )
    rating_batch: int = Field(
        default=1,
        ge=1,
        description="the most importance ratings of one moment the model answers in one prompt "
        "(each still cached and recorded as its own call; 1: one prompt each, as in the study)",
    )
    # Experiment sizes (per group; "all" when fewer prompts exist).
    similarity_queries: int = 100
    correlation_queries: int = 100
    compare_queries: int = 600
    saturation_queries: int | None = None  # None: all of run 1, as in the study
    thresholds: int = 10  # data thresholds of the saturation curve
    # LLM work in the judged experiments: revise modifications and LLM-judge rankings. The
    # reference judge ranks every query; the LLM judge ranks at most this many per experiment.
    llm_judge_queries: int = 1_000_000
    judge_shuffles: int = 2
    revise_budget: int = 1_000_000  # revise calls per experiment; beyond it: not revised
    # The wrong-hit budgets δ the budget step runs the held-out run under (beside the static
    # default threshold).
    budgets: list[float] = Field(default_factory=lambda: [0.05])
    # Second answers the model is asked, per group and configuration at most, to pair with the
    # served answers of the budget step: a group's paired excess rests on these pairs, so this
    # sample sets how narrow its interval can get (LLM calls, hence the cap).
    reanswer_sample: int = Field(default=100, ge=1)
    # Which tier judges: the simulation's own model ("default") or the superior one. The
    # reference judge always runs beside it.
    judge_tier: str = Field(default="superior", pattern="^(default|superior)$")
    # Which tier the pairwise judge (served vs true answer, both orders) asks. Two candidates
    # make a short prompt, so even the quick profile affords the strongest local model; the
    # 5-way rankings above stay on ``judge_tier``.
    pairwise_tier: str = Field(default="superior", pattern="^(default|superior)$")
    # Whether the model-in-the-loop ``budget`` step runs (the model answers served queries
    # again). The quick profile leaves it out: its quality evidence is the replay study
    # (``replay_study``, no LLM), which runs in every profile.
    live_budget: bool = True
    # The embedding modes the replay study tunes and reports (each mode embeds every text of
    # the recording once; a whole prompt costs several times a keyword's on 2 cores).
    replay_modes: list[ReplayMode] = Field(default_factory=lambda: list(_REPLAY_MODES))
    # Seeded replays the replay study reads the audit guard's catch over (each a replay of the
    # whole recording per mode).
    guard_seeds: int = Field(default=5, ge=1)
    seed: int = 0

    def runs_step(self, name: str) -> bool:
        """Whether a reproduction on this profile runs the step ``name``."""
        return self.live_budget or name != "budget"


QUICK = Profile(
    name="quick",
    runs=3,
    # 06:00-09:30: daily plans and their decompositions, the first reflections, the way to
    # school. Every category the three runs of 06:00-14:00 asked had been asked by 09:00 in
    # each run, and the morning is most of the cost (on 2 cores, 2026-11-27, 06:00-10:00 took
    # 72% of the eight hours' model time), so the later hours added minutes, not categories.
    # In the seeded runs of 06:00-10:00 every category had come by 09:10 (run 2's one agent
    # reaction, a dialogue call the study does not keep), and the last half hour was 65 of
    # the three runs' 614 s of model time (2026-11-28): cut, so that ``scripts/run.sh`` keeps
    # within 15 minutes on 2 cores. The calls before 09:30 are the same, prompt for prompt.
    days=3.5 / 24,
    agents=["Alice Wilson", "Mary Oliver"],
    max_attempts=2,
    escalate=False,
    similarity_queries=100,
    correlation_queries=8,
    compare_queries=12,
    saturation_queries=None,
    thresholds=10,
    # The judge rankings and revisions are most of the steps' model time after collect (on 2
    # cores, 2026-11-28: 8 of each per experiment took about 5 of the steps' 7 minutes). Four
    # still run every judged path end to end; the quick figures were never a verdict, with a
    # judge at chance (below), and the standard profile judges and revises 60.
    llm_judge_queries=4,
    revise_budget=4,
    # The 1.5B model is too slow to rank for every query on 2 cores; SmolLM2 ranks quickly
    # (near randomly: the reliability figures in the report say how near).
    judge_tier="default",
    # The pairwise judge too: on 2 cores the 1.5B model took 7 of the quick study's 38 minutes
    # for 18 pairs (2026-11-27), too few for a verdict either way. The quick profile shows the
    # protocol and its test against chance; the standard profile asks the superior model.
    pairwise_tier="default",
    concurrency=DEFAULT_CONCURRENCY,
    rating_batch=DEFAULT_RATING_BATCH,
    # The budget step asks the model to answer served queries again (5.5 min of the
    # committed quick run); the replay study measures the same served answers against the
    # recorded model's own second answers without it.
    live_budget=False,
    # Keyword mode only: the whole prompts of the recording would take minutes to embed.
    replay_modes=["keyword"],
    guard_seeds=1,
)

STANDARD = Profile(
    name="standard",
    runs=3,
    # Six in the morning to six in the evening of the next day: two days' plans, reflections,
    # conversations and plan revisions of all eight agents -- every one of the 14 categories.
    days=1.5,
    agents=None,
    max_attempts=3,
    escalate=True,
    similarity_queries=100,
    correlation_queries=30,
    compare_queries=60,
    saturation_queries=None,
    thresholds=10,
    llm_judge_queries=60,
    revise_budget=60,
    judge_tier="default",
    concurrency=DEFAULT_CONCURRENCY,
    rating_batch=DEFAULT_RATING_BATCH,
    # One run after another: a finished run is kept if the study is interrupted (a run cut
    # short is simulated again), and on 2 cores the server is compute-bound, so runs side by
    # side would add little to what the importance ratings asked together already give.
    parallel_runs=1,
)

FULL = Profile(
    name="full",
    runs=5,
    days=15.0,
    agents=None,
    max_attempts=20,
    escalate=True,
    concurrency=DEFAULT_CONCURRENCY,
)

PROFILES = {p.name: p for p in (QUICK, STANDARD, FULL)}


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(f"unknown profile {name!r}; known: {sorted(PROFILES)}") from None
