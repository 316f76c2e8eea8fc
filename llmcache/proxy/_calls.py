"""A JSON request body as the openai SDK call that sends it, and the SDK's answer as the JSON
(or server-sent events) an OpenAI-compatible server writes.

Every body field the SDK's method names becomes its keyword argument; every other field
travels in ``extra_body``, as an SDK user would send it. So a request reaches the upstream as
it came (less the ``cache`` object), and files into the same table as the same call made with
the Python library. ``extra_headers``, ``extra_query``, ``extra_body`` and ``timeout`` are the
SDK's own controls, never a client's: such body fields are sent on as body fields.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import openai
from openai.resources.chat.completions import AsyncCompletions as AsyncChatCompletions
from openai.resources.completions import AsyncCompletions as AsyncLegacyCompletions
from openai.resources.responses import AsyncResponses
from pydantic import BaseModel

from ._errors import RequestError

__all__ = [
    "CHAT",
    "COMPLETIONS",
    "RESPONSES",
    "Endpoint",
    "chat_events",
    "dump",
    "dump_chat_hit",
    "response_events",
    "sdk_kwargs",
]

logger = logging.getLogger("llmcache.proxy")

_SDK_CONTROLS = frozenset({"self", "extra_headers", "extra_query", "extra_body", "timeout"})


@dataclass(frozen=True)
class Endpoint:
    """One endpoint: its metrics name, the SDK method's parameters and the required ones."""

    name: str
    params: frozenset[str]
    required: tuple[str, ...]


def _endpoint(name: str, method: Callable[..., Any], required: tuple[str, ...]) -> Endpoint:
    params = frozenset(inspect.signature(method).parameters) - _SDK_CONTROLS
    return Endpoint(name, params, required)


CHAT = _endpoint("chat.completions", AsyncChatCompletions.create, ("model", "messages"))
RESPONSES = _endpoint("responses", AsyncResponses.create, ("model",))
COMPLETIONS = _endpoint("completions", AsyncLegacyCompletions.create, ("model", "prompt"))


def sdk_kwargs(body: dict[str, Any], endpoint: Endpoint) -> dict[str, Any]:
    """The SDK call's keyword arguments for ``body`` (whose ``cache`` is already taken out)."""
    for name in endpoint.required:
        if name not in body:
            raise RequestError(400, f"Missing required parameter: '{name}'.", param=name)
    kwargs = {k: v for k, v in body.items() if k in endpoint.params}
    extra = {k: v for k, v in body.items() if k not in endpoint.params}
    if extra:
        kwargs["extra_body"] = extra
    return kwargs


def dump(value: BaseModel) -> bytes:
    """What the server sent (the SDK keeps which fields it did), as JSON."""
    return value.model_dump_json(exclude_unset=True, warnings=False).encode()


# Fields OpenAI's server always writes, null or not. A hit is rebuilt from a stored copy of
# every field, nulls included, so its other nulls are dropped: the body has the shape of the
# answer it was made from, not of the SDK's model.
_ALWAYS_WRITTEN = frozenset({"content", "refusal", "logprobs"})


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _without_nulls(v) for k, v in value.items() if v is not None or k in _ALWAYS_WRITTEN
        }
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def dump_chat_hit(completion: BaseModel) -> bytes:
    data = _without_nulls(completion.model_dump(mode="json", warnings=False))
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()


def _stream_error(exc: BaseException) -> dict[str, Any]:
    """What a stream that broke off says in its last event (its status is already sent)."""
    if isinstance(exc, openai.APIStatusError):
        message = f"the upstream failed mid-stream with status {exc.status_code}"
    elif isinstance(exc, openai.APIError):
        message = "the upstream stream broke off"
    else:
        message = "the stream broke off"
    return {"message": message, "type": "server_error", "param": None, "code": "stream_error"}


async def _close(stream: Any) -> None:
    # Shielded: a client that went away cancels the response, and the close is what accounts
    # the call (a streamed miss is paid for even when nobody read its end).
    with anyio.CancelScope(shield=True):
        try:
            await stream.close()
        except Exception:
            logger.warning("could not close a stream", exc_info=True)


async def chat_events(stream: Any) -> AsyncGenerator[bytes, None]:
    """``data: <chunk>`` per chunk, then ``data: [DONE]`` (chat and legacy completions)."""
    try:
        async for chunk in stream:
            yield b"data: " + dump(chunk) + b"\n\n"
        yield b"data: [DONE]\n\n"
    except Exception as exc:
        logger.info("a stream broke off: %s", type(exc).__name__)
        yield b"data: " + json.dumps({"error": _stream_error(exc)}).encode() + b"\n\n"
    finally:
        await _close(stream)


async def response_events(stream: Any) -> AsyncGenerator[bytes, None]:
    """``event: <type>`` and ``data: <event>`` per event, as the Responses API streams."""
    number = -1
    try:
        async for event in stream:
            number = getattr(event, "sequence_number", number + 1)
            kind = str(getattr(event, "type", "message"))
            yield b"event: " + kind.encode() + b"\ndata: " + dump(event) + b"\n\n"
    except Exception as exc:
        logger.info("a stream broke off: %s", type(exc).__name__)
        error = _stream_error(exc)
        event = {"type": "error", "sequence_number": number + 1, **error}
        yield b"event: error\ndata: " + json.dumps(event).encode() + b"\n\n"
    finally:
        await _close(stream)
