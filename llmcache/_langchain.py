"""A LangChain cache on llmcache's tables: ``set_llm_cache(LLMCache())``.

LangChain asks its global cache twice per model call: ``lookup(prompt, llm_string)`` before,
``update(prompt, llm_string, generations)`` after a miss. Both halves are one cached call of
the core, split as a streamed call is (``start_streamed_call``): the lookup files the prompt
and searches its table, the update hands the answer the model gave to the same call, which
validates, stores and accounts it. So a LangChain call is counted, budgeted and stored exactly
as a ``CachedLLM`` call is.

Filing: a chat model's ``prompt`` is LangChain's JSON of its messages; a text model's is the
text. One user message (after at most one system message) is filed by the declared
templates, if any, else by the learner (``TemplateLearner.options``); anything else, and any
prompt neither files, passes through: a miss that is not stored, counted in
``stats().unrecognised``. ``llm_string`` (the model and its parameters, as LangChain writes
them) is keyed the way a request's output-affecting parameters are: two models, or one model
at two temperatures, never share a table; where the model is reached (its base URL, its key's
name) is not keyed, as a client's never is. Only the answer's text is stored, and given back as
one ``ChatGeneration`` (chat models) or ``Generation`` (text models).
"""

from __future__ import annotations

import ast
import json
import logging
import os
import re
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from langchain_core.caches import RETURN_VAL_TYPE, BaseCache
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, Generation
from openai.types.chat import ChatCompletion, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice
from openai.types.completion_usage import CompletionUsage

from ._cache import SemanticCache
from ._cached_call import StreamedCall, file_paid, start_streamed_call
from ._client import Templates, recognised_options
from ._config import CacheConfig
from ._errors import ConfigurationError
from ._late import LateFiling
from ._learn import TemplateLearner
from ._ledger import UNTABLED_KEY, CacheStats
from ._protocols import CacheBackend, Embedder
from ._recognise import TemplateSet
from ._site import carried_by, current_site
from ._types import CacheOptions, CallInfo, Mode

__all__ = ["LLMCache", "PromptFiler"]

logger = logging.getLogger("llmcache")

# LangChain's message types, by the ``type`` its serialised messages carry, as chat roles.
_ROLES = {"human": "user", "system": "system", "ai": "assistant", "tool": "tool"}

# A lookup that missed waits for its update in a bounded queue: a model call that failed never
# sends one, and its pending call must not be kept for ever (it is closed as abandoned).
_PENDING_LIMIT = 1024


class PromptFiler(Protocol):
    """What files a prompt seen without options: ``TemplateLearner`` (learned from the traffic)
    or anything with its ``options`` method. ``None`` passes the prompt through."""

    def options(
        self, prompt: str, system: str | None = None, default_agent: str = ""
    ) -> CacheOptions | None: ...


@runtime_checkable
class _Hears(Protocol):
    """A filer that is told the model's answers (``TemplateLearner.heard``): a later prompt
    that quotes one holds it as a value."""

    def heard(self, answer: str, prompt: str, system: str | None = None) -> None: ...


