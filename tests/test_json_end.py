"""The local runtime's transport that ends schema-constrained answers where their JSON ends.

Against a mock server: which requests get the end-token bias, and that everything else --
unconstrained requests, scalar schemas, a caller's own bias, a server that cannot say its end
token -- goes out byte for byte as the client built it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
import pytest

from llmcache.llm._json_end import (
    END_BIAS,
    AsyncJSONEndTransport,
    JSONEndTransport,
    ends_at_bracket,
)

OBJECT = {"type": "object", "properties": {"score": {"type": "integer"}}}
EOS_ID = 2


class FakeServer:
    """Answers /props and /tokenize like llama-server, and records every completion body."""

    def __init__(self, eos_token: str | None = "<|im_end|>") -> None:
        self.eos_token = eos_token
        self.bodies: list[dict[str, Any]] = []
        self.raw: list[bytes] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.raw.append(request.content)
        body = json.loads(request.content)
        self.bodies.append(body)
        assert int(request.headers["content-length"]) == len(request.content)
        return httpx2.Response(200, json={"ok": True})


def _lookup(server: FakeServer, calls: list[str]) -> Any:
    def call(self: Any, path: str, body: Any) -> dict[str, Any]:
        calls.append(path)
        if path.startswith("/props"):
            return {} if server.eos_token is None else {"eos_token": server.eos_token}
        assert body == {"model": "m", "content": server.eos_token, "parse_special": True}
        return {"tokens": [{"id": EOS_ID, "piece": server.eos_token}]}

    return call


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> tuple[FakeServer, list[str], httpx2.Client]:
    server = FakeServer()
    calls: list[str] = []
    monkeypatch.setattr("llmcache.llm._json_end._EndTokens._call", _lookup(server, calls))
    transport = JSONEndTransport("http://local", inner=httpx2.MockTransport(server))
    return server, calls, httpx2.Client(transport=transport, base_url="http://local/v1")


def _schema_format(schema: Any) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


def test_object_schemas_get_the_end_bias_once_per_model(
    fake: tuple[FakeServer, list[str], httpx2.Client],
) -> None:
    server, calls, client = fake
    for _ in range(3):
        client.post(
            "/chat/completions",
            json={"model": "m", "messages": [], "response_format": _schema_format(OBJECT)},
        )
    assert [b["logit_bias"] for b in server.bodies] == [{str(EOS_ID): END_BIAS}] * 3
    assert len(calls) == 2  # /props and /tokenize, the first time only


@pytest.mark.parametrize(
    "body",
    [
        {"model": "m", "messages": []},  # unconstrained: a bias would end it at once
        {"model": "m", "response_format": _schema_format({"type": "integer"})},  # "1" of "10"
        {"model": "m", "response_format": {"type": "text"}},
        {"model": "m", "response_format": _schema_format(OBJECT), "logit_bias": {"2": -5}},
        {"model": "m", "response_format": _schema_format(OBJECT), "logit_bias": [[2, 1.0]]},
    ],
)
def test_other_requests_go_out_unchanged(
    fake: tuple[FakeServer, list[str], httpx2.Client], body: dict[str, Any]
) -> None:
    server, _, client = fake
    sent = json.dumps(body).encode()
    client.post("/chat/completions", content=sent, headers={"content-type": "application/json"})
    assert server.raw == [sent]


def test_a_callers_other_biases_are_kept(
    fake: tuple[FakeServer, list[str], httpx2.Client],
) -> None:
    server, _, client = fake
    client.post(
        "/chat/completions",
        json={"model": "m", "response_format": _schema_format(OBJECT), "logit_bias": {"7": 3}},
    )
    assert server.bodies[0]["logit_bias"] == {"7": 3, str(EOS_ID): END_BIAS}


def test_a_server_without_an_end_token_gets_requests_unchanged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = FakeServer(eos_token=None)
    monkeypatch.setattr("llmcache.llm._json_end._EndTokens._call", _lookup(server, []))
    client = httpx2.Client(
        transport=JSONEndTransport("http://local", inner=httpx2.MockTransport(server)),
        base_url="http://local/v1",
    )
    body = {"model": "m", "response_format": _schema_format(OBJECT)}
    client.post("/chat/completions", json=body)
    assert server.bodies == [body]


def test_an_unreachable_lookup_only_loses_the_optimisation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(self: Any, path: str, body: Any) -> dict[str, Any]:
        raise OSError("connection refused")

    server = FakeServer()
    monkeypatch.setattr("llmcache.llm._json_end._EndTokens._call", refuse)
    client = httpx2.Client(
        transport=JSONEndTransport("http://local", inner=httpx2.MockTransport(server)),
        base_url="http://local/v1",
    )
    body = {"model": "m", "response_format": _schema_format(OBJECT)}
    assert client.post("/chat/completions", json=body).status_code == 200
    assert server.bodies == [body]


def test_the_async_twin_adds_the_same_bias(monkeypatch: pytest.MonkeyPatch) -> None:
    server = FakeServer()
    monkeypatch.setattr("llmcache.llm._json_end._EndTokens._call", _lookup(server, []))
    transport = AsyncJSONEndTransport("http://local", inner=httpx2.MockTransport(server))

    async def main() -> None:
        async with httpx2.AsyncClient(transport=transport, base_url="http://local/v1") as client:
            await client.post(
                "/chat/completions",
                json={"model": "m", "response_format": _schema_format(OBJECT)},
            )

    asyncio.run(main())
    assert server.bodies[0]["logit_bias"] == {str(EOS_ID): END_BIAS}


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        (OBJECT, True),
        ({"type": "array", "items": {"type": "string"}}, True),
        ({"anyOf": [OBJECT, {"type": "array"}]}, True),
        ({"anyOf": [OBJECT, {"type": "string"}]}, False),
        ({"type": ["object", "null"]}, False),
        ({"properties": {"a": {}}}, True),
        ({"type": "string", "enum": ["a", "ab"]}, False),
        (None, False),
        ({}, False),
    ],
)
def test_only_values_that_end_at_a_bracket_qualify(schema: Any, expected: bool) -> None:
    assert ends_at_bracket(schema) is expected
