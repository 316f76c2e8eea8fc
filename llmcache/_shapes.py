"""Endpoints as :class:`Shape`\\ s: what the cached call needs to know about a request and
its response, one object per endpoint, so that every endpoint shares one call core.

- ``chat.completions.create``: :data:`CHAT`, the base :class:`Shape`.
- ``chat.completions.parse``: the request is ``create``'s with a Python type as
  ``response_format``; the table is keyed by that type's JSON schema (what the SDK sends), never
  by its Python identity, and the type validates every answer. A hit is turned into a
  ``ParsedChatCompletion`` by the SDK's own ``parse_chat_completion``.
- ``responses.create`` / ``responses.parse``: the prompt is ``instructions`` plus ``input`` (a
  text or a list of items); the answer is the ``output_text`` of the response's message. A hit is
  a real ``Response`` (``ParsedResponse`` through the SDK's ``parse_response`` for ``parse``).
- ``completions.create`` (the legacy Completions API): the prompt is one ``prompt`` text, seen
  by the core as one user message; the answer is the first choice's ``text``. A hit is a real
  ``Completion``. Prompts the cache cannot answer from one stored text (several prompts, token
  ids, ``echo``, ``logprobs``, ``suffix``, several choices) are sent as they are: see
  :func:`completions_bypass_reason`.

Every shape also builds the *fallback* answer (``fallback``): the endpoint's own response type
carrying a caller's fallback text, made from the last (invalid) response received where that
one will do, so its id, model and usage are the ones that were paid for.

Every reader here is defensive: the openai SDK builds responses without validating them, so a
malformed server answer arrives with any shape inside. Requests that depend on state only the
server holds are not cached at all: see :func:`responses_bypass_reason`.
"""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from openai import omit as _OMIT
from openai.lib._parsing import (
    parse_chat_completion,
    type_to_response_format_param,
    validate_input_tools,
)
from openai.lib._parsing._responses import parse_response, type_to_text_format_param
from openai.types import Completion
from openai.types.chat import ChatCompletion
from openai.types.responses import Response
from pydantic import BaseModel, TypeAdapter, ValidationError

from ._errors import ConfigurationError
from ._filing import messages_text
from ._tokens import count_message_tokens, count_tokens
from ._types import CacheEntry, Usage
from ._validation import CheckFn

__all__ = [
    "CHAT",
    "COMPLETIONS",
    "CompletionsShape",
    "ParsedChatShape",
    "Prompt",
    "ResponsesShape",
    "Shape",
    "chat_bypass_reason",
    "chat_prompt",
    "completions_bypass_reason",
    "completions_prompt",
    "given",
    "responses_bypass_reason",
    "responses_prompt",
]


# -- each endpoint's prompt, as templates are recognised in it --------------------------------

#: A call's prompt: (user text, system text), or why the call has no prompt to recognise.
Prompt = tuple[str, str | None] | str


def _text(content: Any) -> str | None:
    return content if isinstance(content, str) else None


def chat_prompt(kwargs: Mapping[str, Any]) -> Prompt:
    """The prompt of a chat call: one user message, after at most one system message."""
    messages = kwargs.get("messages")
    if not isinstance(messages, (list, tuple)) or not all(isinstance(m, Mapping) for m in messages):
        return "the call's messages are not a list of messages"
    roles = [m.get("role") for m in messages]
    texts = [_text(m.get("content")) for m in messages]
    if roles not in (["user"], ["system", "user"], ["developer", "user"]) or any(
        set(m) - {"role", "content"} for m in messages
    ):
        return "a template is recognised in one user message, after at most one system message"
    if any(t is None for t in texts):
        return "a template is recognised in messages whose content is text"
    return (str(texts[-1]), texts[0] if len(texts) == 2 else None)


def completions_prompt(kwargs: Mapping[str, Any]) -> Prompt:
    """The prompt of a legacy completions call: its ``prompt``, when it is one text."""
    prompt = kwargs.get("prompt")
    if isinstance(prompt, str):
        return (prompt, None)
    return "a template is recognised in a prompt that is one text"