def _text_of(content: Any) -> str:
    """A message's content as text: a string, or its text blocks one per line; anything
    else (an image, say) as JSON, so that two such prompts never read alike."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", ""))
            if isinstance(part, Mapping) and part.get("type") == "text"
            else json.dumps(part, sort_keys=True, default=str)
            for part in content
        )
    return "" if content is None else json.dumps(content, sort_keys=True, default=str)


def _no_model_call(request: dict[str, Any]) -> Any:
    # A LangChain cache sees the model's answers, never the model: a modifier that would ask
    # it (revise) fails, and the cached answer is treated as unusable (a miss).
    raise ConfigurationError("a LangChain cache cannot call the model (a revise modifier)")


def messages_of(prompt: str) -> list[dict[str, Any]] | None:
    """The chat messages a chat model's cache ``prompt`` (LangChain's JSON of its messages)
    holds, as openai's ``{"role", "content"}``; ``None`` for a text model's prompt.

    Read as plain JSON, never deserialised into objects: a cache reads what it is given. A
    message with more than text (tool calls, a name, extra arguments) keeps those beside its
    content, so it is never filed as a template's one user message.
    """
    if not prompt.startswith("["):
        return None
    try:
        loaded = json.loads(prompt)
    except ValueError:
        return None
    if not isinstance(loaded, list):
        return None
    messages: list[dict[str, Any]] = []
    for item in loaded:
        if not isinstance(item, Mapping) or item.get("lc") != 1:
            return None
        kwargs = item.get("kwargs")
        if not isinstance(kwargs, Mapping):
            return None
        kind = str(kwargs.get("type", ""))
        role = str(kwargs.get("role", kind)) if kind == "chat" else _ROLES.get(kind, kind)
        message: dict[str, Any] = {"role": role, "content": _text_of(kwargs.get("content"))}
        extra = {
            k: v
            for k, v in kwargs.items()
            if k not in ("type", "content", "role", "id", "response_metadata") and v
        }
        message.update(extra)
        messages.append(message)
    return messages


# Where a model is reached and who pays for it, not what it answers: kept out of the table
# key, as a client's api_key and base_url are (a local server restarted on another port, or
# a rotated key, keeps its tables). LangChain writes a key itself only as a secret's name.
_NOT_KEYED = re.compile(
    r"(api_base|base_url|endpoint|api_key|organization|proxy|headers|timeout|max_retries)$"
)


def keyed_llm_string(llm_string: str) -> str:
    """``llm_string`` as the table key sees it: without the fields that say where the model
    is reached (see ``_NOT_KEYED``), when LangChain wrote it as its JSON (chat models);
    otherwise as it is."""
    head, sep, tail = llm_string.rpartition("---")
    if not sep:
        return llm_string
    try:
        data = json.loads(head)
    except ValueError:
        return llm_string
    fields = data.get("kwargs") if isinstance(data, dict) else None
    if not isinstance(fields, dict):
        return llm_string
    data["kwargs"] = {k: v for k, v in fields.items() if not _NOT_KEYED.search(k)}
    return json.dumps(data, sort_keys=True) + sep + tail


def model_of(llm_string: str) -> str:
    """The model's name in LangChain's ``llm_string`` ("" when it names none): for the ledger's
    prices and the table's ``model``; the whole string keys the table."""
    head = llm_string.rsplit("---", 1)[0]
    fields: Any
    try:
        fields = json.loads(head).get("kwargs", {})
    except (ValueError, AttributeError):
        try:
            fields = dict(ast.literal_eval(llm_string))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return ""
    if not isinstance(fields, Mapping):
        return ""
    for name in ("model_name", "model", "model_id"):
        value = fields.get(name)
        if isinstance(value, str) and value:
            return value
    return ""


def _messages(prompt: str) -> list[dict[str, Any]]:
    """LangChain's prompt as chat messages (a plain model's prompt: one user message)."""
    messages = messages_of(prompt)
    return messages if messages is not None else [{"role": "user", "content": prompt}]


def _learned_prompt(
    prompt: str, messages: list[dict[str, Any]] | None = None
) -> tuple[str, str | None] | None:
    """A prompt's user text and system text, when it is one a template can file (one user
    message after at most one system message, text only); else ``None``."""
    messages = messages if messages is not None else _messages(prompt)
    roles = [m["role"] for m in messages]
    plain = all(set(m) == {"role", "content"} for m in messages)
    if not plain or roles not in (["user"], ["system", "user"]):
        return None
    system = messages[0]["content"] if len(messages) == 2 else None
    return messages[-1]["content"], system


def _request(prompt: str, llm_string: str) -> dict[str, Any]:
    """The request a prompt stands for in the cache's tables. ``llm_string`` is keyed as a
    request parameter is (hashed into the table's key, never stored in clear): it carries the
    model, its sampling parameters and its stop words."""
    return {
        "model": model_of(llm_string),
        "messages": _messages(prompt),
        "llm_string": keyed_llm_string(llm_string),
    }


