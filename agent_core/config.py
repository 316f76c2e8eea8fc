"""The town's cadence: how often agents act, what they notice and how readily they react.

The defaults were calibrated so that 8 agents produce a prompt volume and category mix close to
the study's (about 20,500 prompts per 15 simulated days) with the earlier scripted double; the
volume depends on the answers (agent_core/README.md, "Cadence"), and ``benchmarks/bench_sim.py``
measures it against the study's.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["SimConfig"]


class SimConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    minutes_per_step: int = Field(default=10, ge=1, le=60)
    plan_hour: int = Field(default=6, ge=0, le=12)  # when agents plan their day
    attention_bandwidth: int = Field(default=3, ge=1)  # new events perceived per step
    reobserve_hours: float = Field(default=24.0, ge=0)  # an unchanged actor is noticed again after
    sight_radius: float = Field(default=50.0, ge=0)  # structures seen along a walk (map units)
    p_actor_reaction: float = Field(default=0.15, ge=0, le=1)
    p_agent_reaction: float = Field(default=0.5, ge=0, le=1)
    react_cooldown_hours: float = Field(default=6.0, ge=0)  # per pair of agents
    summary_every_hours: float = Field(default=8.0, gt=0)
    decompose_hours: float = Field(default=3.0, gt=0)  # how far ahead a plan is decomposed
    reflection_threshold: float = Field(default=150.0, gt=0)
    reflection_recent: int = Field(default=100, ge=1)
    # ...and of those, the newest that fit this many characters: a hundred long memories can
    # make a questions prompt that, with its answer, overruns a server slot's context and is
    # cut off at every attempt (agent_core/README.md, "Cadence", has the case that showed it).
    reflection_recent_chars: int = Field(default=6000, ge=1)
    retrieve_k: int = Field(default=10, ge=1)
    max_utterances: int = Field(default=20, ge=2)
    share_places_in_dialogue: bool = True  # agents learn of a place the other knows
