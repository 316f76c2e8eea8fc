"""The local runtime's transport that ends schema-constrained answers where their JSON ends and
keeps them on one line.

Against a mock server: which requests get the end-token bias and the layout-whitespace bias,
and that everything else -- unconstrained requests, a caller's own bias, a server that cannot
say its tokens -- goes out byte for byte as the client built it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
import pytest

from llmcache.llm._json_end import (
    _WHITESPACE,
    END_BIAS,
    WHITESPACE_BIAS,
    AsyncJSONEndTransport,
    JSONEndTransport,
    ends_at_bracket,
)

OBJECT = {"type": "object", "properties": {"score": {"type": "integer"}}}
EOS_ID = 2
# The whitespace the fake tokenizer holds as single tokens (SmolLM2's ids); anything else it
# splits in two. A single space is one token too, and must never be biased.
SINGLE = {"\n": 198, "\n\n": 1116, "\n    ": 2367, "  ": 256, " ": 216}
LAYOUT = {str(i): WHITESPACE_BIAS for t, i in SINGLE.items() if t != " "}
BOTH = {**LAYOUT, str(EOS_ID): END_BIAS}


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
        assert body["model"] == "m"
        if body["parse_special"]:
            assert body["content"] == server.eos_token
            return {"tokens": [{"id": EOS_ID, "piece": server.eos_token}]}
        content = body["content"]
        if content in SINGLE:
            return {"tokens": [{"id": SINGLE[content], "piece": content}]}
        return {"tokens": [5, 6]}

    return call


def test_layout_whitespace_is_asked_for_and_a_single_space_is_not() -> None:
    assert " " not in _WHITESPACE
    assert {"\n", "\n\n", "\n    ", "  ", "\t"} <= set(_WHITESPACE)
    assert all(t.strip() == "" for t in _WHITESPACE)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> tuple[FakeServer, list[str], httpx2.Client]:
    server = FakeServer()
    calls: list[str] = []
    monkeypatch.setattr("llmcache.llm._json_end._ModelTokens._call", _lookup(server, calls))
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
    assert [b["logit_bias"] for b in server.bodies] == [BOTH] * 3
    # /props, the end token and each whitespace candidate, the first time only.
    assert len(calls) == 2 + len(_WHITESPACE)


def test_scalar_schemas_are_kept_compact_but_not_ended(
    fake: tuple[FakeServer, list[str], httpx2.Client],
) -> None:
    server, _, client = fake
    body = {"model": "m", "response_format": _schema_format({"type": "integer"})}  # "1" of "10"
    client.post("/chat/completions", json=body)
    assert server.bodies[0]["logit_bias"] == LAYOUT


def test_a_callers_own_bias_for_a_token_wins(
    fake: tuple[FakeServer, list[str], httpx2.Client],
) -> None:
    server, _, client = fake
    bias = {str(EOS_ID): -5, "198": 1}
    client.post(
        "/chat/completions",
        json={"model": "m", "response_format": _schema_format(OBJECT), "logit_bias": bias},
    )
    assert server.bodies[0]["logit_bias"] == {**BOTH, **bias}


def test_the_layout_bias_can_be_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    server = FakeServer()
    monkeypatch.setattr("llmcache.llm._json_end._ModelTokens._call", _lookup(server, []))
    transport = JSONEndTransport(
        "http://local", inner=httpx2.MockTransport(server), whitespace=None
    )
    client = httpx2.Client(transport=transport, base_url="http://local/v1")
    client.post(
        "/chat/completions",
        json={"model": "m", "messages": [], "response_format": _schema_format(OBJECT)},
    )
    assert server.bodies[0]["logit_bias"] == {str(EOS_ID): END_BIAS}


@pytest.mark.parametrize(
    "body",
    [
        {"model": "m", "messages": []},  # unconstrained: a bias would end it at once
        {"model": "m", "response_format": {"type": "text"}},
        {"model": "m", "response_format": _schema_format(OBJECT), "logit_bias": [[2, 1.0]]},
        {"model": "m", "response_format": _schema_format(OBJECT), "logit_bias": BOTH},
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
    assert server.bodies[0]["logit_bias"] == {"7": 3, **BOTH}


def test_a_server_without_an_end_token_still_gets_compact_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = FakeServer(eos_token=None)
    monkeypatch.setattr("llmcache.llm._json_end._ModelTokens._call", _lookup(server, []))
    client = httpx2.Client(
        transport=JSONEndTransport("http://local", inner=httpx2.MockTransport(server)),
        base_url="http://local/v1",
    )
    body = {"model": "m", "response_format": _schema_format(OBJECT)}
    client.post("/chat/completions", json=body)
    assert server.bodies == [{**body, "logit_bias": LAYOUT}]


def test_an_unreachable_lookup_only_loses_the_optimisation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(self: Any, path: str, body: Any) -> dict[str, Any]:
        raise OSError("connection refused")

    server = FakeServer()
    monkeypatch.setattr("llmcache.llm._json_end._ModelTokens._call", refuse)
    client = httpx2.Client(
        transport=JSONEndTransport("http://local", inner=httpx2.MockTransport(server)),
        base_url="http://local/v1",
    )
    body = {"model": "m", "response_format": _schema_format(OBJECT)}
    assert client.post("/chat/completions", json=body).status_code == 200
    assert server.bodies == [body]


def test_the_async_twin_adds_the_same_bias(monkeypatch: pytest.MonkeyPatch) -> None:
    server = FakeServer()
    monkeypatch.setattr("llmcache.llm._json_end._ModelTokens._call", _lookup(server, []))
    transport = AsyncJSONEndTransport("http://local", inner=httpx2.MockTransport(server))

    async def main() -> None:
        async with httpx2.AsyncClient(transport=transport, base_url="http://local/v1") as client:
            await client.post(
                "/chat/completions",
                json={"model": "m", "response_format": _schema_format(OBJECT)},
            )

    asyncio.run(main())
    assert server.bodies[0]["logit_bias"] == BOTH


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