def responses_prompt(kwargs: Mapping[str, Any]) -> Prompt:
    """The prompt of a Responses call: its ``input`` as text (or one user message), with its
    ``instructions`` as the system text."""
    given = kwargs.get("input")
    instructions = kwargs.get("instructions")
    system = instructions if isinstance(instructions, str) else None
    if isinstance(given, str):
        return (given, system)
    if (
        isinstance(given, (list, tuple))
        and len(given) == 1
        and isinstance(given[0], Mapping)
        and given[0].get("role") == "user"
        and isinstance(given[0].get("content"), str)
        and set(given[0]) <= {"role", "content", "type"}
    ):
        return (given[0]["content"], system)
    return "a template is recognised in an input that is text or one user message"


def chat_bypass_reason(kwargs: Mapping[str, Any]) -> str | None:
    """Why a ``chat.completions`` request cannot be answered from a cache, or ``None`` when it
    can: several choices cannot be answered from one stored answer."""
    n = kwargs.get("n")
    if n is None or n == 1 or type(n).__name__ in {"NotGiven", "Omit"}:
        return None
    return "n > 1: several choices cannot be answered from one stored answer"


# -- chat.completions: reading a response, rebuilding one from the store -----------------------


def _first_message(completion: Any) -> Any:
    """The first choice's message, or ``None``.

    The openai SDK builds responses without validating them, so a malformed server answer
    arrives as a ChatCompletion with any shape inside (no choices, a ``None`` message, a number
    for content): read it defensively, never with an AttributeError.
    """
    choices = getattr(completion, "choices", None)
    if not isinstance(choices, list) or not choices:
        return None
    return getattr(choices[0], "message", None)


def _content(completion: Any) -> str | None:
    content = getattr(_first_message(completion), "content", None)
    return content if isinstance(content, str) else None


def _has_tool_calls(completion: Any) -> bool:
    message = _first_message(completion)
    calls = getattr(message, "tool_calls", None) or getattr(message, "function_call", None)
    return bool(calls)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _reported_usage(
    response: Any, messages: Any, content: str | None, *, fields: tuple[str, str]
) -> Usage:
    """The usage the server reported under ``fields`` (prompt's, completion's: each endpoint
    names them its own way), else an estimate from the messages and the answer's text."""
    u = getattr(response, "usage", None)
    prompt = _count(getattr(u, fields[0], None))
    completed = _count(getattr(u, fields[1], None))
    if prompt is not None and completed is not None and (prompt or completed):
        return Usage(prompt_tokens=prompt, completion_tokens=completed)
    # The server gave no usage: estimate, and say which estimate in the record.
    prompt, source = count_message_tokens(messages)
    completion_tokens, _ = count_tokens(content or "")
    return Usage(prompt_tokens=prompt, completion_tokens=completion_tokens, source=source)


def _usage(completion: Any, messages: Any) -> Usage:
    return _reported_usage(
        completion, messages, _content(completion), fields=("prompt_tokens", "completion_tokens")
    )


def _rebuild(entry: CacheEntry, content: str | None, usage: Usage) -> ChatCompletion:
    """A real ChatCompletion from the stored JSON, carrying the (modified) answer.

    ``content=None`` keeps the stored message as it is (an answer made of tool calls). Only the
    parts changed here are copied (the top level, the first choice, its message): validation
    builds new objects from the rest, and every lookup decodes its entry afresh.
    """
    data = dict(entry.completion)
    data["id"] = f"chatcmpl-llmcache-{uuid.uuid4().hex[:24]}"
    data["created"] = int(time.time())
    choices = data.get("choices") or [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant"}}
    ]
    first = dict(choices[0])
    if content is not None:
        first["message"] = {**first["message"], "content": content}
    data["choices"] = [first]
    data["usage"] = {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }
    return ChatCompletion.model_validate(data)


