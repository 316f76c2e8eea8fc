"""End-to-end tests against the real llama-server and real weights (marked slow; CI runs them).

They are skipped, with the command that installs what is missing, only when the runtime or the
default model's weights are not installed.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai.types.chat import ChatCompletionMessageParam

from llmcache.llm import (
    DEFAULT_SUPERIOR_MODEL,
    LocalServer,
    LocalServerError,
    find_llama_server,
    find_model,
    open_llm,
)

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m"


def _missing(model: str) -> str | None:
    try:
        find_llama_server()
        find_model(model)
    except LocalServerError as exc:
        return str(exc)
    return None


_NOT_INSTALLED = _missing(MODEL)
needs_server = pytest.mark.skipif(
    _NOT_INSTALLED is not None, reason=f"local LLM not installed: {_NOT_INSTALLED}"
)

RATING_SCHEMA = {
    "type": "object",
    "properties": {
        "rating": {"type": "integer", "minimum": 1, "maximum": 10},
        "reason": {"type": "string", "maxLength": 120},
    },
    "required": ["rating", "reason"],
    "additionalProperties": False,
}
MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "system", "content": "You rate how memorable events are for Liam Oliver."},
    {
        "role": "user",
        "content": "On a scale of 1 (mundane) to 10 (life-changing), rate: "
        "'Liam Oliver is brushing his teeth'. Answer in JSON with rating and reason.",
    },
]


def _gone(pid: int) -> bool:
    """True when the process no longer exists or is only a zombie awaiting its reaper."""
    try:
        status = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
    except OSError:
        return True
    return "\nState:\tZ" in status


def _all_gone(pids: list[int], within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if all(_gone(pid) for pid in pids):
            return True
        time.sleep(0.1)
    return False


@pytest.fixture(scope="module")
def server() -> Iterator[LocalServer]:
    with LocalServer(MODEL, parallel=2, ctx_per_slot=2048) as running:
        yield running


@needs_server
def test_schema_constrained_answer_parses(server: LocalServer) -> None:
    client = server.client()
    reply = client.chat.completions.create(
        model=server.model,
        messages=MESSAGES,
        temperature=0,
        max_tokens=120,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "rating", "schema": RATING_SCHEMA, "strict": True},
        },
    )
    assert reply.model == MODEL
    content = reply.choices[0].message.content
    assert content is not None
    answer = json.loads(content)
    assert set(answer) == {"rating", "reason"}
    assert isinstance(answer["rating"], int) and 1 <= answer["rating"] <= 10
    assert reply.usage is not None and reply.usage.completion_tokens > 0
    assert server.start_seconds is not None and server.start_seconds < 60


IMPORTANCE_SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 10}},
    "required": ["score"],
    "additionalProperties": False,
}


@needs_server
def test_json_answers_end_where_their_json_ends(server: LocalServer) -> None:
    """llama.cpp's grammar allows whitespace after the object; the server's client stops there.

    A plain client (no end bias) on the same prompt shows what the bias saves: the same JSON,
    followed by whitespace up to ``max_tokens``.
    """
    import openai

    kwargs: dict[str, object] = {
        "model": server.model,
        "messages": MESSAGES,
        "temperature": 0,
        "max_tokens": 30,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "importance", "schema": IMPORTANCE_SCHEMA, "strict": True},
        },
    }
    ended = server.client().chat.completions.create(**kwargs)  # type: ignore[call-overload]
    plain_client = server.client(http_client=openai.DefaultHttpxClient())
    plain = plain_client.chat.completions.create(**kwargs)  # type: ignore[call-overload]

    assert ended.choices[0].finish_reason == "stop"
    content = ended.choices[0].message.content
    assert content is not None and content == content.strip()
    assert json.loads(content) == json.loads(plain.choices[0].message.content or "null")
    assert ended.usage is not None and plain.usage is not None
    assert ended.usage.completion_tokens <= plain.usage.completion_tokens


@needs_server
def test_unknown_model_names_are_rejected(server: LocalServer) -> None:
    import openai

    with pytest.raises(openai.BadRequestError, match="not found"):
        server.client().chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=1,
        )


@needs_server
def test_processes_are_gone_after_the_block_even_when_it_raises() -> None:
    pids: list[int] = []
    with (
        pytest.raises(RuntimeError, match="test body failed"),
        LocalServer(MODEL, parallel=1, ctx_per_slot=1024) as server,
    ):
        assert server.pid is not None
        pids = [server.pid, *server.child_pids()]
        assert len(pids) == 2  # the router and the model process
        raise RuntimeError("test body failed")
    assert _all_gone(pids), pids
    assert not server.running


@needs_server
def test_serve_command_stops_the_server_on_ctrl_c() -> None:
    command = [
        sys.executable,
        "-c",
        "import sys; from llmcache.llm._serve import serve_main; "
        "sys.exit(serve_main(sys.argv[1:]))",
        "--model",
        MODEL,
        "--single",
        "--parallel",
        "1",
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    lines = []
    try:
        for line in process.stdout:
            lines.append(line)
            if "Ctrl-C" in line:
                break
        output = "".join(lines)
        assert "base URL : http://127.0.0.1:" in output, output
        server_pid = int(next(x for x in lines if "pid" in x).split()[-1])
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0
    assert "stopped" in rest
    assert _all_gone([server_pid])


def _superior_missing() -> str | None:
    return _NOT_INSTALLED or _missing(DEFAULT_SUPERIOR_MODEL)


@pytest.mark.skipif(
    _superior_missing() is not None, reason=f"superior model not installed: {_superior_missing()}"
)
def test_default_backend_routes_each_tier_to_its_model() -> None:
    with open_llm(env={}) as llm:
        backend = llm.backend
        assert not backend.same_tier
        assert llm.server is not None and llm.server.model_status()[backend.model] == "loaded"
        for model in (backend.model, backend.superior_model):
            reply = llm.client.chat.completions.create(
                model=model,
                messages=MESSAGES,
                temperature=0,
                max_tokens=150,
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": "rating", "schema": RATING_SCHEMA},
                },
            )
            assert reply.model == model
            content = reply.choices[0].message.content
            assert content is not None and 1 <= json.loads(content)["rating"] <= 10
        pids = [llm.server.pid or -1, *llm.server.child_pids()]
        assert len(pids) == 3  # router + one process per tier
    assert _all_gone(pids)
