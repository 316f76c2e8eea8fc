"""A fake OpenAI-compatible server for the proxy's tests, and ways to serve it.

:class:`FakeUpstream` is a small Starlette app that answers ``/v1/chat/completions`` (whole and
streamed, with ``stream_options.include_usage``), ``/v1/responses`` (whole and streamed events),
``/v1/completions`` and ``/v1/models`` with bodies shaped like OpenAI's, and records every
request it receives (headers and body). It can be slow (``delay``; ``chunk_delay`` between
streamed chunks), fail with a status, or quote the key it was sent in an error, as real servers
do. It is reached in-process through
httpx2's ASGI transport, or over real HTTP from a uvicorn server in a thread
(:func:`serve_in_thread`), which the proxy's subprocess tests use.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx2
import openai
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

UPSTREAM_KEY = "sk-upstream-SENTINEL-7f3a9c21d4e8b6"


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class FakeUpstream:
    """An OpenAI-compatible fake server (see the module's docstring)."""

    delay: float = 0.0
    chunk_delay: float = 0.0
    fail_status: int | None = None
    echo_key_in_errors: bool = False
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    ids: Any = field(default_factory=lambda: itertools.count(1))

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/responses", self._responses, methods=["POST"]),
                Route("/v1/completions", self._completions, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
            ]
        )

    def calls(self, path: str | None = None) -> list[Received]:
        with self.lock:
            return [r for r in self.received if path is None or r.path.endswith(path)]

    # -- answers -----------------------------------------------------------------------------

    @staticmethod
    def answer_to(text: str) -> str:
        return f"answer to: {text}"

    async def _take(self, request: Request) -> tuple[Received, int]:
        body = await request.json()
        got = Received(request.url.path, dict(request.headers), body)
        with self.lock:
            self.received.append(got)
            n = next(self.ids)
        if self.delay:
            await asyncio.sleep(self.delay)
        return got, n

    def _error(self, got: Received) -> Response | None:
        if self.fail_status is None:
            return None
        message = "the fake upstream fails on purpose"
        if self.echo_key_in_errors:
            message += f" (key {got.headers.get('authorization', '')})"
        error = {"message": message, "type": "server_error", "param": None, "code": "fake"}
        return JSONResponse({"error": error}, status_code=self.fail_status)

    async def _chat(self, request: Request) -> Response:
        got, n = await self._take(request)
        if (error := self._error(got)) is not None:
            return error
        messages = got.body.get("messages") or [{}]
        text = self.answer_to(str(messages[-1].get("content", "")))
        completion = chat_completion(n, got.body.get("model", "m"), text)
        if got.body.get("stream") is True:
            usage = bool((got.body.get("stream_options") or {}).get("include_usage"))
            return _sse(chat_chunks(completion, usage=usage), pause=self.chunk_delay)
        return JSONResponse(completion)

    async def _responses(self, request: Request) -> Response:
        got, n = await self._take(request)
        if (error := self._error(got)) is not None:
            return error
        given = got.body.get("input")
        text = self.answer_to(given if isinstance(given, str) else json.dumps(given))
        response = response_body(n, got.body.get("model", "m"), text)
        if got.body.get("stream") is True:
            return _sse(response_events(response), named=True)
        return JSONResponse(response)

    async def _completions(self, request: Request) -> Response:
        got, n = await self._take(request)
        if (error := self._error(got)) is not None:
            return error
        text = self.answer_to(str(got.body.get("prompt", "")))
        body = {
            "id": f"cmpl-fake-{n}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": got.body.get("model", "m"),
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
        }
        if got.body.get("stream") is True:
            pieces = [
                {**body, "choices": [{**body["choices"][0], "text": w, "finish_reason": None}]}
                for w in text.split(" ")
            ]
            pieces[-1]["choices"][0]["finish_reason"] = "stop"
            for piece in pieces:
                piece.pop("usage")
            return _sse(pieces)
        return JSONResponse(body)

    async def _models(self, request: Request) -> Response:
        model = {"id": "fake-model", "object": "model", "created": 0, "owned_by": "fake"}
        return JSONResponse({"object": "list", "data": [model]})


