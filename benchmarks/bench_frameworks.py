"""A framework we did not write, cached with no change to its code: LangChain's GenerativeAgent.

    python benchmarks/bench_frameworks.py \\
        --calls benchmarks/data/frameworks/generative_agent_smollm2.jsonl
    python benchmarks/bench_frameworks.py \\
        --calls benchmarks/data/frameworks/generative_agent_qwen15.jsonl
    python benchmarks/bench_frameworks.py \\
        --calls benchmarks/data/frameworks/generative_agent_smollm2.jsonl \\
        --then benchmarks/data/frameworks/generative_agent_qwen15.jsonl
    python benchmarks/bench_frameworks.py --live --record calls.jsonl   # the local model
    python benchmarks/bench_frameworks.py --live --model qwen2.5-coder-1.5b --record q.jsonl
    python benchmarks/bench_frameworks.py --live --reactions 6 --turns 2 --max-tokens 24

The first line, the default (seconds), replays the calls of a recorded live run through each
path; ``--live`` runs the scenario afresh on the local model first.

The scenario is the two-agent one of LangChain's own generative-agents docs
(``langchain_experimental.generative_agents``): Tommie's observations scored for importance,
his interview, his day of reactions, Eve's observations and interview, their dialogue, and
their summaries. Its memory store is langchain_core's ``InMemoryVectorStore`` over llmcache's
default embedder (the docs' FAISS and OpenAI embeddings need a download or a key).

1. **Live.** The scenario runs once on the local model (``llmcache.llm.LocalServer``,
   temperature 0), ChatOpenAI pointed at its OpenAI-compatible endpoint. A callback handler
   on the model records each call's code site (the framework's prompt template, read from
   the ``LLMChain`` that made the call, named by the framework's function that built it), its
   agent (the ``GenerativeAgent`` or memory it was made for), the prompt and the answer.
2. **The same traffic through each path.** The recorded calls are sent, in order, through
   llmcache's LangChain cache (``LLMCache``, what ``set_llm_cache`` installs) filed four ways:
   templates **learned** from the traffic (``TemplateLearner``, the zero-change path) **by
   code site** (in-process, ``set_llm_cache`` or ``CachedLLM``: each call replayed inside
   ``code_site(<its framework function>)``, the site the live path reads from the stack)
   and **by text alone** (the proxy, whose requests carry no stack), templates **declared**
   (the framework's own prompt templates, as ``PromptTemplate``s: what a user who copied them
   out would get), and the **full** prompt embedded in one table (what GPTCache-style caches
   do). A miss is answered with the recorded answer; a hit is compared with it: a served
   answer that is not the model's own (for the importance scores, a different integer) is
   wrong. At temperature 0 the model is meant to be deterministic; llama.cpp is not quite
   (across its prompt cache), so a hit on an exact repeat of a stored prompt whose recorded
   answers differ is counted apart ("exact"): the model's own variability, not the cache's.

Printed per path: the share of calls looked up under a table (not passed through); the share
filed under a table (looked up there, or their answers filed there late: paid while their
template was learned, or before it changed, ``llmcache/_late.py``); the site share, the
smallest over the code sites of at least 20 calls of the share of a site's calls filed under
its most common table (one learned template: the issue's measure); purity (tables that mix
two code sites); agent crossings (hits served from an entry another agent's call stored, the
entry's owner read from the prompt it holds when it was filed late); the cost cut (tokens
avoided over tokens asked) and the wrong hits; then per code site the share of its calls
looked up and filed under its most common table. Figures depend on the model and on the
machine's speed only through the answers; the run's time is printed too.

Recorded with the defaults (28 reactions, 3 interviews per agent, 2 rounds of dialogue, 32
tokens an answer), each call's code site, the framework's own prompt template, agent, prompt,
answer and tokens saved in ``benchmarks/data/frameworks/``: on 2026-11-28 on SmolLM2-135M
Q4_0, the default local model (2 cores, AMD EPYC, shared: load average 7-10; 199 calls, the
live run 3326 s, ``generative_agent_smollm2.jsonl``), and on 2026-11-29 on Qwen2.5-Coder-1.5B
(same machine, load about 2; 218 calls, 714 s, ``generative_agent_qwen15.jsonl``), whose
answers read as a model's (an entity is "Tommie", not three lines of echoed prompt).
Replayed by the first two commands on 2026-11-29 (same machine, seconds each):

- SmolLM2: learned by code site 57% looked up, 90% filed, site share 97% (importance, entity,
  action and relationship 100%, reaction 97%), pure (13/13), 0 crossings, 13 hits, cut 2.3%,
  0/13 wrong. By text alone 34% / 51% (entity and action 0%). Declared: 100% filed, site
  share 97% (its tables are per agent), pure, 0 crossings, 17 hits, cut 5.7%, 0/17 wrong.
  Full prompt: one table mixing every site, 5 crossings, 73 hits, cut 40.3%, 27/73 wrong.
- Qwen: learned by code site 59% / 90%, site share 97%, pure (13/13), 2 crossings, 6 hits,
  cut 0.9%, 0/6 wrong. By text alone 35% / 51% (entity and action 0%: the two questions
  about one observation read as one template being learned). Declared: 100% filed, 2
  crossings, 11 hits, cut 4.7%, 5/11 wrong, all 5 exact repeats of an agent's summary that
  the model answered anew. Full prompt: 12 crossings, 94 hits, cut 51.2%, 51/94 wrong. The 2
  crossings of the learned and declared paths are the importance prompt's, which names no
  agent: two agents' memories of one exchange, rated alike (8).

``--then`` (the third command): the templates learned from one run file the next, as a rerun
with ``TemplateLearner(path=...)`` does: learned on SmolLM2, Qwen's run filed 94% by code site
(importance, entity, action and relationship 100%, reaction 97%), 56% by text alone; learned
on Qwen, SmolLM2's run 95%; no template filing two code sites' calls.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import re
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from bench_models import markdown_table  # beside this file

# The framework: an optional dependency group of this repository (pyproject's `frameworks`).
from langchain_classic.retrievers import TimeWeightedVectorStoreRetriever
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.load import dumps
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_experimental.generative_agents import GenerativeAgent, GenerativeAgentMemory

from llmcache import CacheConfig, CacheOptions, EmbedMode, PromptTemplate, SemanticCache
from llmcache.embedders import Embedder, default_embedder
from llmcache.langchain import LLMCache, PromptFiler
from llmcache.llm import DEFAULT_MODEL
from llmcache.templates import TemplateLearner, TemplateSet, code_site, text_alone

# -- the scenario of LangChain's generative-agents docs -----------------------------------------

USER_NAME = "Person A"
TOMMIE_OBSERVATIONS = [
    "Tommie remembers his dog, Bruno, from when he was a kid",
    "Tommie feels tired from driving so far",
    "Tommie sees the new home",
    "The new neighbors have a cat",
    "The road is noisy at night",
    "Tommie is hungry",
    "Tommie tries to get some rest.",
]
TOMMIE_DAY = [
    "Tommie wakes up to the sound of a noisy construction site outside his window.",
    "Tommie gets out of bed and heads to the kitchen to make himself some coffee.",
    "Tommie realizes he forgot to buy coffee filters and starts rummaging through his moving "
    "boxes to find some.",
    "Tommie finally finds the filters and makes himself a cup of coffee.",
    "The coffee tastes bitter, and Tommie regrets not buying a better brand.",
    "Tommie checks his email and sees that he has no job offers yet.",
    "Tommie spends some time updating his resume and cover letter.",
    "Tommie heads out to explore the city and look for job openings.",
    "Tommie sees a sign for a job fair and decides to attend.",
    "The line to get in is long, and Tommie has to wait for an hour.",
    "Tommie meets several potential employers at the job fair but doesn't receive any offers.",
    "Tommie leaves the job fair feeling disappointed.",
    "Tommie stops by a local diner to grab some lunch.",
    "The service is slow, and Tommie has to wait for 30 minutes to get his food.",
    "Tommie overhears a conversation at the next table about a job opening.",
    "Tommie asks the diners about the job opening and gets some information about the company.",
    "Tommie decides to apply for the job and sends his resume and cover letter.",
    "Tommie continues his search for job openings and drops off his resume at several local "
    "businesses.",
    "Tommie takes a break from his job search to go for a walk in a nearby park.",
    "A dog approaches and licks Tommie's feet, and he pets it for a few minutes.",
    "Tommie sees a group of people playing frisbee and decides to join in.",
    "Tommie has fun playing frisbee but gets hit in the face with the frisbee and hurts his nose.",
    "Tommie goes back to his apartment to rest for a bit.",
    "A raccoon tore open the trash bag outside his apartment, and the garbage is all over the "
    "floor.",
    "Tommie starts to feel frustrated with his job search.",
    "Tommie calls his best friend to vent about his struggles.",
    "Tommie's friend offers some words of encouragement and tells him to keep trying.",
    "Tommie feels slightly better after talking to his friend.",
]
EVE_OBSERVATIONS = [
    "Eve wakes up and hear's the alarm",
    "Eve eats a boal of porridge",
    "Eve helps a coworker on a task",
    "Eve plays tennis with her friend Xu before going to work",
    "Eve overhears her colleague say something about Tommie being hard to work with",
]
FIRST_WORDS = (
    "Tommie said: Hi, Eve. Thanks for agreeing to meet with me today. I have a bunch of "
    "questions and am not sure where to start. Maybe you could first share about your experience?"
)
START = datetime(2023, 4, 1, 7, 0)
RECORDED = Path(__file__).parent / "data" / "frameworks" / "generative_agent_smollm2.jsonl"


class EmbedderEmbeddings(Embeddings):
    """LangChain's ``Embeddings`` over an llmcache :class:`~llmcache.embedders.Embedder`: the
    agents' memory store needs no model download and no key."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        vectors = np.asarray(self.embedder.embed(texts), dtype=np.float32)
        return [[float(x) for x in row] for row in vectors]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


