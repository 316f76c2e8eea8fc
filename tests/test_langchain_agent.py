"""A framework we did not write, through each zero-change path: LangChain's GenerativeAgent
(langchain_experimental.generative_agents, the two-agent scenario of its docs) on a scripted
model double, cached by llmcache without a change to the framework's code.

(a) ``set_llm_cache(LLMCache(...))``; (b) its ChatOpenAI pointed at
``CachedLLM(client, learn_templates=True)``; (c) its ChatOpenAI's base URL set to the proxy's
(``python -m llmcache proxy --learn-templates``). The scenario and the call-site recorder are the
benchmark's (benchmarks/bench_frameworks.py), so the test runs what the benchmark measures.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("langchain_experimental.generative_agents")
pytest.importorskip("langchain_openai")

from langchain_core.globals import set_llm_cache
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_openai import ChatOpenAI

from llmcache import CacheConfig, CachedLLM, SemanticCache
from llmcache._langchain import _messages
from llmcache.langchain import LLMCache
from llmcache.templates import TemplateLearner
from llmcache.testing import FakeOpenAI, HashEmbedder

ROOT = Path(__file__).resolve().parents[1]


def _bench() -> ModuleType:
    # A script beside the other benchmarks, which it imports (bench_models), not a package.
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    path = ROOT / "benchmarks" / "bench_frameworks.py"
    spec = importlib.util.spec_from_file_location("bench_frameworks", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


bench = _bench()


def scripted_answer(text: str) -> str:
    """A TEST DOUBLE of the model: a fixed answer per prompt kind, read from the prompt's own
    words, in the formats the framework parses (none of it is a measured answer)."""
    if "rate the likely poignancy" in text:
        return "3"
    if "What is the observed entity" in text:
        return "the dog"
    if "doing in the following observation" in text:
        return "barking"
    if "Relevant context:" in text:
        return "They are old friends."
    if "summarize" in text and "core characteristics" in text:
        return "Calm and curious."
    if "Should " in text and "react to the observation" in text:
        return "REACT: nods quietly"
    if "What would " in text and " say?" in text:
        return 'GOODBYE: "See you soon."' if "See you soon" in text else 'SAY: "See you soon."'
    if "most salient high-level questions" in text:
        return "What does he want?\nWhere is he?\nWho is Eve?"
    if "high-level novel insights" in text:
        return "He is anxious (because of 1)"
    return "OK"


class ScriptedChatModel(BaseChatModel):
    """A TEST DOUBLE chat model answering with :func:`scripted_answer`; counts its calls."""

    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "scripted-double"

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        self.calls += 1
        answer = scripted_answer(str(messages[-1].content))
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=answer))])


class RecordingCache(LLMCache):
    """LLMCache that also notes, per call, where it was filed and which entry answered it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.filed: list[tuple[str, str, int | None, str]] = []  # (table, outcome, entry, text)
        self.stored: dict[tuple[str, int], int] = {}  # entry -> index of the call that stored it
        # A call the model answered, by its messages: its answer may be filed again, once its
        # template is learned or changed (llmcache/_late.py), with no update of its own.
        self.passed: dict[str, int] = {}

    def lookup(self, prompt: str, llm_string: str) -> Any:
        served = super().lookup(prompt, llm_string)
        info = self.last_info
        self.filed.append(
            ("", "pass", None, prompt)
            if info is None
            else (info.partition_key, info.outcome, info.entry_id, prompt)
        )
        return served

    def update(self, prompt: str, llm_string: str, return_val: Any) -> None:
        super().update(prompt, llm_string, return_val)
        info = self.last_info
        if info is not None and info.entry_id is not None and info.outcome == "miss":
            self.stored[(info.partition_key, info.entry_id)] = len(self.filed) - 1
        if self.filed and self.filed[-1][1] in ("pass", "miss"):
            self.passed.setdefault(json.dumps(_messages(prompt)), len(self.filed) - 1)

    def origin(self, table: str, entry: int) -> int:
        """The index of the call whose answer ``entry`` holds: stored by its miss, or filed
        late from its pass-through."""
        if (table, entry) in self.stored:
            return self.stored[(table, entry)]
        stored = self.cache.backend.get(table, entry)
        assert stored is not None
        return self.passed[json.dumps(stored.messages)]