def _is_tool_call_entry(entry: CacheEntry) -> bool:
    try:
        message = entry.completion["choices"][0]["message"]
        return bool(message.get("tool_calls") or message.get("function_call"))
    except (KeyError, IndexError, TypeError, AttributeError):
        return False


def _rebuild_problem(rebuild: Callable[[], Any], what: str) -> str | None:
    """Why a stored entry cannot be served as ``what`` (``rebuild`` raised), or ``None``.

    An entry can decode and pass its checksum yet no longer validate (written by a version with
    another openai SDK, or edited): then it is dropped and counted like any damaged entry, rather
    than failing every call that finds it.
    """
    try:
        rebuild()
    except (ValidationError, KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return f"its stored response is no longer a valid {what} ({reason})"
    return None


def _answer_problem(entry: CacheEntry) -> str | None:
    """Why a stored entry cannot be served as a ChatCompletion, or ``None`` when it can."""
    content = None if _is_tool_call_entry(entry) else entry.content
    return _rebuild_problem(lambda: _rebuild(entry, content, Usage()), "ChatCompletion")


def _as_message(message: Any, index: int) -> dict[str, Any]:
    if isinstance(message, Mapping):
        return dict(message)
    if isinstance(message, BaseModel):  # e.g. a ChatCompletionMessage sent back in a thread
        dumped: dict[str, Any] = message.model_dump(mode="json", exclude_none=True)
        return dumped
    raise ConfigurationError(
        f"messages[{index}] is a {type(message).__name__}, not a message mapping "
        "({'role': ..., 'content': ...})"
    )


def _messages(kwargs: Mapping[str, Any]) -> list[dict[str, Any]]:
    messages = kwargs.get("messages", [])
    if messages is None or isinstance(messages, (str, bytes, Mapping)):
        raise ConfigurationError("messages must be a list of message mappings")
    try:
        return [_as_message(m, i) for i, m in enumerate(messages)]
    except TypeError as exc:  # not iterable
        raise ConfigurationError("messages must be a list of message mappings") from exc


def _dumped(response: Any) -> dict[str, Any]:
    """What a response (perhaps a malformed one) holds, as JSON; ``{}`` when it will not dump."""
    if not isinstance(response, BaseModel):
        return {}
    try:
        data = response.model_dump(mode="json", warnings=False)
    except Exception:  # a malformed server answer: built from scratch instead
        return {}
    return data if isinstance(data, dict) else {}


def _kept(data: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {name: data[name] for name in names if data.get(name) is not None}


def _first_valid(model: type[BaseModel], bodies: list[dict[str, Any]]) -> Any:
    """The first of ``bodies`` that validates as ``model`` (the last is built to)."""
    for body in bodies[:-1]:
        try:
            return model.model_validate(body)
        except ValidationError:
            continue
    return model.model_validate(bodies[-1])


def _chat_fallback(last: Any, text: str, model: str) -> Any:
    data = _dumped(last)
    fresh = {
        "id": f"chatcmpl-llmcache-{uuid.uuid4().hex[:24]}",
        "created": int(time.time()),
        "model": model,
        "object": "chat.completion",
    }
    answer = {
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": text},
            }
        ]
    }
    paid = ("id", "created", "model", "usage", "system_fingerprint", "service_tier")
    return _first_valid(
        ChatCompletion,
        [
            {**fresh, **_kept(data, paid), **answer},
            {**fresh, **_kept(data, ("id", "created", "model")), **answer},
            {**fresh, **answer},
        ],
    )


