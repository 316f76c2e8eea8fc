"""llmcache as LangChain's cache (llmcache.langchain): lookup and update on llmcache's tables,
through langchain_core's own BaseCache contract and its own chat and text models."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_core")

from langchain_core.globals import set_llm_cache
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.language_models.fake import FakeListLLM
from langchain_core.load import dumps
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult, Generation

from llmcache import CacheConfig, CacheOptions, SemanticCache
from llmcache.langchain import LLMCache
from llmcache.templates import TemplateLearner
from llmcache.testing import HashEmbedder

RATE = "On the scale of 1 to 10, rate the poignancy of this memory for {agent}.\nMemory: {memory}"
LLM_A = '{"id": ["ChatFake"], "kwargs": {"model_name": "fake-1", "temperature": 0.7}}---[]'
LLM_B = '{"id": ["ChatFake"], "kwargs": {"model_name": "fake-1", "temperature": 0.0}}---[]'


def _chat_prompt(agent: str, memory: str) -> str:
    # What a chat model gives its cache: LangChain's JSON of the messages.
    return dumps([HumanMessage(content=RATE.format(agent=agent, memory=memory))])


WARM_UP = [
    "Tommie sees the new home",
    "The new neighbors have a cat",
    "Eve eats a bowl of porridge",
    "Eve plays tennis with her friend Xu",
    "A dog licks his feet in the park",
    "The coffee tastes bitter today",
    "He checks his email for offers",
    "The line to the fair is long",
    "Lunch at a local diner",
    "The service is slow at noon",
    "A raccoon tore open the trash bag",
    "She helps a coworker on a task",
    "Frisbee players gather by the lake",
    "A letter arrives from home",
    "The kettle whistles loudly",
    "Rain taps on the window",
    "A neighbor waves from the porch",
    "The bus is late again",
    "Someone plays piano next door",
    "The bakery smells of fresh bread",
]


def _confident(
    cache: LLMCache, agents: tuple[str, ...] = ("Tommie", "Eve"), memories: list[str] = WARM_UP
) -> None:
    """Calls of one template, by several agents about many memories, until the learner files
    them (it passes a template's first calls through until it has learned it with
    confidence, and learns as slots only what varies)."""
    for i, memory in enumerate(memories):
        prompt = _chat_prompt(agents[i % len(agents)], memory)
        cache.lookup(prompt, LLM_A)
        cache.update(prompt, LLM_A, [Generation(text="1")])
    assert cache.last_info is not None, "the learner never became confident"


@pytest.fixture
def lc_cache(tmp_path: Path) -> Iterator[LLMCache]:
    cache = LLMCache(
        SemanticCache(tmp_path / "c", embedder=HashEmbedder(), config=CacheConfig(threshold=0.8)),
        learner=TemplateLearner(),
    )
    _confident(cache)
    yield cache
    cache.close()


def _text(generations: Any) -> str:
    assert isinstance(generations, list) and len(generations) == 1
    return str(generations[0].text)


def test_a_lookup_near_no_stored_answer_misses(lc_cache: LLMCache) -> None:
    prompt = _chat_prompt("Tommie", "quarterly tax forms overflow the drawer")
    assert lc_cache.lookup(prompt, LLM_A) is None
    lc_cache.update(prompt, LLM_A, [Generation(text="4")])
    assert lc_cache.last_info is not None and lc_cache.last_info.outcome == "miss"
    # Filed under the template learned from the warm-up's calls (named by its text).
    assert lc_cache.last_info.category.startswith("learned_")


def test_answers_passed_through_while_learning_are_filed_once_the_template_is_learned(
    lc_cache: LLMCache,
) -> None:
    # The warm-up's calls all passed through until the template was learned; their answers
    # were then filed under it, so the first of them asked again is served.
    stats = lc_cache.stats()
    assert stats.learning > 0 and stats.filed_late == stats.learning
    first = _chat_prompt("Tommie", WARM_UP[0])
    assert _text(lc_cache.lookup(first, LLM_A)) == "1"
    assert lc_cache.last_info is not None and lc_cache.last_info.outcome == "hit"
    # Another model's table holds none of them.
    assert lc_cache.lookup(first, LLM_B) is None


def test_an_update_is_served_to_the_same_prompt_as_a_chat_generation(lc_cache: LLMCache) -> None:
    prompt = _chat_prompt("Tommie", "Tommie feels tired from driving so far")
    assert lc_cache.lookup(prompt, LLM_A) is None
    lc_cache.update(prompt, LLM_A, [ChatGeneration(message=AIMessage(content="3"))])
    served = lc_cache.lookup(prompt, LLM_A)
    assert _text(served) == "3"
    assert isinstance(served[0], ChatGeneration)  # type: ignore[index]
    assert lc_cache.last_info is not None and lc_cache.last_info.outcome == "hit"


def test_a_paraphrased_slot_value_is_a_semantic_hit_once_the_learner_is_confident(
    tmp_path: Path,
) -> None:
    cache = LLMCache(
        SemanticCache(tmp_path / "c", embedder=HashEmbedder(), config=CacheConfig(threshold=0.8)),
        learner=TemplateLearner(),
    )
    first = _chat_prompt("Tommie", "The road is noisy at night")
    # Not yet learned: passed through, counted, and its answer not stored yet.
    assert cache.lookup(first, LLM_A) is None and cache.last_info is None
    cache.update(first, LLM_A, [Generation(text="2")])
    assert cache.stats().learning == 1 and cache.stats().unrecognised == 0
    assert not cache.cache.partitions()
    # Learned once confident; a memory that keeps taking new values is what gets embedded.
    # The first call's answer, paid while the template was learned, is then filed under it.
    _confident(cache)
    # A slot is embedded once it has shown 16 distinct values in the table (before, it must
    # match exactly, as a slot that names the caller does): more calls about new memories.
    _confident(cache, memories=[f"{m} and then {n}" for m, n in itertools.pairwise(WARM_UP)])
    assert _text(cache.lookup(first, LLM_A)) == "2"
    served = cache.lookup(_chat_prompt("Tommie", "The road is very noisy at night"), LLM_A)
    assert _text(served) == "2"
    assert cache.last_info is not None and cache.last_info.similarity is not None
    assert cache.last_info.similarity.cosine < 0.999
    # Never to another agent, however close its memory: the agent's slot must match.
    assert cache.lookup(_chat_prompt("Eve", "The road is noisy at night"), LLM_A) is None
    cache.close()


def test_a_different_llm_string_never_hits(lc_cache: LLMCache) -> None:
    prompt = _chat_prompt("Tommie", "Tommie is hungry")
    lc_cache.lookup(prompt, LLM_A)
    lc_cache.update(prompt, LLM_A, [Generation(text="5")])
    assert _text(lc_cache.lookup(prompt, LLM_A)) == "5"
    assert lc_cache.last_info is not None
    served_from = lc_cache.last_info.partition_key
    assert lc_cache.lookup(prompt, LLM_B) is None
    assert lc_cache.last_info is not None and lc_cache.last_info.outcome == "miss"
    assert lc_cache.last_info.partition_key != served_from


def test_clear_removes_every_answer(lc_cache: LLMCache) -> None:
    prompt = _chat_prompt("Tommie", "Tommie tries to get some rest")
    lc_cache.update(prompt, LLM_A, [Generation(text="1")])  # an update without a lookup
    assert _text(lc_cache.lookup(prompt, LLM_A)) == "1"
    lc_cache.clear()
    assert lc_cache.lookup(prompt, LLM_A) is None
    assert lc_cache.cache.partitions() == [] or all(
        not lc_cache.cache.entries(p.key) for p in lc_cache.cache.partitions()
    )


def test_what_the_learner_passes_through_is_counted_and_never_stored(lc_cache: LLMCache) -> None:
    before, learning = lc_cache.stats().unrecognised, lc_cache.stats().learning
    tables = lc_cache.cache.partitions()
    prompt = dumps([HumanMessage(content="Tell me a joke about cats.")])
    for _ in range(2):
        assert lc_cache.lookup(prompt, LLM_A) is None
        lc_cache.update(prompt, LLM_A, [Generation(text="no")])
    # Several messages, or a system message after the user's, are never one template's prompt.
    turns = dumps([HumanMessage(content="hi"), AIMessage(content="yo"), HumanMessage(content="x")])
    assert lc_cache.lookup(turns, LLM_A) is None
    # The joke fits no template (learning); the turns are no prompt a template can hold.
    assert lc_cache.stats().learning == learning + 2
    assert lc_cache.stats().unrecognised == before + 1
    assert lc_cache.cache.partitions() == tables


def test_a_system_message_reaches_the_learner(tmp_path: Path) -> None:
    seen: list[tuple[str, str | None, str]] = []

    class Recording(TemplateLearner):
        def options(
            self, prompt: str, system: str | None = None, default_agent: str = ""
        ) -> CacheOptions | None:
            seen.append((prompt, system, default_agent))
            return super().options(prompt, system, default_agent)

    cache = LLMCache(
        SemanticCache(tmp_path / "c", embedder=HashEmbedder()),
        learner=Recording(),
        default_agent="Tommie",
    )
    user = RATE.format(agent="Tommie", memory="a dog")
    cache.lookup(dumps([SystemMessage(content="Be brief."), HumanMessage(content=user)]), LLM_A)
    assert seen == [(user, "Be brief.", "Tommie")]
    cache.close()


class CountingChatModel(BaseChatModel):
    """A TEST DOUBLE chat model: answers "7" and counts the calls that reach it."""

    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "counting-double"

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        self.calls += 1
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content="7"))])


def test_set_llm_cache_answers_a_chat_models_repeated_prompt(lc_cache: LLMCache) -> None:
    model = CountingChatModel()
    set_llm_cache(lc_cache)
    try:
        question = RATE.format(agent="Tommie", memory="Tommie remembers his dog, Bruno")
        first = model.invoke(question)
        second = model.invoke(question)
        # The same model at another temperature is another table.
        other = model.bind(temperature=0.2).invoke(question)
    finally:
        set_llm_cache(None)
    assert first.content == second.content == other.content == "7"
    assert model.calls == 2
    assert lc_cache.stats().total.hits == 1


def test_a_text_models_prompt_is_cached_as_a_generation(
    lc_cache: LLMCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    answered: list[Any] = []
    lookup = lc_cache.lookup

    def recording(prompt: str, llm_string: str) -> Any:
        answered.append(lookup(prompt, llm_string))
        return answered[-1]

    monkeypatch.setattr(lc_cache, "lookup", recording)
    model = FakeListLLM(responses=["6", "9"])
    set_llm_cache(lc_cache)
    try:
        question = RATE.format(agent="Eve", memory="Eve sees a cat")
        answers = [model.invoke(question), model.invoke(question)]
    finally:
        set_llm_cache(None)
    assert answers == ["6", "6"]  # the second never reached the model (it would say 9)
    assert answered[0] is None
    assert type(answered[1][0]) is Generation  # a text model's, not a chat model's


def test_the_async_twins_share_the_tables(lc_cache: LLMCache) -> None:
    model = CountingChatModel()
    set_llm_cache(lc_cache)
    try:
        question = RATE.format(agent="Tommie", memory="Tommie sees the new neighbors' cat")

        async def twice() -> list[Any]:
            return [await model.ainvoke(question), await model.ainvoke(question)]

        answers = asyncio.run(twice())
    finally:
        set_llm_cache(None)
    assert [a.content for a in answers] == ["7", "7"]
    assert model.calls == 1


def test_a_lookup_left_without_its_update_is_closed_not_kept(
    lc_cache: LLMCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    import llmcache._langchain as module

    monkeypatch.setattr(module, "_PENDING_LIMIT", 2)
    prompts = [_chat_prompt("Tommie", f"memory number {i}") for i in range(4)]
    for prompt in prompts:
        assert lc_cache.lookup(prompt, LLM_A) is None
    # The two oldest were abandoned (a failed model call sends no update): an update for one
    # of them is then stored as collected, never matched with a stale call.
    lc_cache.update(prompts[0], LLM_A, [Generation(text="8")])
    assert lc_cache.last_info is not None and lc_cache.last_info.outcome == "collect"
    lc_cache.update(prompts[3], LLM_A, [Generation(text="8")])
    assert lc_cache.last_info is not None and lc_cache.last_info.outcome == "miss"


def test_where_the_model_is_reached_is_not_part_of_the_key(lc_cache: LLMCache) -> None:
    # ChatOpenAI writes its base URL into llm_string: a local server restarted on another
    # port is the same model, and keeps its tables.
    def llm_string(base: str, temperature: float) -> str:
        kwargs = {"model_name": "m", "openai_api_base": base, "temperature": temperature}
        return json.dumps({"kwargs": kwargs, "lc": 1}) + "---[('stop', None)]"

    prompt = _chat_prompt("Tommie", "Tommie sees a sign for a job fair")
    lc_cache.update(prompt, llm_string("http://127.0.0.1:8001/v1", 0.0), [Generation(text="6")])
    assert _text(lc_cache.lookup(prompt, llm_string("http://127.0.0.1:9002/v1", 0.0))) == "6"
    assert lc_cache.lookup(prompt, llm_string("http://127.0.0.1:9002/v1", 0.5)) is None