def _learner() -> TemplateLearner:
    return TemplateLearner()


def _check_the_flow(result: Any, reactions: int) -> None:
    # The framework's own flow ran to its end on the double's answers.
    assert len(result.reactions) == reactions
    assert all(r == "Tommie nods quietly" for r in result.reactions)
    assert result.dialogue and result.dialogue[-1].endswith('said "See you soon."')
    assert set(result.summaries) == {"Tommie (first)", "Tommie", "Eve"}
    assert all("Calm and curious." in s for s in result.summaries.values())


def _run_twice(model: Any) -> None:
    """The scenario run twice (a rerun of a study, say): the second finds the first's answers
    wherever it asks what the first asked. The framework's flow runs to its end both times."""
    for _ in range(2):
        result = bench.run_scenario(
            model, bench.EmbedderEmbeddings(HashEmbedder()), reactions=12, turns=2
        )
        _check_the_flow(result, reactions=12)


def test_path_a_set_llm_cache_files_the_framework_under_learned_templates(tmp_path: Path) -> None:
    model = ScriptedChatModel(custom_get_token_ids=bench.approximate_token_ids)
    sites = bench.CallSites()
    model.callbacks = [sites]
    cache = RecordingCache(
        SemanticCache(tmp_path / "a", embedder=HashEmbedder(), config=CacheConfig(threshold=0.9)),
        learner=_learner(),
    )
    set_llm_cache(cache)
    try:
        _run_twice(model)
    finally:
        set_llm_cache(None)
    calls = sites.calls
    assert len(calls) == len(cache.filed)
    # The learner became confident, and filed calls under learned templates...
    outcomes = Counter(outcome for _, outcome, _, _ in cache.filed)
    assert outcomes["pass"] > 0 and outcomes["miss"] > 0 and outcomes["hit"] > 0
    assert model.calls == len(calls) - outcomes["hit"]
    # ...each table holding one code site's calls (no crossing of templates)...
    sites_of: dict[str, set[str]] = defaultdict(set)
    for call, (table, outcome, _, _) in zip(calls, cache.filed, strict=True):
        if outcome != "pass":
            sites_of[table].add(call.site)
    assert sites_of and all(len(s) == 1 for s in sites_of.values()), sites_of
    # ...and every hit was served the answer of a call of its own agent and code site.
    for i, (table, outcome, entry, _) in enumerate(cache.filed):
        if outcome != "hit":
            continue
        assert entry is not None
        origin = calls[cache.origin(table, entry)]
        assert (origin.agent, origin.site) == (calls[i].agent, calls[i].site)
    # The importance site alone made more than the learner needs to be confident.
    importance = [c for c in calls if c.site.startswith("_score_memory_importance")]
    assert len(importance) >= 20 and {c.agent for c in importance} == {"Tommie", "Eve"}
    # Each template was learned at the framework function that built its prompts, read from
    # the stack (llmcache/_site.py): the sites the benchmark's replay names its calls by.
    _learned_at_the_framework_functions(cache.learner, calls)
    cache.close()


def _learned_at_the_framework_functions(learner: Any, calls: list[Any]) -> None:
    learned = learner.templates()
    assert learned
    functions = {c.site.split("#")[0] for c in calls}
    for template in learned:
        module, function, line = template.site.split(":")
        assert module.startswith("langchain_experimental.generative_agents."), template.site
        assert function.rsplit(".", 1)[-1] in functions and int(line) > 0