class Shape:
    """What the core needs to know about one endpoint: how its request names the prompt and the
    table, and how its response carries the answer, its usage, and is stored and rebuilt.

    This base class is ``chat.completions.create`` (:data:`CHAT`); the subclasses below are
    the other endpoints.
    """

    name = "chat.completions"

    def key_params(self, kwargs: Mapping[str, Any]) -> Mapping[str, Any]:
        """The request as the table key (and the recorder's ``params``) sees it."""
        return kwargs

    def messages(self, kwargs: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The prompt as chat messages: embedded in full mode, counted, recorded."""
        return _messages(kwargs)

    def validator(self, validate: CheckFn) -> CheckFn:
        """The check every answer (a miss's or a served one) must pass."""
        return validate

    def content(self, response: Any) -> str | None:
        return _content(response)

    def has_tool_calls(self, response: Any) -> bool:
        return _has_tool_calls(response)

    def usage(self, response: Any, messages: Any) -> Usage:
        return _usage(response, messages)

    def dump(self, response: Any) -> dict[str, Any]:
        """The response as stored JSON: what the server sent, without the SDK's parsed objects
        (those are rebuilt from the text on a hit, with the caller's own classes)."""
        # warnings=False: a malformed server answer warns on every odd field; it is refused
        # by answer_problem instead.
        data: dict[str, Any] = response.model_dump(mode="json", warnings=False)
        for choice in data.get("choices") or []:
            message = choice.get("message") if isinstance(choice, dict) else None
            if isinstance(message, dict):
                message.pop("parsed", None)
                for call in message.get("tool_calls") or []:
                    if isinstance(call, dict) and isinstance(call.get("function"), dict):
                        call["function"].pop("parsed_arguments", None)
        return data

    def rebuild(self, entry: CacheEntry, content: str | None, usage: Usage) -> Any:
        return _rebuild(entry, content, usage)

    def is_tool_call_entry(self, entry: CacheEntry) -> bool:
        return _is_tool_call_entry(entry)

    def answer_problem(self, entry: CacheEntry) -> str | None:
        return _answer_problem(entry)

    def revision_request(
        self, request: Mapping[str, Any], messages: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """The request that sends a modifier's prompt instead of the query's."""
        return {**request, "messages": messages}

    def fallback(self, last: Any, text: str, model: str) -> Any:
        """The endpoint's response carrying ``text``, a caller's fallback answer: built from
        ``last``, the last (invalid) response received, keeping its id, model and usage where
        they validate, else from scratch for ``model``."""
        return _chat_fallback(last, text, model)


#: ``chat.completions.create``.
CHAT = Shape()


# -- chat.completions.parse ----------------------------------------------------------------------


def given(value: Any) -> bool:
    """Whether a keyword argument was really passed (openai's ``omit``/``NOT_GIVEN`` and
    ``None`` mean it was not)."""
    return value is not None and type(value).__name__ not in {"NotGiven", "Omit"}


def _with_type_check(validate: CheckFn, type_: Any) -> CheckFn:
    """``validate``, after the answer has parsed as ``type_`` (a pydantic model or dataclass).

    The caller's type is always checked, a validator given in the options or the category's
    policy is checked as well: a served answer must become the ``parsed`` object the caller
    asked for, whatever else is required of it.
    """
    adapter: TypeAdapter[Any] = TypeAdapter(type_)

    def check_type(content: str) -> None:
        adapter.validate_json(content)
        validate(content)

    return check_type


class ParsedChatShape(Shape):
    """``chat.completions.parse(..., response_format=MyModel)``."""

    name = "chat.completions.parse"

    def __init__(self, kwargs: Mapping[str, Any]) -> None:
        self.response_format: Any = kwargs.get("response_format")
        self.tools: Any = kwargs.get("tools")

    def key_params(self, kwargs: Mapping[str, Any]) -> Mapping[str, Any]:
        if isinstance(self.response_format, type):
            # The schema the SDK sends, not the class: two classes with one schema share a
            # table, and a class whose fields change gets a new one.
            return {
                **kwargs,
                "response_format": type_to_response_format_param(self.response_format),
            }
        return kwargs

    def validator(self, validate: CheckFn) -> CheckFn:
        if isinstance(self.response_format, type):
            return _with_type_check(validate, self.response_format)
        return validate

    def rebuild(self, entry: CacheEntry, content: str | None, usage: Usage) -> Any:
        return self._parsed(super().rebuild(entry, content, usage))

    def _parsed(self, completion: ChatCompletion, *, typed: bool = True) -> Any:
        return parse_chat_completion(
            response_format=(
                self.response_format if typed and given(self.response_format) else _OMIT
            ),
            input_tools=validate_input_tools(self.tools if given(self.tools) else _OMIT),
            chat_completion=completion,
        )

    def fallback(self, last: Any, text: str, model: str) -> Any:
        completion = super().fallback(last, text, model)
        try:
            return self._parsed(completion)
        except Exception:
            # A fallback text need not fit the response_format (it may be a sentinel the
            # caller tests for): still a ParsedChatCompletion, its ``parsed`` None.
            return self._parsed(completion, typed=False)

    def create_request(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """``request`` as ``chat.completions.create`` takes it: the response_format class
        turned into the JSON schema the SDK's ``parse`` would send.

        A cached ``parse`` is sent as ``create`` and parsed here: the SDK's ``parse`` raises
        (pydantic's ValidationError, a finish-reason error) on an answer that does not fit,
        after the call was paid, and the answer is lost with it. Sent as ``create``, such an
        answer is an invalid attempt like any other: resubmitted, recorded, never raw."""
        if isinstance(self.response_format, type):
            return {
                **request,
                "response_format": type_to_response_format_param(self.response_format),
            }
        return dict(request)

    def parsed_answer(self, completion: ChatCompletion) -> Any:
        """The ``ParsedChatCompletion`` of a paid answer, as ``parse`` returns it; one that does
        not fit stays readable (``parsed`` None, or the completion itself when even that cannot
        be built) for the validator to refuse."""
        for typed in (True, False):
            try:
                return self._parsed(completion, typed=typed)
            except Exception:  # the SDK's parse errors are many, and private
                continue
        return completion


# -- the Responses API -------------------------------------------------------------------------

# Parameters whose answer depends on state held by the server, not on the request: a cache
# cannot know that state, so such a request is sent as it is, and not stored.
_STATEFUL = {
    "previous_response_id": "continues a response stored on the server",
    "conversation": "continues a conversation stored on the server",
    "background": "runs in the background and is polled from the server",
    "prompt": "uses a prompt template stored (and versioned) on the server",
    "parse_as": "re-types output of a configuration update",
}
# Tools whose results the model reads from the world at call time (web and file search, code
# execution, MCP servers, …). Function and custom tools are answered by the caller, so an
# answer that calls them is as reusable as any other.
_CLIENT_TOOLS = {"function", "custom", "namespace"}


def responses_bypass_reason(kwargs: Mapping[str, Any]) -> str | None:
    """Why a ``responses`` request cannot be answered from a cache, or ``None`` when it can."""
    for name, why in _STATEFUL.items():
        value = kwargs.get(name)
        if given(value) and value is not False:
            return f"{name} {why}"
    tools: Any = kwargs.get("tools")
    if given(tools):
        for tool in tools:
            kind = tool.get("type") if isinstance(tool, Mapping) else getattr(tool, "type", None)
            if kind not in _CLIENT_TOOLS:
                return f"the server-side tool {kind!r} reads the world at call time"
    items: Any = kwargs.get("input")
    if given(items) and not isinstance(items, str):
        for item in items:
            kind = item.get("type") if isinstance(item, Mapping) else getattr(item, "type", None)
            if kind == "item_reference":
                return "input refers to an item stored on the server"
    return None


_TOOL_CALL_ITEMS = {"function_call", "custom_tool_call"}


def _items(response: Any) -> list[Any]:
    output = getattr(response, "output", None)
    return output if isinstance(output, list) else []


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, Mapping) else getattr(item, name, None)


def _output_text(items: list[Any]) -> str | None:
    """The text of the message items (``Response.output_text``), or ``None`` without any."""
    texts: list[str] = []
    found = False
    for item in items:
        if _field(item, "type") != "message":
            continue
        found = True
        for part in _field(item, "content") or []:
            text = _field(part, "text")
            if _field(part, "type") == "output_text" and isinstance(text, str):
                texts.append(text)
    return "".join(texts) if found else None


class ResponsesShape(Shape):
    """``responses.create`` (and ``responses.parse`` when ``text_format`` is given)."""

    name = "responses"

    def __init__(self, kwargs: Mapping[str, Any]) -> None:
        self.text_format: Any = kwargs.get("text_format")
        self.tools: Any = kwargs.get("tools")

    def key_params(self, kwargs: Mapping[str, Any]) -> Mapping[str, Any]:
        # input and instructions are the prompt (as messages are for chat): they are embedded,
        # not keyed. A text_format class is keyed by the schema the SDK sends in its place.
        params = {k: v for k, v in kwargs.items() if k not in ("input", "instructions")}
        if isinstance(self.text_format, type):
            del params["text_format"]
            text = dict(params.get("text") or {})
            text["format"] = type_to_text_format_param(self.text_format)
            params["text"] = text
        return params

    def messages(self, kwargs: Mapping[str, Any]) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        instructions = kwargs.get("instructions")
        if given(instructions):
            messages.append({"role": "system", "content": instructions})
        items: Any = kwargs.get("input")
        if isinstance(items, str):
            messages.append({"role": "user", "content": items})
        elif given(items):
            if isinstance(items, (bytes, Mapping)):
                raise ConfigurationError("input must be a text or a list of input items")
            try:
                messages.extend(_as_message(item, i) for i, item in enumerate(items))
            except TypeError as exc:
                raise ConfigurationError("input must be a text or a list of input items") from exc
        return messages

    def validator(self, validate: CheckFn) -> CheckFn:
        if isinstance(self.text_format, type):
            return _with_type_check(validate, self.text_format)
        return validate

    def content(self, response: Any) -> str | None:
        return _output_text(_items(response))

    def has_tool_calls(self, response: Any) -> bool:
        return any(_field(item, "type") in _TOOL_CALL_ITEMS for item in _items(response))

    def usage(self, response: Any, messages: Any) -> Usage:
        return _reported_usage(
            response, messages, self.content(response), fields=("input_tokens", "output_tokens")
        )

    def dump(self, response: Any) -> dict[str, Any]:
        data: dict[str, Any] = response.model_dump(mode="json", warnings=False)
        for item in data.get("output") or []:
            if not isinstance(item, dict):
                continue
            item.pop("parsed_arguments", None)
            for part in item.get("content") or []:
                if isinstance(part, dict):
                    part.pop("parsed", None)
        return data

    def _response(self, entry: CacheEntry, content: str | None, usage: Usage) -> Response:
        """A real Response from the stored JSON, carrying the (modified) answer as the text of
        its one message (``content=None`` keeps the output as stored: tool calls)."""
        data = copy.deepcopy(entry.completion)
        data["id"] = f"resp_llmcache_{uuid.uuid4().hex[:24]}"
        data["created_at"] = float(int(time.time()))
        data["status"] = "completed"
        if content is not None:
            output = [item for item in data.get("output") or [] if isinstance(item, dict)]
            first = next(
                (i for i, item in enumerate(output) if item.get("type") == "message"), None
            )
            if first is None:
                output.append(
                    {
                        "type": "message",
                        "id": f"msg_llmcache_{uuid.uuid4().hex[:24]}",
                        "role": "assistant",
                        "status": "completed",
                    }
                )
                first = len(output) - 1
            output[first]["content"] = [{"type": "output_text", "text": content, "annotations": []}]
            # One message carries the whole answer; a stored answer split over several would
            # otherwise be said twice.
            data["output"] = [
                item for i, item in enumerate(output) if i == first or item.get("type") != "message"
            ]
        data["usage"] = {
            "input_tokens": usage.prompt_tokens,
            "output_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        }
        return Response.model_validate(data)

    def rebuild(self, entry: CacheEntry, content: str | None, usage: Usage) -> Any:
        response = self._response(entry, content, usage)
        if not given(self.text_format):
            return response
        return parse_response(
            text_format=self.text_format,
            input_tools=_responses_tools(self.tools),
            response=response,
        )

    def is_tool_call_entry(self, entry: CacheEntry) -> bool:
        output = entry.completion.get("output")
        return isinstance(output, list) and any(
            isinstance(item, dict) and item.get("type") in _TOOL_CALL_ITEMS for item in output
        )

    def answer_problem(self, entry: CacheEntry) -> str | None:
        content = None if self.is_tool_call_entry(entry) else entry.content
        return _rebuild_problem(lambda: self._response(entry, content, Usage()), "Response")

    def revision_request(
        self, request: Mapping[str, Any], messages: list[dict[str, Any]]
    ) -> dict[str, Any]:
        # The revision prompt is the whole prompt: the query's instructions are not added to it.
        kept = {k: v for k, v in request.items() if k != "instructions"}
        return {**kept, "input": messages}

    def fallback(self, last: Any, text: str, model: str) -> Any:
        data = _dumped(last)
        fresh: dict[str, Any] = {
            "id": f"resp_llmcache_{uuid.uuid4().hex[:24]}",
            "object": "response",
            "created_at": float(int(time.time())),
            "model": model,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        }
        answer = {
            "status": "completed",
            "output": [
                {
                    "type": "message",
                    "id": f"msg_llmcache_{uuid.uuid4().hex[:24]}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            ],
        }
        # Whatever else the server said (its settings, echoed back) is kept; not its errors.
        said = {
            k: v
            for k, v in data.items()
            if v is not None and k not in ("output", "error", "incomplete_details")
        }
        response = _first_valid(
            Response,
            [
                {**fresh, **said, **answer},
                {**fresh, **_kept(data, ("id", "created_at", "model", "usage")), **answer},
                {**fresh, **answer},
            ],
        )
        if not given(self.text_format):
            return response
        tools = _responses_tools(self.tools)
        try:
            return parse_response(
                text_format=self.text_format, input_tools=tools, response=response
            )
        except Exception:
            # A fallback text that does not fit text_format: a ParsedResponse all the same.
            return parse_response(text_format=_OMIT, input_tools=tools, response=response)

    @property
    def parses_locally(self) -> bool:
        """Whether a ``parse`` call goes out as ``create`` and is parsed here (see
        :meth:`ParsedChatShape.create_request`): with a ``text_format`` class and no tools (the
        SDK turns parseable tools into wire tools by a private helper; those calls keep the
        SDK's own ``parse``)."""
        return isinstance(self.text_format, type) and not given(self.tools)

    def create_request(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """A ``parse`` request as ``responses.create`` takes it: ``text_format`` replaced by
        the text format the SDK's ``parse`` would send."""
        sent = {k: v for k, v in request.items() if k != "text_format"}
        text = dict(sent.get("text") or {})
        text["format"] = type_to_text_format_param(self.text_format)
        sent["text"] = text
        return sent

    def parsed_answer(self, response: Response) -> Any:
        """The ``ParsedResponse`` of a paid answer; one that does not fit stays readable for
        the validator to refuse (see :meth:`ParsedChatShape.parsed_answer`)."""
        for text_format in (self.text_format, _OMIT):
            try:
                return parse_response(text_format=text_format, input_tools=_OMIT, response=response)
            except Exception:  # the SDK's parse errors are many, and private
                continue
        return response


def _responses_tools(tools: Any) -> Any:
    """The tools as ``responses.parse`` hands them to ``parse_response``."""
    if not given(tools):
        return _OMIT
    try:
        from openai.lib._response_resources import _make_tools
    except ImportError:  # an SDK that keeps the helper elsewhere: strict tools go unparsed
        return list(tools)
    return _make_tools(tools)


# -- the legacy Completions API -----------------------------------------------------------------


def _set(value: Any) -> bool:
    """Whether a parameter asks for something: given, and not ``False``/``0``."""
    return given(value) and value is not False


def completions_bypass_reason(kwargs: Mapping[str, Any]) -> str | None:
    """Why a legacy ``completions`` request cannot be answered from a cache, or ``None`` when
    it can: one stored answer is one text for one text prompt."""
    prompt = kwargs.get("prompt")
    if not isinstance(prompt, str):
        return (
            "prompt is not one text (a list of prompts, or token ids): the cache answers one "
            "text prompt with one stored text"
        )
    n = kwargs.get("n")
    if given(n) and n != 1:
        return "n > 1: several choices cannot be answered from one stored answer"
    best_of = kwargs.get("best_of")
    if given(best_of) and best_of != 1:
        return "best_of > 1 picks among answers generated at call time"
    if _set(kwargs.get("echo")):
        return "echo puts the prompt in the answer: a stored answer holds another prompt's"
    if given(kwargs.get("logprobs")):
        return "logprobs asks for the probabilities of tokens the cache did not generate"
    if given(kwargs.get("suffix")):
        return "suffix asks for a text inserted before it, which the cache does not key or embed"
    return None


def _completion_choice(completion: Any) -> Any:
    choices = getattr(completion, "choices", None)
    if not isinstance(choices, list) or not choices:
        return None
    return choices[0]


class CompletionsShape(Shape):
    """``completions.create`` (the legacy Completions API), for a request that
    :func:`completions_bypass_reason` lets through: one text prompt, one answer."""

    name = "completions"

    def key_params(self, kwargs: Mapping[str, Any]) -> Mapping[str, Any]:
        # The prompt is embedded, not keyed (as chat's messages are).
        return {k: v for k, v in kwargs.items() if k != "prompt"}

    def messages(self, kwargs: Mapping[str, Any]) -> list[dict[str, Any]]:
        prompt = kwargs.get("prompt")
        if not isinstance(prompt, str):
            raise ConfigurationError("a cached completions request needs one text prompt")
        # One user message: what full mode embeds, what is counted and recorded.
        return [{"role": "user", "content": prompt}]

    def content(self, response: Any) -> str | None:
        text = getattr(_completion_choice(response), "text", None)
        return text if isinstance(text, str) else None

    def has_tool_calls(self, response: Any) -> bool:
        return False

    def usage(self, response: Any, messages: Any) -> Usage:
        return _reported_usage(
            response,
            messages,
            self.content(response),
            fields=("prompt_tokens", "completion_tokens"),
        )

    def dump(self, response: Any) -> dict[str, Any]:
        data: dict[str, Any] = response.model_dump(mode="json", warnings=False)
        return data

    def rebuild(self, entry: CacheEntry, content: str | None, usage: Usage) -> Any:
        data = dict(entry.completion)
        data["id"] = f"cmpl-llmcache-{uuid.uuid4().hex[:24]}"
        data["created"] = int(time.time())
        choices = data.get("choices") or [{"index": 0, "finish_reason": "stop", "text": ""}]
        first = dict(choices[0])
        if content is not None:
            first["text"] = content
        data["choices"] = [first]
        data["usage"] = {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
        }
        return Completion.model_validate(data)

    def is_tool_call_entry(self, entry: CacheEntry) -> bool:
        return False

    def answer_problem(self, entry: CacheEntry) -> str | None:
        return _rebuild_problem(lambda: self.rebuild(entry, entry.content, Usage()), "Completion")

    def revision_request(
        self, request: Mapping[str, Any], messages: list[dict[str, Any]]
    ) -> dict[str, Any]:
        # A completion model reads one text: the modifier's messages, written out in turn.
        return {**request, "prompt": messages_text(messages)}

    def fallback(self, last: Any, text: str, model: str) -> Any:
        data = _dumped(last)
        fresh = {
            "id": f"cmpl-llmcache-{uuid.uuid4().hex[:24]}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": model,
        }
        answer = {"choices": [{"index": 0, "finish_reason": "stop", "text": text}]}
        paid = ("id", "created", "model", "usage", "system_fingerprint")
        return _first_valid(
            Completion,
            [
                {**fresh, **_kept(data, paid), **answer},
                {**fresh, **_kept(data, ("id", "created", "model")), **answer},
                {**fresh, **answer},
            ],
        )


#: ``completions.create``.
COMPLETIONS = CompletionsShape()