class MemoryStore(InMemoryVectorStore):
    """langchain_core's in-memory vector store, its relevance the cosine it scores by mapped
    to [0, 1] as the retriever wants (the docs' FAISS store maps its L2 distance to one; this
    store has no mapping of its own)."""

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        return lambda cosine: (cosine + 1.0) / 2.0


def approximate_token_ids(text: str) -> list[int]:
    """The framework counts tokens to fit recent memories into a prompt; ChatOpenAI's own
    counter downloads its encoding at run time, so words stand in (about 3/4 of a token)."""
    return list(range(len(text.split())))


def _memory(llm: BaseChatModel, embeddings: Embeddings, threshold: float) -> GenerativeAgentMemory:
    retriever = TimeWeightedVectorStoreRetriever(
        vectorstore=MemoryStore(embeddings), other_score_keys=["importance"], k=15
    )
    return GenerativeAgentMemory(
        llm=llm, memory_retriever=retriever, reflection_threshold=threshold
    )


def _interview(agent: GenerativeAgent, message: str, now: datetime) -> str:
    return agent.generate_dialogue_response(f"{USER_NAME} says {message}", now=now)[1]


@dataclass
class ScenarioResult:
    reactions: list[str] = field(default_factory=list)
    interviews: list[str] = field(default_factory=list)
    dialogue: list[str] = field(default_factory=list)
    summaries: dict[str, str] = field(default_factory=dict)