def _answer(model: str, text: str, usage: CompletionUsage | None) -> ChatCompletion:
    """The model's answer as the chat completion the core stores (only its text is kept)."""
    return ChatCompletion(
        id=f"chatcmpl-langchain-{uuid.uuid4().hex[:24]}",
        object="chat.completion",
        created=int(time.time()),
        model=model,
        choices=[
            Choice(
                index=0,
                finish_reason="stop",
                message=ChatCompletionMessage(role="assistant", content=text),
            )
        ],
        usage=usage,
    )


def _usage_of(generation: Generation) -> CompletionUsage | None:
    """The tokens a chat model reported for its answer, if it did (else the core counts)."""
    message = getattr(generation, "message", None)
    meta = getattr(message, "usage_metadata", None)
    if not isinstance(meta, Mapping):
        return None
    prompt, completion = int(meta.get("input_tokens", 0)), int(meta.get("output_tokens", 0))
    if not (prompt or completion):
        return None
    return CompletionUsage(
        prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
    )


def _storable(generations: Sequence[Generation]) -> str | None:
    """The one answer text worth storing, or ``None`` (several generations, tool calls, no
    text: passed on as they are, never stored)."""
    if len(generations) != 1:
        return None
    generation = generations[0]
    message = getattr(generation, "message", None)
    if message is not None and (getattr(message, "tool_calls", None) or []):
        return None
    text = generation.text
    return text if text.strip() else None


