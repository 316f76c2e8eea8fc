"""``python -m llmcache proxy``: the OpenAI-compatible caching proxy, end to end.

In-process tests drive the ASGI app with the official openai client (through Starlette's
TestClient, or a uvicorn server in a thread for the async client) in front of a fake upstream
(``proxy_support.FakeUpstream``) reached in-process; the subprocess tests start the real command
on 127.0.0.1 in front of the fake served over HTTP: the upstream's key kept secret, a clean
SIGTERM, the load test, and the example client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from proxy_support import (
    UPSTREAM_KEY,
    FakeUpstream,
    free_port,
    in_process_client,
    serve_in_thread,
)
from starlette.applications import Starlette
from starlette.testclient import TestClient

from llmcache import (
    CacheConfig,
    CacheOptions,
    CategoryPolicy,
    Mode,
    PromptTemplate,
    SemanticCache,
)
from llmcache.errors import ConfigurationError
from llmcache.proxy import ProxyKey, ProxySettings, create_app
from llmcache.proxy._settings import parse_keys
from llmcache.testing import HashEmbedder

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-proxy-operator-0001"
KEY_A = "sk-proxy-tenant-a-0001"
KEY_B = "sk-proxy-tenant-b-0001"
KEY_LIAM = "sk-proxy-liam-00000001"
AUTH = {"Authorization": f"Bearer {KEY}"}
MSGS = [
    {"role": "system", "content": "You rate how important a memory is."},
    {"role": "user", "content": "Memory: Tree in Victoria Park is Idle. Rate 1-10."},
]
CACHE = {"category": "importance", "agent": "Liam Oliver", "keywords": ["tree idle"]}
KEYS = (
    ProxyKey.parse(KEY),
    ProxyKey.parse(f"{KEY_A}:tenant-a"),
    ProxyKey.parse(f"{KEY_B}:tenant-b"),
    ProxyKey.parse(f"{KEY_LIAM}:town:Liam Oliver"),
)


def make_app(
    tmp_path: Path, fake: FakeUpstream | None = None, **settings: Any
) -> tuple[Starlette, FakeUpstream]:
    fake = fake or FakeUpstream()
    config = settings.pop("config", CacheConfig())
    cache = SemanticCache(tmp_path / "cache", embedder=HashEmbedder(dim=64), config=config)
    proxy_settings = ProxySettings(**{"keys": KEYS, **settings})
    return create_app(proxy_settings, upstream=in_process_client(fake), cache=cache), fake


@contextlib.contextmanager
def proxied(tmp_path: Path, **settings: Any) -> Iterator[tuple[TestClient, FakeUpstream]]:
    app, fake = make_app(tmp_path, **settings)
    with TestClient(app) as client:
        yield client, fake


def sdk(http: TestClient, key: str = KEY) -> openai.OpenAI:
    """The official client, pointed at the proxy in-process."""
    return openai.OpenAI(base_url="http://testserver/v1", api_key=key, http_client=http)


def outcome(headers: Any) -> str:
    return str(headers.get("x-llmcache"))


def chat(http: TestClient, cache: Any = None, key: str = KEY, **body: Any) -> httpx2.Response:
    payload: dict[str, Any] = {"model": "gpt-4o-mini", "messages": MSGS, **body}
    if cache is not None:
        payload["cache"] = cache
    return http.post(
        "/v1/chat/completions", json=payload, headers={"Authorization": f"Bearer {key}"}
    )


def without(data: dict[str, Any], *names: str) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k not in names}


# -- the official client, in-process -------------------------------------------------------------


def test_the_openai_client_gets_a_miss_then_a_hit_of_the_servers_own_shape(
    tmp_path: Path,
) -> None:
    with proxied(tmp_path) as (http, fake):
        client = sdk(http)
        create = client.chat.completions.with_raw_response.create
        first = create(model="gpt-4o-mini", messages=MSGS, extra_body={"cache": CACHE})
        second = create(model="gpt-4o-mini", messages=MSGS, extra_body={"cache": CACHE})
        assert (outcome(first.headers), outcome(second.headers)) == ("miss", "hit")
        assert second.headers["x-llmcache-similarity"] == "1.0000"
        assert first.headers["x-llmcache-table"] == second.headers["x-llmcache-table"]
        assert first.parse().choices[0].message.content == "answer to: " + MSGS[-1]["content"]
        assert second.parse().choices[0].message.content == first.parse().choices[0].message.content
        # The miss is the upstream's body as it sent it; the hit has its shape, with its own
        # id, time and usage (a hit costs no tokens).
        (sent,) = fake.calls("/chat/completions")
        miss, hit = json.loads(first.content), json.loads(second.content)
        assert miss["id"] == "chatcmpl-fake-1" and miss["system_fingerprint"] == "fp_fake"
        assert without(hit, "id", "created", "usage") == without(miss, "id", "created", "usage")
        assert hit["id"].startswith("chatcmpl-llmcache-")
        # The cache object never reached the upstream, nor did the proxy's key.
        assert "cache" not in sent.body and sent.body["messages"] == MSGS
        assert sent.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"


def test_a_stream_with_include_usage_is_passed_through_then_replayed(tmp_path: Path) -> None:
    with proxied(tmp_path) as (http, fake):
        client = sdk(http)

        def streamed() -> tuple[str, list[Any], str]:
            raw = client.chat.completions.with_raw_response.create(
                model="gpt-4o-mini",
                messages=MSGS,
                stream=True,
                stream_options={"include_usage": True},
                extra_body={"cache": CACHE},
            )
            chunks = list(raw.parse())
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            return outcome(raw.headers), chunks, text

        first, miss_chunks, miss_text = streamed()
        second, hit_chunks, hit_text = streamed()
        assert (first, second) == ("miss", "hit")
        assert miss_text.strip() == hit_text.strip() == "answer to: " + MSGS[-1]["content"]
        for chunks in (miss_chunks, hit_chunks):
            assert chunks[-1].choices == [] and chunks[-1].usage is not None
            assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
        assert len(fake.calls("/chat/completions")) == 1
        # The wire format: one data line per chunk, and the end marker.
        raw = chat(http, CACHE, stream=True)
        assert raw.headers["content-type"].startswith("text/event-stream")
        assert raw.text.endswith("data: [DONE]\n\n")
        assert all(line.startswith("data: ") for line in raw.text.split("\n\n") if line)


def test_responses_whole_and_streamed_miss_then_hit(tmp_path: Path) -> None:
    with proxied(tmp_path) as (http, fake):
        client = sdk(http)
        cache = {"category": "greeting", "agent": "Isabella"}
        create = client.responses.with_raw_response.create
        first = create(model="gpt-4o-mini", input="Good morning!", extra_body={"cache": cache})
        second = create(model="gpt-4o-mini", input="Good morning!", extra_body={"cache": cache})
        assert (outcome(first.headers), outcome(second.headers)) == ("miss", "hit")
        assert second.parse().output_text == first.parse().output_text == "answer to: Good morning!"
        stream = create(
            model="gpt-4o-mini", input="Good morning!", stream=True, extra_body={"cache": cache}
        )
        assert outcome(stream.headers) == "hit"
        events = list(stream.parse())
        assert events[0].type == "response.created" and events[-1].type == "response.completed"
        assert events[-1].response.output_text == "answer to: Good morning!"
        raw = http.post(
            "/v1/responses",
            json={"model": "m", "input": "Hi", "stream": True, "cache": cache},
            headers=AUTH,
        )
        assert outcome(raw.headers) == "miss"
        # As OpenAI streams them: a named event before each data line, no end marker.
        blocks = [b for b in raw.text.split("\n\n") if b]
        assert all(b.startswith("event: response.") and "\ndata: {" in b for b in blocks)
        assert len(fake.calls("/responses")) == 2


def test_legacy_completions_are_cached_like_chat(tmp_path: Path) -> None:
    with proxied(tmp_path) as (http, fake):
        client = sdk(http)
        seen = []
        for _ in range(2):
            raw = client.completions.with_raw_response.create(
                model="gpt-3.5-turbo-instruct", prompt="Say hi", extra_body={"cache": CACHE}
            )
            seen.append(outcome(raw.headers))
            assert raw.parse().choices[0].text == "answer to: Say hi"
        assert seen == ["miss", "hit"]
        assert len(fake.calls("/completions")) == 1
        # Without options: passed through, as chat is.
        plain = client.completions.with_raw_response.create(model="m", prompt="Say hi")
        assert outcome(plain.headers) == "pass"
        # Several prompts cannot be one stored answer: sent as they are, the reason said.
        several = client.completions.with_raw_response.create(
            model="m", prompt=["Say hi", "Say bye"], extra_body={"cache": CACHE}
        )
        assert outcome(several.headers) == "bypass"
        assert "prompt is not one text" in several.headers["x-llmcache-reason"]
        # Streams: a miss passed through and stored, then the hit replayed as chunks.
        streamed = {**CACHE, "keywords": ["say hi there"]}
        texts, outcomes = [], []
        for _ in range(2):
            with client.completions.with_streaming_response.create(
                model="m", prompt="Say hi there", stream=True, extra_body={"cache": streamed}
            ) as raw_stream:
                outcomes.append(outcome(raw_stream.headers))
                texts.append("".join(c.choices[0].text for c in raw_stream.parse() if c.choices))
        assert outcomes == ["miss", "hit"]
        assert texts == ["answer to: Say hi there".replace(" ", "")] * 2  # the fake streams words
        sent = fake.calls("/completions")
        assert len(sent) == 4 and all("cache" not in r.body for r in sent)


def test_models_are_the_upstreams(tmp_path: Path) -> None:
    with proxied(tmp_path) as (http, _):
        assert [m.id for m in sdk(http).models.list()] == ["fake-model"]


def test_the_async_client_over_real_http(tmp_path: Path) -> None:
    app, fake = make_app(tmp_path)

    async def run(base: str) -> list[str]:
        client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=KEY, max_retries=0)
        outcomes = []
        for _ in range(2):
            raw = await client.chat.completions.with_raw_response.create(
                model="m", messages=MSGS, extra_body={"cache": CACHE}
            )
            outcomes.append(outcome(raw.headers))
        stream = await client.chat.completions.create(
            model="m", messages=MSGS, stream=True, extra_body={"cache": CACHE}
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        assert text == "answer to: " + MSGS[-1]["content"]
        response = await client.responses.create(
            model="m", input="Hi", extra_body={"cache": {"category": "x"}}
        )
        assert response.output_text == "answer to: Hi"
        await client.close()
        return outcomes

    with serve_in_thread(app) as base:
        assert asyncio.run(run(base)) == ["miss", "hit"]
    assert len(fake.calls("/chat/completions")) == 1


def test_a_client_that_leaves_mid_stream_is_accounted_and_its_answer_not_stored(
    tmp_path: Path,
) -> None:
    # Over real HTTP at both ends: the in-process transport would hand the proxy the upstream's
    # whole stream at once.
    fake = FakeUpstream(chunk_delay=0.2)
    with contextlib.ExitStack() as stack:
        upstream = stack.enter_context(serve_in_thread(fake.app()))
        client = openai.AsyncOpenAI(base_url=f"{upstream}/v1", api_key=UPSTREAM_KEY)
        cache = SemanticCache(tmp_path / "cache", embedder=HashEmbedder(dim=64))
        app = create_app(ProxySettings(keys=KEYS), upstream=client, cache=cache)
        base = stack.enter_context(serve_in_thread(app))
        body = {"model": "m", "messages": MSGS, "cache": CACHE, "stream": True}
        with httpx2.stream(
            "POST", f"{base}/v1/chat/completions", json=body, headers=AUTH, timeout=30
        ) as reply:
            assert outcome(reply.headers) == "miss"
            next(reply.iter_lines())  # the first chunk, then the client goes away
        deadline = time.monotonic() + 10
        category = (("category", "importance"),)
        while True:  # accounted once the proxy notices the client has gone
            samples = _samples(httpx2.get(f"{base}/metrics", headers=AUTH).text)
            if samples.get(("llmcache_misses_total", category)) == 1:
                break
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert samples[("llmcache_tokens_spent_total", category)] > 0  # its prompt was paid
        assert samples[("llmcache_entries", ())] == 0  # and its answer never stored
    assert len(fake.calls()) == 1


# -- options on the wire -------------------------------------------------------------------------


def test_a_request_without_options_passes_straight_through(tmp_path: Path) -> None:
    with proxied(tmp_path) as (http, fake):
        for _ in range(2):
            assert outcome(chat(http).headers) == "pass"
        assert len(fake.calls()) == 2
        assert http.get("/metrics", headers=AUTH).text.count('outcome="pass"') >= 1


def test_headers_carry_the_same_options_as_the_body(tmp_path: Path) -> None:
    with proxied(tmp_path) as (http, fake):
        headers = {
            **AUTH,
            "X-LLMCache-Category": "importance",
            "X-LLMCache-Agent": "Liam%20Oliver",
            "X-LLMCache-Keywords": "tree%20idle",
        }
        body = {"model": "gpt-4o-mini", "messages": MSGS}
        first = http.post("/v1/chat/completions", json=body, headers=headers)
        # The same table, asked through the body.
        second = chat(http, CACHE)
        assert (outcome(first.headers), outcome(second.headers)) == ("miss", "hit")
        assert first.headers["x-llmcache-table"] == second.headers["x-llmcache-table"]
        # Keywords as a JSON array; the body wins over a header.
        third = http.post(
            "/v1/chat/completions",
            json={**body, "cache": {"agent": "Liam Oliver"}},
            headers={
                **headers,
                "X-LLMCache-Agent": "Ethan",
                "X-LLMCache-Keywords": '["tree idle"]',
            },
        )
        assert outcome(third.headers) == "hit"
        assert len(fake.calls()) == 1
        unknown = http.post(
            "/v1/chat/completions", json=body, headers={**AUTH, "X-LLMCache-Colour": "red"}
        )
        assert unknown.status_code == 400 and "X-LLMCache-Colour" in unknown.text


def test_no_cache_and_no_store_mean_what_litellm_users_expect(tmp_path: Path) -> None:
    with proxied(tmp_path) as (http, fake):
        # no-cache: not served from the cache, but stored (collect).
        assert outcome(chat(http, {**CACHE, "no-cache": True}).headers) == "collect"
        assert outcome(chat(http, {**CACHE, "no-cache": True}).headers) == "collect"
        assert outcome(chat(http, CACHE).headers) == "hit"
        assert len(fake.calls()) == 2
        # no-store: served from the cache; a miss is not stored.
        other = {**CACHE, "keywords": ["bakery open"]}
        assert outcome(chat(http, {**other, "no-store": True}).headers) == "miss"
        assert outcome(chat(http, {**other, "no-store": True}).headers) == "miss"
        assert outcome(chat(http, other).headers) == "miss"  # stored now
        assert outcome(chat(http, {**other, "no-store": True}).headers) == "hit"
        # Both: the cache is off for the call (counted as a bypass, never stored).
        both = {**other, "keywords": ["x"], "no-cache": True, "no-store": True}
        assert outcome(chat(http, both).headers) == "bypass"
        assert len(fake.calls()) == 6
        headers = {**AUTH, "X-LLMCache-Category": "importance", "X-LLMCache-No-Cache": "yes"}
        body = {"model": "gpt-4o-mini", "messages": MSGS}
        assert outcome(http.post("/v1/chat/completions", json=body, headers=headers).headers) == (
            "collect"
        )


def test_options_the_cache_cannot_keep_are_refused(tmp_path: Path) -> None:
    with proxied(tmp_path) as (http, fake):
        for name in ("ttl", "s-maxage"):
            refused = chat(http, {**CACHE, name: 300})
            assert refused.status_code == 400
            error = refused.json()["error"]
            assert error["code"] == "unsupported_cache_option" and error["param"] == f"cache.{name}"
            assert "--ttl-seconds" in error["message"]
        unknown = chat(http, {**CACHE, "colour": "red"})
        assert unknown.status_code == 400
        assert "valid options are" in unknown.json()["error"]["message"]
        assert chat(http, {**CACHE, "mode": "sometimes"}).status_code == 400
        assert chat(http, {**CACHE, "threshold": 2}).status_code == 400
        assert chat(http, "importance").status_code == 400  # not an object
        contradiction = chat(http, {**CACHE, "mode": "serve", "no-cache": True})
        assert contradiction.status_code == 400
        assert fake.calls() == []


def test_n_above_one_bypasses_the_cache_and_says_why(tmp_path: Path) -> None:
    with proxied(tmp_path) as (http, fake):
        reply = chat(http, CACHE, n=2)
        assert outcome(reply.headers) == "bypass" and "n > 1" in reply.headers["x-llmcache-reason"]
        assert fake.calls()[0].body["n"] == 2


def test_unknown_fields_travel_in_the_body_and_sdk_controls_are_not_a_clients(
    tmp_path: Path,
) -> None:
    with proxied(tmp_path) as (http, fake):
        chat(http, CACHE, top_k=5, extra_headers={"Authorization": "Bearer stolen"})
        (sent,) = fake.calls()
        assert sent.body["top_k"] == 5
        # A body field named like the SDK's own controls is sent as a body field, never as a
        # header the client chose.
        assert sent.body["extra_headers"] == {"Authorization": "Bearer stolen"}
        assert sent.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
        # The parameters key the table: without top_k it is another table.
        assert outcome(chat(http, CACHE).headers) == "miss"


# -- keys and tenants ----------------------------------------------------------------------------


def test_a_tenant_is_never_served_another_tenants_answers(tmp_path: Path) -> None:
    with proxied(tmp_path) as (http, fake):
        a1, b1 = chat(http, CACHE, key=KEY_A), chat(http, CACHE, key=KEY_B)
        a2, b2 = chat(http, CACHE, key=KEY_A), chat(http, CACHE, key=KEY_B)
        assert [outcome(r.headers) for r in (a1, b1, a2, b2)] == ["miss", "miss", "hit", "hit"]
        assert a1.headers["x-llmcache-table"] != b1.headers["x-llmcache-table"]
        assert a2.headers["x-llmcache-table"] == a1.headers["x-llmcache-table"]
        # A tenant naming another namespace (LiteLLM's namespace option) is refused.
        denied = chat(http, {**CACHE, "namespace": "tenant-b"}, key=KEY_A)
        assert denied.status_code == 403 and denied.json()["error"]["code"] == "permission_denied"
        assert chat(http, {**CACHE, "namespace": "tenant-a"}, key=KEY_A).status_code == 200
        # A category cannot climb out of its namespace either.
        forged = chat(http, {**CACHE, "category": "tenant-b/importance"}, key=KEY_A)
        assert outcome(forged.headers) == "miss"
        # The operator's key reaches any namespace, and only it reads the metrics.
        operator = chat(http, {**CACHE, "namespace": "tenant-b"})
        assert outcome(operator.headers) == "hit"
        assert operator.headers["x-llmcache-table"] == b1.headers["x-llmcache-table"]
        assert http.get("/metrics", headers={"Authorization": f"Bearer {KEY_A}"}).status_code == 403
        assert len(fake.calls()) == 3


def test_a_key_bound_to_an_agent_reaches_only_that_agents_tables(tmp_path: Path) -> None:
    with proxied(tmp_path) as (http, _):
        own = chat(http, {"category": "importance", "keywords": ["tree idle"]}, key=KEY_LIAM)
        same = chat(http, CACHE, key=KEY_LIAM)  # names its own agent: allowed
        assert (outcome(own.headers), outcome(same.headers)) == ("miss", "hit")
        other = chat(http, {**CACHE, "agent": "Ethan"}, key=KEY_LIAM)
        assert other.status_code == 403 and "agent" in other.json()["error"]["message"]
        # Filed under its namespace: the operator asking without it is another table.
        assert outcome(chat(http, CACHE).headers) == "miss"


def test_keys_are_checked_and_never_echoed(tmp_path: Path) -> None:
    with proxied(tmp_path) as (http, fake):
        body = {"model": "m", "messages": MSGS}
        missing = http.post("/v1/chat/completions", json=body)
        wrong = http.post(
            "/v1/chat/completions", json=body, headers={"Authorization": "Bearer sk-guess-1234"}
        )
        for reply in (missing, wrong):
            assert reply.status_code == 401
            assert set(reply.json()["error"]) == {"message", "type", "param", "code"}
            assert reply.json()["error"]["code"] == "invalid_api_key"
        assert "sk-guess" not in wrong.text
        assert http.get("/v1/models").status_code == 401
        assert http.get("/metrics").status_code == 401
        assert http.get("/health").json() == {"status": "ok"}  # liveness needs no key
        assert fake.calls() == []


def test_settings_refuse_what_cannot_be_safe() -> None:
    with pytest.raises(ValueError, match="at least one key"):
        ProxySettings()
    with pytest.raises(ValueError, match="loopback"):
        ProxySettings(no_auth=True, host="0.0.0.0")
    assert ProxySettings(no_auth=True).no_auth
    with pytest.raises(ValueError, match="printable"):
        ProxyKey.parse("short")
    with pytest.raises(ValueError, match="namespace"):
        ProxyKey.parse("sk-long-enough:a/b")
    key = ProxyKey.parse("sk-long-enough:ns:Liam Oliver")
    assert (key.namespace, key.agent, key.bound) == ("ns", "Liam Oliver", True)
    assert "sk-long-enough" not in repr(key) and "sk-long-enough" not in key.model_dump_json()
    with pytest.raises(ConfigurationError, match="twice"):
        ProxySettings.build(keys=(key, key))


def test_keys_come_from_a_file_or_the_environment_one_a_line_or_comma_separated() -> None:
    keys = parse_keys(
        "# the town's keys\nsk-proxy-0001:town\n\nsk-proxy-0002::Liam Oliver, sk-0003xyz"
    )
    assert [(k.namespace, k.agent) for k in keys] == [
        ("town", None),
        (None, "Liam Oliver"),
        (None, None),
    ]
    assert keys[2].key.get_secret_value() == "sk-0003xyz"


def test_a_page_of_an_allowed_origin_may_call_from_a_browser(tmp_path: Path) -> None:
    origin = "https://game.example"
    with proxied(tmp_path, cors_origins=(origin,)) as (http, _):
        asked = http.options(
            "/v1/chat/completions",
            headers={
                "Origin": origin,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type,x-llmcache-category",
            },
        )
        assert asked.status_code == 200
        assert asked.headers["access-control-allow-origin"] == origin
        reply = http.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": MSGS, "cache": CACHE},
            headers={**AUTH, "Origin": origin},
        )
        assert "x-llmcache" in reply.headers["access-control-expose-headers"]
        other = http.options(
            "/v1/chat/completions",
            headers={
                "Origin": "https://elsewhere.example",
                "Access-Control-Request-Method": "POST",
            },
        )
        assert "access-control-allow-origin" not in other.headers
    with proxied(tmp_path / "closed") as (http, _):  # no origins: no browser page may call
        assert http.options("/v1/chat/completions").status_code == 405


# -- errors --------------------------------------------------------------------------------------


def test_bad_requests_get_openai_style_errors(tmp_path: Path) -> None:
    with proxied(tmp_path, max_body_bytes=4096) as (http, fake):

        def error(reply: httpx2.Response, status: int) -> dict[str, Any]:
            assert reply.status_code == status, reply.text
            body: dict[str, Any] = reply.json()["error"]
            assert set(body) == {"message", "type", "param", "code"}
            return body

        post = http.post
        error(post("/v1/chat/completions", content=b'{"model": ', headers=AUTH), 400)
        error(post("/v1/chat/completions", content=b"[1, 2]", headers=AUTH), 400)
        missing = error(post("/v1/chat/completions", json={"model": "m"}, headers=AUTH), 400)
        assert missing["param"] == "messages"
        big = {"model": "m", "messages": [{"role": "user", "content": "x" * 5000}]}
        assert error(post("/v1/chat/completions", json=big, headers=AUTH), 413)["code"] == (
            "request_too_large"
        )

        def chunked() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
            yield json.dumps(big).encode()

        error(post("/v1/chat/completions", content=chunked(), headers=AUTH), 413)
        assert "/v1/nowhere" in error(post("/v1/nowhere", json={}, headers=AUTH), 404)["message"]
        error(http.get("/v1/chat/completions", headers=AUTH), 405)
        assert fake.calls() == []


def test_upstream_errors_pass_through_with_their_status(tmp_path: Path) -> None:
    for status in (400, 429, 500):
        fake = FakeUpstream(fail_status=status, echo_key_in_errors=True)
        with proxied(tmp_path / str(status), fake=fake) as (http, _):
            reply = chat(http, CACHE)
            assert reply.status_code == status
            assert "fails on purpose" in reply.json()["error"]["message"]
            # A server quoting the key it was sent never gets the proxy to echo it.
            assert UPSTREAM_KEY not in reply.text and "[redacted]" in reply.text
    # The upstream refusing the proxy's own key is the operator's problem, not the client's.
    fake = FakeUpstream(fail_status=401, echo_key_in_errors=True)
    with proxied(tmp_path / "401", fake=fake) as (http, _):
        reply = chat(http, CACHE)
        assert reply.status_code == 502
        assert reply.json()["error"]["code"] == "upstream_auth_failed"
        assert UPSTREAM_KEY not in reply.text


def test_an_upstream_that_is_down_gives_502_saying_so(tmp_path: Path) -> None:
    down = openai.AsyncOpenAI(
        base_url=f"http://127.0.0.1:{free_port()}/v1", api_key=UPSTREAM_KEY, max_retries=0
    )
    cache = SemanticCache(tmp_path / "c", embedder=HashEmbedder(dim=64))
    app = create_app(ProxySettings(keys=KEYS), upstream=down, cache=cache)
    with TestClient(app) as http:
        for reply in (chat(http, CACHE), chat(http), chat(http, CACHE, stream=True)):
            assert reply.status_code == 502
            error = reply.json()["error"]
            assert error["code"] == "upstream_unavailable" and "down" in error["message"]


PARK_FILE = """Variables:
!<INPUT 0>! -- persona name
!<INPUT 1>! -- event
agent slot: !<INPUT 0>!
<commentblockmarker>###</commentblockmarker>
On the scale of 1 to 10, rate the poignancy of this event for !<INPUT 0>!.
Event: !<INPUT 1>!
Rate (return a number between 1 to 10):"""


def test_requests_without_options_are_recognised_from_a_template_folder(tmp_path: Path) -> None:
    folder = tmp_path / "prompts"
    folder.mkdir()
    (folder / "poignancy.txt").write_text(PARK_FILE, encoding="utf-8")
    prompt = PromptTemplate.from_file(folder / "poignancy.txt").fill("Liam Oliver", "a fire")
    with proxied(tmp_path, templates=folder) as (http, fake):
        first, again = (chat(http, messages=prompt.messages) for _ in range(2))
        assert [outcome(r.headers) for r in (first, again)] == ["miss", "hit"]
        assert again.headers["x-llmcache-table"] == first.headers["x-llmcache-table"]
        assert again.headers["x-llmcache-category"] == "poignancy"
        # Through the official client too, and streamed: the same table.
        client = sdk(http)
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=prompt.messages
        )
        assert raw.headers["x-llmcache"] == "hit"
        # A namespaced key's recognised calls are its own (never another tenant's answers);
        # a key bound to an agent files them under its agent.
        a1, a2 = (chat(http, key=KEY_A, messages=prompt.messages) for _ in range(2))
        assert [outcome(r.headers) for r in (a1, a2)] == ["miss", "hit"]
        assert a1.headers["x-llmcache-table"] != first.headers["x-llmcache-table"]
        assert a1.headers["x-llmcache-category"] == "tenant-a/poignancy"
        other = PromptTemplate.from_file(folder / "poignancy.txt").fill("Ethan", "a fire")
        liam = chat(http, key=KEY_LIAM, messages=other.messages)
        assert outcome(liam.headers) == "miss"
        assert liam.headers["x-llmcache-table"] not in (
            a1.headers["x-llmcache-table"],
            first.headers["x-llmcache-table"],
        )
        # A prompt of no template passes through, counted.
        assert outcome(chat(http).headers) == "pass"
        assert len(fake.calls()) == 4
    with pytest.raises(ConfigurationError, match="no folder"):
        make_app(tmp_path, templates=tmp_path / "missing")


PARK_AS_PUBLISHED = """Variables:
!<INPUT 0>! -- Persona name
!<INPUT 1>! -- Persona's identity stable set
!<INPUT 2>! -- Persona name
!<INPUT 3>! -- Event description
<commentblockmarker>###</commentblockmarker>
Here is a brief description of !<INPUT 0>!.
!<INPUT 1>!