def run_scenario(
    llm: BaseChatModel,
    embeddings: Embeddings,
    *,
    reactions: int = len(TOMMIE_DAY),
    turns: int = 3,
    interviews: int = 3,
) -> ScenarioResult:
    """The docs' two-agent scenario, cut to ``reactions`` of Tommie's day, ``interviews``
    questions per agent and ``turns`` rounds of dialogue (the docs let it run until one says
    goodbye; a small model may never). A simulated clock (10 minutes a step) keeps the
    prompts' times the same from run to run."""
    out = ScenarioResult()
    clock = iter(START + timedelta(minutes=10 * i) for i in range(10_000))
    tommie = GenerativeAgent(
        name="Tommie",
        age=25,
        traits="anxious, likes design, talkative",
        status="looking for a job",
        llm=llm,
        memory=_memory(llm, embeddings, threshold=8),
    )
    name_memories(tommie)
    for observation in TOMMIE_OBSERVATIONS:
        tommie.memory.add_memory(observation, now=next(clock))
    out.summaries["Tommie (first)"] = tommie.get_summary(now=next(clock))
    for question in [
        "What do you like to do?",
        "What are you looking forward to doing today?",
        "What are you most worried about today?",
    ][:interviews]:
        out.interviews.append(_interview(tommie, question, next(clock)))
    for i, observation in enumerate(TOMMIE_DAY[:reactions]):
        out.reactions.append(tommie.generate_reaction(observation, now=next(clock))[1])
        if (i + 1) % 20 == 0:
            tommie.get_summary(force_refresh=True, now=next(clock))
    eve = GenerativeAgent(
        name="Eve",
        age=34,
        traits="curious, helpful",
        status="N/A",
        llm=llm,
        daily_summaries=[
            "Eve started her new job as a career counselor last week and received her first "
            "assignment, a client named Tommie."
        ],
        memory=_memory(llm, embeddings, threshold=5),
    )
    name_memories(eve)
    for observation in EVE_OBSERVATIONS:
        eve.memory.add_memory(observation, now=next(clock))
    for question in [
        "How are you feeling about today?",
        "What do you know about Tommie?",
        "Tommie is looking to find a job. What are are some things you'd like to ask him?",
    ][:interviews]:
        out.interviews.append(_interview(eve, question, next(clock)))
    _, observation = eve.generate_reaction(FIRST_WORDS, now=next(clock))
    out.dialogue.append(observation)
    for _ in range(turns):
        ended = False
        for agent in (tommie, eve):
            stay, observation = agent.generate_dialogue_response(observation, now=next(clock))
            out.dialogue.append(observation)
            ended = ended or not stay
        if ended:
            break
    for agent in (tommie, eve):
        out.summaries[agent.name] = agent.get_summary(force_refresh=True, now=next(clock))
    return out


