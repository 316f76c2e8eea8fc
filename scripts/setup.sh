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
# hnswlib compiles from source, for x86-64-v3 at most rather than for this CPU; its wheel is
# kept (scripts/portable.sh), so only the first install on a machine pays for compiling it.
# Installed first, so that the project's own install finds it satisfied.
.venv/bin/python -m pip install --quiet --upgrade pip
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

if [ "$with_llm" = 1 ] && [ -f scripts/install_llm.sh ]; then
  bash scripts/install_llm.sh
fi
echo "setup: done ($(.venv/bin/python --version))"