def chat_completion(n: int, model: str, text: str) -> dict[str, Any]:
    """A chat completion shaped as OpenAI's server writes it (its nulls included)."""
    return {
        "id": f"chatcmpl-fake-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": text,
                    "refusal": None,
                    "annotations": [],
                },
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": 20,
            "completion_tokens": 9,
            "total_tokens": 29,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        },
        "service_tier": "default",
        "system_fingerprint": "fp_fake",
    }


def chat_chunks(completion: dict[str, Any], *, usage: bool) -> list[dict[str, Any]]:
    base = {k: completion[k] for k in ("id", "created", "model", "system_fingerprint")}
    base |= {"object": "chat.completion.chunk", "service_tier": "default"}
    if usage:
        base["usage"] = None

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**base, "choices": [choice]}

    text = completion["choices"][0]["message"]["content"]
    chunks = [chunk({"role": "assistant", "content": "", "refusal": None})]
    chunks += [chunk({"content": w + " "}) for w in text.split(" ")]
    chunks.append(chunk({}, "stop"))
    if usage:
        chunks.append({**base, "choices": [], "usage": completion["usage"]})
    return chunks


def response_body(n: int, model: str, text: str) -> dict[str, Any]:
    """A Responses API response as OpenAI writes it (abridged to what the SDK reads)."""
    return {
        "id": f"resp_fake_{n}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "max_output_tokens": None,
        "model": model,
        "output": [
            {
                "type": "message",
                "id": f"msg_fake_{n}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "temperature": 1.0,
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": {
            "input_tokens": 12,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 6,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 18,
        },
        "user": None,
        "metadata": {},
    }


def response_events(response: dict[str, Any]) -> list[dict[str, Any]]:
    numbers = itertools.count()
    item = response["output"][0]
    text = item["content"][0]["text"]
    where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
    begun = {**response, "status": "in_progress", "output": [], "usage": None}
    events = [
        {"type": "response.created", "response": begun},
        {"type": "response.in_progress", "response": begun},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**item, "status": "in_progress", "content": []},
        },
        {
            "type": "response.content_part.added",
            **where,
            "part": {"type": "output_text", "text": "", "annotations": []},
        },
    ]
    events += [
        {"type": "response.output_text.delta", **where, "delta": w + " ", "logprobs": []}
        for w in text.split(" ")
    ]
    events += [
        {"type": "response.output_text.done", **where, "text": text, "logprobs": []},
        {"type": "response.content_part.done", **where, "part": item["content"][0]},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": response},
    ]
    return [{**e, "sequence_number": next(numbers)} for e in events]


def _sse(
    items: list[dict[str, Any]], *, named: bool = False, pause: float = 0.0
) -> StreamingResponse:
    async def body() -> AsyncIterator[bytes]:
        for item in items:
            if pause:
                await asyncio.sleep(pause)
            event = f"event: {item['type']}\n" if named else ""
            yield f"{event}data: {json.dumps(item)}\n\n".encode()
        if not named:
            yield b"data: [DONE]\n\n"

    return StreamingResponse(body(), media_type="text/event-stream")


def in_process_client(fake: FakeUpstream, *, key: str = UPSTREAM_KEY) -> openai.AsyncOpenAI:
    """An ``AsyncOpenAI`` whose requests reach ``fake`` in-process (no socket, no retries)."""
    transport = httpx2.ASGITransport(app=fake.app())
    return openai.AsyncOpenAI(
        base_url="http://upstream.test/v1",
        api_key=key,
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=transport),
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def serve_in_thread(app: Any, port: int | None = None) -> Iterator[str]:
    """Serve an ASGI app on 127.0.0.1 from a thread; yields its base URL (no trailing /)."""
    port = port or free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", ws="none")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the server in a thread did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