class LLMCache(BaseCache):
    """llmcache's tables as LangChain's cache: ``set_llm_cache(LLMCache())``.

    ``cache``, ``embedder`` and ``config`` open the tables as ``CachedLLM`` does (a directory,
    a ``postgresql://`` DSN, a backend or a :class:`~llmcache.SemanticCache`). A prompt is
    filed by ``templates`` (declared, as ``CachedLLM(templates=)``) when they recognise it,
    else by ``learner`` (a :class:`PromptFiler`; by default the online
    ``llmcache.templates.TemplateLearner``; ``learner=False`` for declared templates only),
    under ``default_agent`` when the prompt names none. What neither files passes through,
    counted, and is never stored.

    >>> from langchain_core.globals import set_llm_cache       # doctest: +SKIP
    >>> set_llm_cache(LLMCache(".llmcache"))                     # doctest: +SKIP
    """

    def __init__(
        self,
        cache: SemanticCache | str | os.PathLike[str] | CacheBackend | None = None,
        *,
        embedder: Embedder | None = None,
        config: CacheConfig | str | os.PathLike[str] | None = None,
        templates: Templates | None = None,
        learner: PromptFiler | bool = True,
        default_agent: str = "",
    ) -> None:
        if isinstance(cache, SemanticCache):
            if embedder is not None or config is not None:
                raise ConfigurationError(
                    "pass embedder/config to SemanticCache(...) or to LLMCache, not both"
                )
            self.cache: SemanticCache = cache
        else:
            if isinstance(config, (str, os.PathLike)):
                config = CacheConfig.from_file(config)
            self.cache = SemanticCache(cache, embedder=embedder, config=config)
        if templates is None or isinstance(templates, TemplateSet):
            self.templates: TemplateSet | None = templates
        elif isinstance(templates, (str, os.PathLike)):
            self.templates = TemplateSet.from_folder(templates)
        else:
            self.templates = TemplateSet(templates)
        self.learner: PromptFiler | None = _open_learner(learner)
        self.default_agent = default_agent
        # Calls the learner handled, with their fresh answers: filed under the template that
        # files them once one is learned or changed (llmcache/_late.py). Only for the bundled
        # learner, which counts the templates it learns and changes.
        self._late: LateFiling[tuple[str, str, str, CompletionUsage | None]] = LateFiling()
        self._lock = threading.Lock()
        self._pending: OrderedDict[int, tuple[tuple[str, str], StreamedCall | None]] = OrderedDict()
        self._waiting: dict[tuple[str, str], deque[int]] = {}
        self._seq = 0
        #: The record of the last call: a lookup's (a hit's is final, a miss's is finished by
        #: its update), else the last update's.
        self.last_info: CallInfo | None = None

    # -- filing ------------------------------------------------------------------------------

    def file(self, prompt: str) -> tuple[CacheOptions | None, list[dict[str, Any]]]:
        """The options LangChain's ``prompt`` is filed under (``None``: passed through), and its
        messages. Learning happens here: call it once per model call."""
        messages = _messages(prompt)
        said = _learned_prompt(prompt, messages)
        if said is None:
            self.cache.ledger.add(UNTABLED_KEY, {"unrecognised": 1})
            return None, messages
        user, system = said
        if self.templates is not None:
            # A declared template's fill is stripped text (PromptTemplate.fill), and framework
            # templates often end in white space ("Rating: "): compared stripped.
            stripped = (user.strip(), system.strip() if system is not None else None)
            options, _ = recognised_options(self.templates, stripped, self.default_agent)
            if options is not None:
                return options, messages
        if self.learner is not None:
            with carried_by(self):  # a subclass's lookup is not the call's code site
                options = self.learner.options(user, system, self.default_agent)
                if isinstance(self.learner, TemplateLearner):
                    # Its answer is filed under the template that files it once one is
                    # learned, or changed (llmcache/_late.py).
                    if options is None:
                        self._late.expect((user, system), current_site())
                    else:
                        site = options.metadata.get("site")
                        self._late.expect((user, system), site, options.category)
                if options is None:
                    self.cache.ledger.add(UNTABLED_KEY, {"learning": 1})
            return options, messages
        self.cache.ledger.add(UNTABLED_KEY, {"unrecognised": 1})
        return None, messages

    def _start(
        self, prompt: str, llm_string: str, *, collect: bool = False
    ) -> tuple[StreamedCall | None, bool]:
        """The call a prompt makes (``None`` when it passes through), and whether it is chat."""
        options, _ = self.file(prompt)
        chat = messages_of(prompt) is not None
        if options is None:
            return None, chat
        if collect:
            options = options.model_copy(update={"mode": Mode.COLLECT})
        started = start_streamed_call(
            self.cache, _request(prompt, llm_string), options, _no_model_call
        )
        return started, chat

    # -- BaseCache ---------------------------------------------------------------------------

    def lookup(self, prompt: str, llm_string: str) -> RETURN_VAL_TYPE | None:
        started, chat = self._start(prompt, llm_string)
        # A miss's record is finished by its update; a pass-through has none.
        self.last_info = started.info if started is not None else None
        if started is not None and started.served is not None:
            text = started.served.choices[0].message.content or ""
            self._heard(prompt, text)  # served, it is what the framework quotes next
            if chat:
                return [ChatGeneration(message=AIMessage(content=text))]
            return [Generation(text=text)]
        self._wait((prompt, llm_string), started)
        return None

    def update(self, prompt: str, llm_string: str, return_val: RETURN_VAL_TYPE) -> None:
        found, started = self._take((prompt, llm_string))
        text = _storable(return_val)
        if text is not None:
            self._heard(prompt, text)
        if not found:
            # Given an answer it did not look up (a cache being filled): stored as collected.
            started, _ = self._start(prompt, llm_string, collect=True)
        if started is not None:
            if text is None:
                self.last_info = started.finish(None, complete=False)
            else:
                answer = _answer(
                    str(started.request.get("model", "")), text, _usage_of(return_val[0])
                )
                self.last_info = started.finish(answer, complete=True)
        if text is not None:
            self._keep(prompt, llm_string, text, _usage_of(return_val[0]))

    def _keep(self, prompt: str, llm_string: str, text: str, usage: CompletionUsage | None) -> None:
        """The model's answer to a call the learner handled: kept, and the kept answers a
        template learned or changed since files under another name filed under it
        (``llmcache/_late.py``)."""
        learner = self.learner
        if not isinstance(learner, TemplateLearner):
            return
        said = _learned_prompt(prompt)
        if said is None:
            return
        self._late.answered(said, (prompt, llm_string, text, usage))
        if not self._late.ready(learner):
            return
        filed = 0
        for (asked, llm, answer, spent), options in self._late.due(learner, self.default_agent):
            kwargs = _request(asked, llm)
            completion = _answer(str(kwargs["model"]), answer, spent)
            filed += file_paid(self.cache, kwargs, options, completion) is not None
        if filed:
            self.cache.ledger.add(UNTABLED_KEY, {"filed_late": filed})

    def _heard(self, prompt: str, answer: str) -> None:
        """Tell the learner the model's answer to ``prompt``, filed or passed through."""
        if isinstance(self.learner, _Hears):
            messages = messages_of(prompt) or [{"role": "user", "content": prompt}]
            said = "\n".join(_text_of(m.get("content")) for m in messages)
            self.learner.heard(answer, said)

    def clear(self, **kwargs: Any) -> None:
        """Remove every entry of the cache's tables (its counters stay)."""
        for partition in self.cache.partitions():
            for entry in list(self.cache.backend.iterate(partition.key)):
                if entry.id is not None:
                    self.cache.backend.evict(partition.key, entry.id)

    # The async twins: the core is synchronous (as AsyncCachedLLM's is), so they run it in a
    # worker thread rather than block the caller's event loop.
    async def alookup(self, prompt: str, llm_string: str) -> RETURN_VAL_TYPE | None:
        import asyncio

        return await asyncio.to_thread(self.lookup, prompt, llm_string)

    async def aupdate(self, prompt: str, llm_string: str, return_val: RETURN_VAL_TYPE) -> None:
        import asyncio

        await asyncio.to_thread(self.update, prompt, llm_string, return_val)

    async def aclear(self, **kwargs: Any) -> None:
        import asyncio

        await asyncio.to_thread(self.clear, **kwargs)

    # -- the rest ----------------------------------------------------------------------------

    def stats(self) -> CacheStats:
        """The tables' counters (see :meth:`llmcache.SemanticCache.stats`)."""
        self.cache.ledger.flush()
        return self.cache.stats()

    def close(self) -> None:
        """Close the calls still waiting for an answer (never stored) and the cache."""
        with self._lock:
            left = [started for _, started in self._pending.values() if started is not None]
            self._pending.clear()
            self._waiting.clear()
        for started in left:
            started.finish(None, complete=False)
        self.cache.close()

    def _wait(self, key: tuple[str, str], started: StreamedCall | None) -> None:
        """Keep a missed call (or a pass-through's mark) until its update comes."""
        dropped: list[StreamedCall] = []
        with self._lock:
            self._seq += 1
            self._pending[self._seq] = (key, started)
            self._waiting.setdefault(key, deque()).append(self._seq)
            while len(self._pending) > _PENDING_LIMIT:
                seq, (old_key, old) = self._pending.popitem(last=False)
                self._forget(old_key, seq)
                if old is not None:
                    dropped.append(old)
        for old in dropped:
            old.finish(None, complete=False)

    def _take(self, key: tuple[str, str]) -> tuple[bool, StreamedCall | None]:
        """The oldest call waiting for ``key``'s answer: ``(found, call)``."""
        with self._lock:
            queue = self._waiting.get(key)
            if not queue:
                return False, None
            seq = queue.popleft()
            if not queue:
                del self._waiting[key]
            return True, self._pending.pop(seq)[1]

    def _forget(self, key: tuple[str, str], seq: int) -> None:
        queue = self._waiting.get(key)
        if queue is not None:
            queue.remove(seq)
            if not queue:
                del self._waiting[key]


def _open_learner(learner: PromptFiler | bool) -> PromptFiler | None:
    if learner is False:
        return None
    if learner is True:
        made: PromptFiler = TemplateLearner()
        return made
    return learner