# -- what made each call ---------------------------------------------------------------------


@dataclass
class Call:
    """One model call: its code site (the framework's function and prompt template), agent,
    prompt (as LangChain gives it to its cache), ``llm_string``, answer and tokens."""

    site: str
    template: str
    agent: str
    prompt: str = ""
    llm_string: str = ""
    answer: str | None = None
    usage: dict[str, int] = field(default_factory=dict)


class CallSites(BaseCallbackHandler):
    """Records, for every call the model starts, the code site that made it: the prompt
    template of the ``LLMChain`` on the stack (the framework builds one per call site), named
    by the framework's innermost function on the stack, and the agent it was made for."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._names: dict[str, str] = {}

    def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[BaseMessage]], **kwargs: Any
    ) -> None:
        template, function, agent = "", "", ""
        for frame_info in inspect.stack(context=0):
            owner = frame_info.frame.f_locals.get("self")
            if not template and type(owner).__name__ == "LLMChain":
                template = str(getattr(owner.prompt, "template", ""))
            if not function and "generative_agents" in frame_info.filename:
                function = frame_info.function
            if not agent and isinstance(owner, GenerativeAgent):
                agent = owner.name
            if not agent and isinstance(owner, GenerativeAgentMemory):
                agent = _memory_owner(owner)
        digest = hashlib.sha256(template.encode()).hexdigest()[:8]
        site = self._names.setdefault(digest, f"{function or '?'}#{digest[:4]}")
        self.calls.append(
            Call(site=site, template=template, agent=agent, prompt=dumps(messages[0]))
        )

    def on_llm_end(self, response: Any, **kwargs: Any) -> None:
        if not self.calls:
            return
        generation = response.generations[0][0]
        call = self.calls[-1]
        call.answer = generation.text
        meta = getattr(getattr(generation, "message", None), "usage_metadata", None) or {}
        call.usage = {k: int(meta.get(k, 0)) for k in ("input_tokens", "output_tokens")}


_OWNERS: dict[int, str] = {}


def _memory_owner(memory: GenerativeAgentMemory) -> str:
    return _OWNERS.get(id(memory), "")


def name_memories(*agents: GenerativeAgent) -> None:
    for agent in agents:
        _OWNERS[id(agent.memory)] = agent.name


# -- the same traffic through each path ------------------------------------------------------


class FullPrompt:
    """Files every prompt in one table, embedding the whole prompt: what caches that know no
    template do (GPTCache, LiteLLM's and RedisVL's semantic caches)."""

    def options(
        self, prompt: str, system: str | None = None, default_agent: str = ""
    ) -> CacheOptions | None:
        return CacheOptions(category="all-prompts", embed=EmbedMode.FULL)


def declared_templates(calls: Sequence[Call]) -> TemplateSet:
    """The framework's own prompt templates as llmcache ``PromptTemplate``s (LangChain's
    f-string templates are llmcache's ``{named}`` ones); the agent's slot where one names it."""
    templates = {}
    for call in calls:
        if not call.template or call.site in templates:
            continue
        slots = set(re.findall(r"\{(\w+)\}", call.template))
        agent = next((s for s in ("agent_name", "name") if s in slots), None)
        templates[call.site] = PromptTemplate(
            name=call.site.replace("#", "-"), text=call.template, agent_slot=agent
        )
    return TemplateSet(list(templates.values()))


_RATING = re.compile(r"^\D*(\d+)")


def same_answer(site: str, served: str, fresh: str) -> bool:
    """Whether a served answer is the model's own: the framework's importance scores by the
    integer it parses (``^\\D*(\\d+)``), every other answer by its text."""
    if "importance" in site:
        a, b = _RATING.search(served.strip()), _RATING.search(fresh.strip())
        return (a and a.group(1)) == (b and b.group(1))
    return served.strip() == fresh.strip()


@dataclass
class PathFigures:
    path: str
    calls: int
    #: Calls looked up under a table (not passed through).
    filed: int
    #: Calls filed under a table: looked up there, or their answers filed there late.
    answers_filed: int
    #: Per code site of enough calls, its calls filed under its most common table.
    site_share: dict[str, float]
    #: Per code site, its calls looked up under any table.
    site_filed: dict[str, float]
    impure_tables: int
    tables: int
    crossings: int = 0
    hits: int = 0
    wrong: int = 0
    cut: float = 0.0
    seconds: float = 0.0
    #: Of the wrong hits, those that repeated a stored prompt exactly: the model answered the
    #: same prompt anew (its own variability), not the cache a different prompt.
    wrong_repeats: int = 0
    #: Answers filed late: paid for while their template was learned, or before it changed.
    filed_late: int = 0

    def row(self) -> list[str]:
        shares = list(self.site_share.values())
        worst = min(shares) if shares else float("nan")
        return [
            self.path,
            str(self.calls),
            f"{self.filed / self.calls:.0%}" if self.calls else "-",
            f"{self.answers_filed / self.calls:.0%}" if self.calls else "-",
            f"{worst:.0%}" if shares else "-",
            f"{self.tables - self.impure_tables}/{self.tables}",
            str(self.crossings),
            str(self.hits),
            f"{self.cut:.1%}",
            (f"{self.wrong}/{self.hits}" if self.hits else "0/0")
            + (f" ({self.wrong_repeats} exact)" if self.wrong_repeats else ""),
            f"{self.seconds:.1f}",
        ]


def replay_path(
    path: str,
    calls: Sequence[Call],
    make_cache: Callable[[], LLMCache],
    *,
    min_site_calls: int = 20,
    sites: bool = False,
) -> PathFigures:
    """Send the recorded calls, in order, through one LangChain cache: a miss is answered with
    the recorded answer, a hit is compared with it. ``sites``: each call made inside
    ``code_site(<its framework function>)``, the site the live path reads from the stack
    (one call line per function; ``tests/test_langchain_agent.py`` checks the live path learns
    at the framework's functions); without it every call reads as the replay loop's one site,
    as through the proxy, whose requests carry no stack.

    A call is filed under a table when it was looked up in it, or when its answer is in it:
    an answer paid for while its template was learned, or before it changed, is filed late
    (``llmcache/_late.py``), with no lookup of its own."""
    started = time.perf_counter()
    cache = make_cache()
    answered = [c for c in calls if c.answer is not None]
    tables: list[set[str]] = [set() for _ in answered]  # per call, the tables it is filed in
    looked_up: list[str | None] = [None] * len(answered)  # per call, the category looked up
    stored: dict[tuple[str, int], int] = {}  # entry -> the call whose miss stored it
    asked: dict[str, list[int]] = defaultdict(list)  # messages -> the calls the model answered
    crossings = hits = wrong = wrong_repeats = 0
    spent = avoided = 0
    for i, call in enumerate(answered):
        assert call.answer is not None
        tokens = call.usage.get("input_tokens", 0) + call.usage.get("output_tokens", 0)
        spent += tokens
        with code_site(call.site.split("#")[0]) if sites else text_alone():
            served = cache.lookup(call.prompt, call.llm_string)
        info = cache.last_info
        if info is not None:
            tables[i].add(str(info.partition_key))
            looked_up[i] = str(info.category)
        if served is not None:
            assert info is not None and info.entry_id is not None
            hits += 1
            avoided += tokens
            origin = _origin(cache, str(info.partition_key), info.entry_id, stored, asked)
            if origin is not None and answered[origin].agent != call.agent:
                crossings += 1
            if not same_answer(call.site, served[0].text, call.answer):
                wrong += 1
                wrong_repeats += origin is not None and answered[origin].prompt == call.prompt
            continue
        asked[_said(call.prompt)].append(i)
        message = AIMessage(
            content=call.answer,
            usage_metadata={
                "input_tokens": call.usage.get("input_tokens", 0),
                "output_tokens": call.usage.get("output_tokens", 0),
                "total_tokens": tokens,
            },
        )
        cache.update(call.prompt, call.llm_string, [ChatGeneration(message=message)])
        after = cache.last_info
        if info is not None and after is not None and after.entry_id is not None:
            stored[(str(after.partition_key), after.entry_id)] = i
    late = 0
    for key, entry in _entries(cache):
        owners = asked.get(_asked(entry.messages), [])
        late += bool(owners) and (key, entry.id) not in stored
        for i in owners:
            tables[i].add(key)
    cache.close()
    return replace(
        _figures(path, answered, tables, looked_up, min_site_calls),
        filed_late=late,
        crossings=crossings,
        hits=hits,
        wrong=wrong,
        wrong_repeats=wrong_repeats,
        cut=avoided / spent if spent else 0.0,
        seconds=time.perf_counter() - started,
    )


def _figures(
    path: str,
    answered: Sequence[Call],
    tables: Sequence[set[str]],
    looked_up: Sequence[str | None],
    min_site_calls: int,
) -> PathFigures:
    """The filing figures of one path: per call, the tables it is filed in and the category
    it was looked up under."""
    per_site = Counter(c.site for c in answered)
    sites = [site for site, n in per_site.items() if n >= min_site_calls]
    table_sites: dict[str, set[str]] = defaultdict(set)
    in_table: dict[str, Counter[str]] = defaultdict(Counter)  # site -> table -> its calls
    by_category: dict[str, Counter[str]] = defaultdict(Counter)  # site -> category looked up
    for call, held, category in zip(answered, tables, looked_up, strict=True):
        for table in held:
            table_sites[table].add(call.site)
            in_table[call.site][table] += 1
        if category is not None:
            by_category[call.site][category] += 1
    # A site's calls filed under its most common table (looked up there, or their answers in
    # it): the measure, one learned template per code site.
    share = {
        site: (in_table[site].most_common(1)[0][1] / per_site[site] if in_table[site] else 0.0)
        for site in sites
    }
    # Looked up under a template: a learned template per agent, or one widened as it was
    # used, each files a share of a site's calls.
    site_filed = {site: by_category[site].total() / per_site[site] for site in sites}
    return PathFigures(
        path=path,
        calls=len(answered),
        filed=sum(c is not None for c in looked_up),
        answers_filed=sum(bool(t) for t in tables),
        site_share=share,
        site_filed=site_filed,
        impure_tables=sum(1 for s in table_sites.values() if len(s) > 1),
        tables=len(table_sites),
    )


def _asked(messages: Sequence[Mapping[str, Any]]) -> str:
    """The texts of a stored entry's messages, as a key."""
    return json.dumps([m.get("content") for m in messages], ensure_ascii=False)


def _said(prompt: str) -> str:
    """The texts of a recorded call's messages (LangChain's JSON of them), as ``_asked``'s."""
    return json.dumps([m["kwargs"]["content"] for m in json.loads(prompt)], ensure_ascii=False)


def _origin(
    cache: LLMCache,
    table: str,
    entry: int,
    stored: Mapping[tuple[str, int], int],
    asked: Mapping[str, list[int]],
) -> int | None:
    """The call whose answer a hit's entry holds: the miss that stored it, else (an answer
    filed late) the first call the model answered with the entry's messages."""
    if (table, entry) in stored:
        return stored[(table, entry)]
    held = cache.cache.backend.get(table, entry)
    owners = asked.get(_asked(held.messages), []) if held is not None else []
    return owners[0] if owners else None


def _entries(cache: LLMCache) -> list[tuple[str, Any]]:
    """Every entry of the cache's tables, with its table's key."""
    return [
        (partition.key, entry)
        for partition in cache.cache.partitions()
        for entry in cache.cache.backend.iterate(partition.key)
    ]


#: The learned path in-process (``set_llm_cache``, ``CachedLLM``): each code site learned apart.
BY_SITE = "learned, by code site (in-process)"
#: The learned path through the proxy: no stack, templates told apart by their text alone.
BY_TEXT = "learned, by text alone (the proxy)"


def paths(
    calls: Sequence[Call], root: Path, embedder: Embedder, threshold: float
) -> dict[str, Callable[[], LLMCache]]:
    """The ways one LangChain cache can file the traffic, each on its own fresh tables."""
    config = CacheConfig(threshold=threshold)

    def tables(name: str) -> SemanticCache:
        return SemanticCache(root / name, embedder=embedder, config=config)

    def filed_by(name: str, learner: PromptFiler | bool, **extra: Any) -> Callable[[], LLMCache]:
        return lambda: LLMCache(tables(name), learner=learner, **extra)

    return {
        BY_SITE: filed_by("learned", TemplateLearner()),
        BY_TEXT: filed_by("learned-text", TemplateLearner()),
        "declared (its own templates)": filed_by(
            "declared", False, templates=declared_templates(calls)
        ),
        "full prompt (one table)": filed_by("full", FullPrompt()),
    }


HEADER = [
    "path",
    "calls",
    "looked up",
    "answers filed",
    "site share (min, sites >= 20)",
    "pure tables",
    "agent crossings",
    "hits",
    "cost cut",
    "wrong hits",
    "s",
]


class Progress(CallSites):
    """CallSites that says every 10 calls how far the live run is (on stderr)."""

    def __init__(self) -> None:
        super().__init__()
        self.started = time.perf_counter()

    def on_llm_end(self, response: Any, **kwargs: Any) -> None:
        super().on_llm_end(response, **kwargs)
        if len(self.calls) % 10 == 0:
            elapsed = time.perf_counter() - self.started
            print(f"  {len(self.calls)} calls, {elapsed:.0f} s", file=sys.stderr, flush=True)


def record_live(args: argparse.Namespace, embedder: Embedder) -> tuple[list[Call], float, str]:
    """Run the scenario on the local model; the calls, the seconds and the model's name."""
    from langchain_openai import ChatOpenAI

    from llmcache.llm import LocalServer

    sites = Progress()
    with LocalServer(args.model, parallel=1, ctx_per_slot=args.ctx) as server:
        llm = ChatOpenAI(
            base_url=server.base_url,
            api_key="local",  # type: ignore[arg-type]
            model=server.model,
            temperature=0,
            max_tokens=args.max_tokens,
            callbacks=[sites],
            custom_get_token_ids=approximate_token_ids,
        )
        started = time.perf_counter()
        result = run_scenario(
            llm,
            EmbedderEmbeddings(embedder),
            reactions=args.reactions,
            turns=args.turns,
            interviews=args.interviews,
        )
        seconds = time.perf_counter() - started
        llm_string = llm._get_llm_string()  # what LangChain keys its cache by, per call
        model = server.model
    for call in sites.calls:
        call.llm_string = llm_string
    print(
        f"scenario: {len(sites.calls)} calls, {len(result.reactions)} reactions, "
        f"{len(result.dialogue)} dialogue lines, summaries of {', '.join(result.summaries)}"
    )
    return sites.calls, seconds, model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="the local model (llmcache.llm)")
    parser.add_argument("--reactions", type=int, default=len(TOMMIE_DAY))
    parser.add_argument("--turns", type=int, default=2, help="rounds of Tommie and Eve's talk")
    parser.add_argument("--interviews", type=int, default=3, help="questions per agent")
    parser.add_argument("--max-tokens", type=int, default=32, help="per answer")
    parser.add_argument("--ctx", type=int, default=4096, help="context tokens of the slot")
    parser.add_argument("--threshold", type=float, default=0.9, help="cosine, every path")
    parser.add_argument("--min-site-calls", type=int, default=20)
    parser.add_argument("--record", type=Path, help="save the live calls here (JSONL)")
    parser.add_argument(
        "--calls",
        type=Path,
        default=RECORDED,
        help="replay these saved calls (default: the recorded run in benchmarks/data)",
    )
    parser.add_argument("--live", action="store_true", help="run the scenario on the local model")
    parser.add_argument(
        "--then",
        type=Path,
        help="another run's saved calls: filed by the templates learned from the first run",
    )
    args = parser.parse_args(argv)

    embedder = default_embedder()
    if not args.live:
        lines = args.calls.read_text(encoding="utf-8").splitlines()
        calls = [Call(**json.loads(line)) for line in lines if line.strip()]
        live_s, model = float("nan"), "(recorded)"
    else:
        calls, live_s, model = record_live(args, embedder)
    if args.record:
        args.record.write_text(
            "".join(json.dumps(c.__dict__) + "\n" for c in calls), encoding="utf-8"
        )
    per_site = Counter(c.site for c in calls)
    print(f"model {model}; live run {live_s:.0f} s; calls per code site:")
    for site, n in per_site.most_common():
        agents = Counter(c.agent for c in calls if c.site == site)
        by_agent = ", ".join(f"{a or '?'} {k}" for a, k in agents.items())
        print(f"  {n:4d}  {site}  ({by_agent})")
    figures = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in paths(calls, Path(tmp), embedder, args.threshold).items():
            figures.append(
                replay_path(
                    name, calls, make, min_site_calls=args.min_site_calls, sites=name == BY_SITE
                )
            )
    print(markdown_table(HEADER, [f.row() for f in figures]))
    print(
        "\nshare of each code site's calls looked up (under any template), and filed under its "
        "most common table:"
    )
    sites = [s for s, n in per_site.most_common() if n >= args.min_site_calls]
    per_site_rows = [
        [site]
        + [
            f"{f.site_filed.get(site, 0.0):.0%} / {f.site_share.get(site, 0.0):.0%}"
            for f in figures
        ]
        for site in sites
    ]
    header = [f"code site (>= {args.min_site_calls} calls)"] + [f.path for f in figures]
    print(markdown_table(header, per_site_rows))
    if args.then is not None:
        lines = args.then.read_text(encoding="utf-8").splitlines()
        then = [Call(**json.loads(line)) for line in lines if line.strip()]
        print(f"\nthe next run ({args.then.name}), its templates learned from this one:")
        print(markdown_table(*kept_between_runs(calls, then, args.min_site_calls)))
    return 0


