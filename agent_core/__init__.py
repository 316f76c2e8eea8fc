"""agent_core — the bundled generative-agent town whose LLM traffic llmcache is built for.

A compact, engine-free take on Park et al. (2023) as the study (Jeong 2024) ran it: eight agents
in a nine-structure town, 14 declared prompt categories, every prompt through an
OpenAI-compatible client wrapped in :class:`llmcache.CachedLLM`.

>>> from agent_core import Simulation, open_town_llm                      # doctest: +SKIP
>>> from agent_core.testing import ScriptedLLM                            # doctest: +SKIP
>>> from llmcache.testing import HashEmbedder                             # doctest: +SKIP
>>> llm = open_town_llm(ScriptedLLM(), model="scripted", record_to="runs/x.jsonl")  # doctest: +SKIP
>>> Simulation(llm, embedder=HashEmbedder(), seed=1).run(days=1).calls    # doctest: +SKIP
"""

from __future__ import annotations

from .agent import Agent, Event, Task, converse
from .call import TownCall
from .clock import Clock, hhmm, parse_hhmm
from .config import SimConfig
from .llm import LLMStats, TownLLM, cache_config, category_policy, open_town_llm
from .memory import EmbeddingMemo, Memory, MemoryStream
from .persona import AgentSeed, load_agents
from .plans import PlanItem, check_schedule
from .requirements import Requirements
from .revise import RevisionRequest, build_revision
from .sim import RunSummary, Simulation
from .templates import CATEGORIES, GROUPS, TEMPLATES, Slot, Template, template
from .tolerance import TextAgreement, Tolerance, Verdict, calibrated_bound
from .world import PersonalTree, World, load_world

__all__ = [
    "CATEGORIES",
    "GROUPS",
    "TEMPLATES",
    "Agent",
    "AgentSeed",
    "Clock",
    "EmbeddingMemo",
    "Event",
    "LLMStats",
    "Memory",
    "MemoryStream",
    "PersonalTree",
    "PlanItem",
    "Requirements",
    "RevisionRequest",
    "RunSummary",
    "SimConfig",
    "Simulation",
    "Slot",
    "Task",
    "Template",
    "TextAgreement",
    "Tolerance",
    "TownCall",
    "TownLLM",
    "Verdict",
    "World",
    "build_revision",
    "cache_config",
    "calibrated_bound",
    "category_policy",
    "check_schedule",
    "converse",
    "hhmm",
    "load_agents",
    "load_world",
    "open_town_llm",
    "parse_hhmm",
    "template",
]