def test_the_benchmarks_replay_measures_the_learned_path(tmp_path: Path) -> None:
    # The benchmark's figures from traffic the scripted double answered: the same code.
    model = ScriptedChatModel(custom_get_token_ids=bench.approximate_token_ids)
    sites = bench.CallSites()
    model.callbacks = [sites]
    for _ in range(2):
        bench.run_scenario(model, bench.EmbedderEmbeddings(HashEmbedder()), reactions=12, turns=1)
    for call in sites.calls:
        call.llm_string = model._get_llm_string()
        call.usage = {"input_tokens": 100, "output_tokens": 5}
    makers = bench.paths(sites.calls, tmp_path, HashEmbedder(), 0.9)
    learned = bench.replay_path("learned", sites.calls, makers[bench.BY_SITE], sites=True)
    by_text = bench.replay_path("learned, text", sites.calls, makers[bench.BY_TEXT])
    declared = bench.replay_path("declared", sites.calls, makers["declared (its own templates)"])
    assert learned.calls == declared.calls == len(sites.calls)
    assert learned.impure_tables == 0 and learned.crossings == 0
    assert 0 < learned.filed < learned.calls  # the first calls of a template pass through
    # ...and their answers are filed once it is learned, each site's calls under one table but
    # for hits served under a template before it was widened (a hit's answer is another
    # call's: never filed again). The recorded runs give 97% (bench_frameworks.py).
    assert learned.filed_late > 0 and learned.filed < learned.answers_filed <= learned.calls
    assert learned.site_share and min(learned.site_share.values()) >= 0.9, learned.site_share
    assert declared.filed == declared.calls  # every prompt is one of its templates
    assert learned.hits > 0 and 0 < learned.cut < 1
    assert learned.wrong == 0  # the double answers each prompt kind alike
    assert by_text.impure_tables == 0 and by_text.crossings == 0 and by_text.wrong == 0


@pytest.mark.parametrize("streaming", [True, False], ids=["streamed", "raw response"])
def test_path_b_chatopenai_through_cachedllm_learning_templates(
    tmp_path: Path, streaming: bool
) -> None:
    if "learn_templates" not in inspect.signature(CachedLLM).parameters:
        pytest.skip("CachedLLM(learn_templates=True) has not landed yet")
    fake = FakeOpenAI(lambda request: scripted_answer(str(request["messages"][-1]["content"])))
    cached = CachedLLM(
        fake,
        SemanticCache(tmp_path / "b", embedder=HashEmbedder(), config=CacheConfig(threshold=0.9)),
        learn_templates=True,  # type: ignore[call-arg]
    )
    sites = bench.CallSites()
    # ChatOpenAI sends a call that streams through client.create, and a non-streamed one
    # through client.with_raw_response.create: both are cached.
    model = ChatOpenAI(
        client=cached.chat.completions,
        root_client=cached,
        api_key="unused",  # type: ignore[arg-type]
        model="scripted-double",
        streaming=streaming,
        callbacks=[sites],
        custom_get_token_ids=bench.approximate_token_ids,
    )
    _run_twice(model)
    cached.cache.ledger.flush()
    stats = cached.cache.stats()
    assert stats.total.hits > 0
    assert len(fake.calls) == len(sites.calls) - stats.total.hits
    assert cached.learner is not None
    _learned_at_the_framework_functions(cached.learner, sites.calls)
    cached.close()


def test_path_c_chatopenai_pointed_at_the_proxy_learning_templates(tmp_path: Path) -> None:
    """(c) The only change a framework's user can make without code: its ChatOpenAI's base
    URL set to ``python -m llmcache proxy --learn-templates`` (here in-process), the model
    a scripted double behind the proxy."""
    from proxy_support import FakeUpstream, in_process_client
    from starlette.testclient import TestClient

    from llmcache.proxy import ProxyKey, ProxySettings, create_app

    class ScriptedUpstream(FakeUpstream):
        @staticmethod
        def answer_to(text: str) -> str:
            return scripted_answer(text)

    upstream = ScriptedUpstream()
    key = "sk-proxy-framework-0001"
    cache = SemanticCache(
        tmp_path / "c", embedder=HashEmbedder(), config=CacheConfig(threshold=0.9)
    )
    settings = ProxySettings(keys=(ProxyKey.parse(key),), learn_templates=True)
    app = create_app(settings, upstream=in_process_client(upstream), cache=cache)
    sites = bench.CallSites()
    outcomes: list[str] = []
    with TestClient(app) as http:
        http.event_hooks["response"].append(lambda r: outcomes.append(r.headers["x-llmcache"]))
        model = ChatOpenAI(
            base_url="http://testserver/v1",
            api_key=key,  # type: ignore[arg-type]
            model="scripted-double",
            http_client=http,
            max_retries=0,
            callbacks=[sites],
            custom_get_token_ids=bench.approximate_token_ids,
        )
        _run_twice(model)
    counted = Counter(outcomes)
    assert len(outcomes) == len(sites.calls)
    assert counted["pass"] > 0 and counted["miss"] > 0 and counted["hit"] > 0
    assert len(upstream.calls()) == len(sites.calls) - counted["hit"]