def _learned_run(
    learner: TemplateLearner, calls: Sequence[Call], sites: bool, filing: dict[str, set[str]]
) -> Counter[str]:
    """Each call's prompt shown to ``learner`` (in its code site's ``code_site`` if
    ``sites``) and its answer told to it, as ``LLMCache`` does; the calls filed per site.
    ``filing``: each learned template's code sites, added to."""
    filed: Counter[str] = Counter()
    for call in calls:
        text = str(json.loads(call.prompt)[-1]["kwargs"]["content"])
        with code_site(call.site.split("#")[0]) if sites else text_alone():
            options = learner.options(text, None, call.agent)
        if options is not None and options.template is not None:
            filed[call.site] += 1
            filing.setdefault(options.template, set()).add(call.site)
        learner.heard(call.answer or "", text)
    return filed


def kept_between_runs(
    first: Sequence[Call], then: Sequence[Call], min_site_calls: int
) -> tuple[list[str], list[list[str]]]:
    """A rerun with the learned templates kept (``TemplateLearner(path=...)``): the learner
    that learned from ``first`` files ``then``, by code site and by text alone. The header and
    rows of a table: per code site of ``then`` (at least ``min_site_calls``), the share filed."""
    per_site = Counter(c.site for c in then)
    shares = []
    impure = []
    for sites in (True, False):
        learner = TemplateLearner()
        filing: dict[str, set[str]] = {}
        _learned_run(learner, first, sites, filing)
        shares.append(_learned_run(learner, then, sites, filing))
        impure.append(sum(len(s) > 1 for s in filing.values()))
    rows = [
        [site, str(n), *(f"{filed[site] / n:.0%}" for filed in shares)]
        for site, n in per_site.most_common()
        if n >= min_site_calls
    ]
    total = sum(per_site.values())
    rows.append(["all", str(total), *(f"{sum(f.values()) / total:.0%}" for f in shares)])
    rows.append(["templates filing two code sites' calls", "", *(str(n) for n in impure)])
    return ["code site", "calls", "filed, by code site", "filed, by text alone"], rows


if __name__ == "__main__":
    sys.exit(main())