Rate the likely poignancy of the following event for !<INPUT 2>!.

Event: !<INPUT 3>!
Rate (return a number between 1 to 10):"""


def test_several_agents_recognised_without_an_agent_slot_are_never_crossed(
    tmp_path: Path,
) -> None:
    """A prompt file as published (no agent slot note): every agent's calls share one table,
    whose name and persona slots partition it."""
    folder = tmp_path / "prompts"
    folder.mkdir()
    (folder / "poignancy.txt").write_text(PARK_AS_PUBLISHED, encoding="utf-8")
    template = PromptTemplate.from_file(folder / "poignancy.txt")
    agents = ["Liam Oliver", "Mary Oliver", "Ethan Wilson"]
    events = [f"the {w} is {s}" for w in ("stove", "kettle", "radio") for s in ("on", "off")]
    with proxied(tmp_path, templates=folder) as (http, _):
        tables = set()
        for round_ in range(2):
            for event in events:
                for agent in agents:
                    persona = f"{agent} lives in town.\n{agent} keeps a garden."
                    prompt = template.fill(agent, persona, agent, event)
                    reply = chat(http, messages=prompt.messages)
                    assert reply.status_code == 200
                    content = reply.json()["choices"][0]["message"]["content"]
                    # Never another agent's answer, nor another event's.
                    assert content == FakeUpstream.answer_to(prompt.text)
                    assert outcome(reply.headers) == ("hit" if round_ else "miss")
                    tables.add(reply.headers["x-llmcache-table"])
        assert len(tables) == 1
        metrics = http.get("/metrics", headers=AUTH).text
    values = {
        sample.labels["slot"]: sample.value
        for family in text_string_to_metric_families(metrics)
        if family.name == "llmcache_partition_slot_values"
        for sample in family.samples
    }
    assert values["0"] == 3 and values["1"] == 3 and values["2"] == 3


# -- concurrency and metrics, in-process ---------------------------------------------------------


def test_racing_misses_of_one_prompt_make_one_upstream_call(tmp_path: Path) -> None:
    app, fake = make_app(tmp_path, fake=FakeUpstream(delay=0.3))

    async def race() -> list[str]:
        transport = httpx2.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx2.AsyncClient(transport=transport, base_url="http://proxy") as client,
        ):
            body = {"model": "m", "messages": MSGS, "cache": CACHE}
            replies = await asyncio.gather(
                *(client.post("/v1/chat/completions", json=body, headers=AUTH) for _ in range(16))
            )
        return [outcome(r.headers) for r in replies]

    outcomes = asyncio.run(race())
    assert sorted(outcomes) == ["hit"] * 15 + ["miss"]
    assert len(fake.calls()) == 1


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_count_outcomes_tokens_dollars_and_the_budgets_estimates(tmp_path: Path) -> None:
    config = CacheConfig(wrong_hit_budget=0.05)
    with proxied(tmp_path, config=config) as (http, _):
        for keywords in (["tree idle"], ["tree idle"], ["bakery open"]):
            assert chat(http, {**CACHE, "keywords": keywords}).status_code == 200
        chat(http)  # passed through
        chat(http, CACHE, key="sk-wrong-00000")
        page = http.get("/metrics", headers=AUTH)
    assert page.headers["content-type"].startswith("text/plain")
    samples = _samples(page.text)
    cat = (("category", "importance"),)
    lookups = samples[("llmcache_lookups_total", cat)]
    hits = samples[("llmcache_hits_total", cat)]
    misses = samples[("llmcache_misses_total", cat)]
    # Under a budget the first would-be hits are explored (paid and compared): misses.
    assert lookups == 3 and hits + misses == 3
    assert samples[("llmcache_tokens_spent_total", cat)] > 0
    assert samples[("llmcache_spent_dollars_total", cat)] > 0
    assert ("llmcache_avoided_dollars_total", cat) in samples
    table = [k for k in samples if k[0] == "llmcache_budget_delta"]
    assert len(table) == 1 and samples[table[0]] == 0.05
    assert any(k[0] == "llmcache_budget_threshold" for k in samples)

    def requests(outcome: str, status: str) -> float:
        labels = (("endpoint", "chat.completions"), ("outcome", outcome), ("status", status))
        return samples.get(("llmcache_proxy_requests_total", labels), 0.0)

    assert requests("hit", "200") + requests("miss", "200") == 3
    assert requests("pass", "200") == 1 and requests("error", "401") == 1


def test_the_proxy_names_its_public_surface() -> None:
    import llmcache.proxy

    assert llmcache.proxy.__all__ == ["ProxyKey", "ProxySettings", "create_app"]
    assert issubclass(ProxySettings, object) and callable(create_app)
    assert CacheOptions(category="c", store=False).store is False
    assert Mode.COLLECT.value == "collect"


# -- the real command, as a subprocess -----------------------------------------------------------


@contextlib.contextmanager
def running_proxy(
    tmp_path: Path, upstream: str, *args: str, env: dict[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    """``python -m llmcache proxy`` on a free port; yields its URL, process and log file."""
    port = free_port()
    log = tmp_path / f"proxy-{port}.log"
    command = [
        sys.executable, "-m", "llmcache", "proxy", "--upstream", upstream,
        "--cache", str(tmp_path / "cache"), "--port", str(port), "--key", KEY, *args,
    ]  # fmt: skip
    environ = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=environ)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                raise AssertionError(f"the proxy exited: {log.read_text()[-2000:]}")
            with contextlib.suppress(httpx2.TransportError):
                if httpx2.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, "the proxy did not start"
            time.sleep(0.1)
        yield base, process, log
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _post(base: str, path: str, body: dict[str, Any], **kw: Any) -> httpx2.Response:
    return httpx2.post(f"{base}{path}", json=body, headers=AUTH, timeout=60, **kw)


def test_the_upstreams_key_never_leaves_the_proxy(tmp_path: Path) -> None:
    fake = FakeUpstream(echo_key_in_errors=True)
    env = {"LLMCACHE_API_KEY": UPSTREAM_KEY}
    seen: list[bytes] = []
    with (
        serve_in_thread(fake.app()) as upstream,
        running_proxy(
            tmp_path, f"{upstream}/v1", "--log-level", "debug", "--access-log", env=env
        ) as (base, process, log),
    ):
        chat_body = {"model": "m", "messages": MSGS, "cache": CACHE}
        replies = [
            _post(base, "/v1/chat/completions", chat_body),
            _post(base, "/v1/chat/completions", chat_body),
            _post(base, "/v1/chat/completions", {**chat_body, "stream": True}),
            _post(base, "/v1/chat/completions", {"model": "m", "messages": MSGS}),
            _post(base, "/v1/responses", {"model": "m", "input": "hi", "cache": {"category": "x"}}),
            _post(base, "/v1/completions", {"model": "m", "prompt": "hi"}),
            httpx2.get(f"{base}/v1/models", headers=AUTH),
            httpx2.get(f"{base}/metrics", headers=AUTH),
            _post(base, "/v1/chat/completions", {"model": "m"}),
        ]
        for status in (500, 401):
            fake.fail_status = status
            replies.append(_post(base, "/v1/chat/completions", {**chat_body, "cache": {}}))
        fake.fail_status = None
        assert [r.status_code for r in replies] == [200] * 8 + [400, 500, 502]
        for reply in replies:
            seen.append(reply.content)
            seen.extend(f"{k}: {v}".encode() for k, v in reply.headers.items())
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    # The proxy did send it (the test would prove nothing otherwise) ...
    assert all(r.headers["authorization"] == f"Bearer {UPSTREAM_KEY}" for r in fake.calls())
    # ... and it is nowhere else: responses, headers, logs, the cache's files.
    secret = UPSTREAM_KEY.encode()
    assert not [text for text in seen if secret in text]
    assert secret not in log.read_bytes()
    files = [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert files and not [p for p in files if secret in p.read_bytes()]


def _stats(location: Path) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-m", "llmcache", "stats", str(location), "--json"],
        capture_output=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def _entries(location: Path) -> list[str]:
    from llmcache.storage import open_backend

    backend = open_backend(location)
    try:
        return [e.content for p in backend.partitions() for e in backend.iterate(p.key)]
    finally:
        backend.close()


def test_sigterm_lets_requests_in_flight_finish_and_loses_no_acknowledged_entry(
    tmp_path: Path,
) -> None:
    fake = FakeUpstream(delay=1.0)
    acknowledged: list[str] = []
    with (
        serve_in_thread(fake.app()) as upstream,
        running_proxy(tmp_path, f"{upstream}/v1") as (base, process, _),
    ):

        def ask(i: int) -> None:
            keywords = [f"memory {i}"]
            body = {"model": "m", "messages": [{"role": "user", "content": f"prompt {i}"}],
                    "cache": {**CACHE, "keywords": keywords}}  # fmt: skip
            stream = i % 2 == 1
            reply = _post(base, "/v1/chat/completions", {**body, "stream": stream})
            if reply.status_code == 200 and (not stream or reply.text.endswith("[DONE]\n\n")):
                acknowledged.append(f"prompt {i}")

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while len(fake.calls()) < 8:  # every request is with the upstream now
            assert time.monotonic() < deadline
            time.sleep(0.02)
        process.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(60)
        assert process.wait(60) == 0
    assert len(acknowledged) == 8
    stored = _entries(tmp_path / "cache")
    assert sorted(s.strip() for s in stored) == sorted(f"answer to: {p}" for p in acknowledged)
    total = _stats(tmp_path / "cache")["tables"]
    assert sum(t["misses"] for t in total) == 8 and sum(t["lookups"] for t in total) == 8


@pytest.mark.slow
def test_load_32_clients_mixing_hits_misses_and_streams(tmp_path: Path) -> None:
    """32 clients x 200 requests on 127.0.0.1: no error, counters that add up exactly, racing
    misses of one prompt coalesced into one upstream call, and a clean SIGTERM."""
    clients, per_client = 32, 200
    prompts, stream_prompts = 40, 8
    fake = FakeUpstream(delay=0.05)
    results: list[tuple[str, str, int]] = []
    lock = threading.Lock()
    errors: list[str] = []

    def body(kind: str, i: int) -> dict[str, Any]:
        # One table per prompt (its own agent): each is stored once, whatever else races.
        return {
            "model": "m",
            "messages": [{"role": "user", "content": f"{kind} prompt {i}"}],
            "cache": {"category": f"load-{kind}", "agent": f"agent {i}", "keywords": [str(i)]},
            "stream": kind == "stream",
        }

    def client(n: int, base: str) -> None:
        import random

        rng = random.Random(n)
        with httpx2.Client(base_url=base, headers=AUTH, timeout=120) as http:
            for _ in range(per_client):
                roll = rng.random()
                if roll < 0.1:
                    kind, i = "stream", rng.randrange(stream_prompts)
                elif roll < 0.15:
                    kind, i = "pass", rng.randrange(prompts)
                else:
                    kind, i = "whole", rng.randrange(prompts)
                payload = body(kind, i)
                if kind == "pass":
                    del payload["cache"]
                try:
                    reply = http.post("/v1/chat/completions", json=payload)
                    ok = reply.status_code == 200 and (
                        kind != "stream" or reply.text.endswith("data: [DONE]\n\n")
                    )
                    if not ok:
                        errors.append(f"{reply.status_code} {reply.text[:200]}")
                    with lock:
                        results.append((kind, reply.headers.get("x-llmcache", ""), i))
                except Exception as exc:
                    errors.append(repr(exc))

    started = time.monotonic()
    with (
        serve_in_thread(fake.app()) as upstream,
        running_proxy(tmp_path, f"{upstream}/v1") as (base, process, _),
    ):
        threads = [threading.Thread(target=client, args=(n, base)) for n in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        elapsed = time.monotonic() - started
        metrics = httpx2.get(f"{base}/metrics", headers=AUTH, timeout=60).text
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    assert errors == []
    assert len(results) == clients * per_client
    outcomes = Counter((kind, outcome) for kind, outcome, _ in results)
    upstream_calls = Counter(
        r.body["messages"][0]["content"].split(" prompt ")[0] for r in fake.calls()
    )
    # Whole requests: each prompt paid once, however many clients raced on it.
    whole_prompts = {i for kind, _, i in results if kind == "whole"}
    assert outcomes[("whole", "miss")] == len(whole_prompts) == upstream_calls["whole"]
    # Streamed misses are not coalesced (a stream cannot wait for another): each paid once.
    assert outcomes[("stream", "miss")] == upstream_calls["stream"]
    assert outcomes[("pass", "pass")] == upstream_calls["pass"]
    # The cache's counters add up to what the clients saw, and so do the proxy's.
    tables = _stats(tmp_path / "cache")["tables"]
    hits = outcomes[("whole", "hit")] + outcomes[("stream", "hit")]
    misses = outcomes[("whole", "miss")] + outcomes[("stream", "miss")]
    assert sum(t["hits"] for t in tables) == hits
    assert sum(t["misses"] for t in tables) == misses
    assert sum(t["lookups"] for t in tables) == hits + misses
    samples = _samples(metrics)
    counted: Counter[str] = Counter()
    for (name, labels), value in samples.items():
        if name == "llmcache_proxy_requests_total" and ("endpoint", "chat.completions") in labels:
            counted[dict(labels)["outcome"]] += int(value)
    assert counted == Counter({"hit": hits, "miss": misses, "pass": outcomes[("pass", "pass")]})
    assert len(_entries(tmp_path / "cache")) == misses
    print(
        f"\n[proxy load] {clients} clients x {per_client} requests in {elapsed:.1f} s "
        f"({len(results) / elapsed:.0f} requests/s): {hits} hits, {misses} misses, "
        f"{outcomes[('pass', 'pass')]} passed through; "
        f"upstream calls {sum(upstream_calls.values())}"
    )


def test_the_example_client_runs(tmp_path: Path) -> None:
    assert shutil.which("curl"), "the example client is a curl script: install curl"
    fake = FakeUpstream()
    with (
        serve_in_thread(fake.app()) as upstream,
        running_proxy(tmp_path, f"{upstream}/v1") as (base, _, _),
    ):
        result = subprocess.run(
            ["bash", str(ROOT / "examples" / "proxy_client.sh")],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "LLMCACHE_PROXY_URL": base, "LLMCACHE_PROXY_KEY": KEY},
        )
    assert result.returncode == 0, result.stderr
    assert "x-llmcache: miss" in result.stdout.lower()
    assert "x-llmcache: hit" in result.stdout.lower()


def test_the_command_refuses_settings_that_cannot_work(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("LLMCACHE_PROXY_KEYS", None)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "llmcache", "proxy", "--upstream", "http://127.0.0.1:9/v1",
             "--cache", str(tmp_path / "c"), *args],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip

    no_keys = run()
    assert no_keys.returncode == 2 and "at least one key" in no_keys.stderr
    public = run("--no-auth", "--host", "0.0.0.0")
    assert public.returncode == 2 and "loopback" in public.stderr
    templates = run("--key", KEY, "--templates", str(tmp_path / "missing"))
    assert templates.returncode == 2 and "no folder of templates" in templates.stderr


def test_a_fallback_on_the_wire_answers_when_every_attempt_was_invalid(tmp_path: Path) -> None:
    def rating(text: str) -> None:
        int(text)  # the fake upstream never answers a number: every attempt is invalid

    config = CacheConfig(
        max_attempts=2, categories={"importance": CategoryPolicy(validator=rating)}
    )
    with proxied(tmp_path, config=config) as (http, fake):
        refused = chat(http, cache=CACHE)
        assert refused.status_code == 502
        fell_back = chat(http, cache={**CACHE, "fallback": "5"})
        assert fell_back.status_code == 200
        assert fell_back.json()["choices"][0]["message"]["content"] == "5"
        assert len(fake.calls("/chat/completions")) == 4  # two attempts each, both paid
        # Never stored: the same request (its options as headers now) asks the upstream again.
        headers = {
            **AUTH,
            "X-LLMCache-Category": "importance",
            "X-LLMCache-Agent": "Liam Oliver",
            "X-LLMCache-Keywords": "tree idle",
            "X-LLMCache-Fallback": "6",
        }
        again = http.post(
            "/v1/chat/completions",
            json={"model": "gpt-4o-mini", "messages": MSGS},
            headers=headers,
        )
        assert again.json()["choices"][0]["message"]["content"] == "6"
        assert len(fake.calls("/chat/completions")) == 6
