#!/usr/bin/env bash
# Installs everything (scripts/setup.sh), then runs lint, type checks and the whole test suite,
# slow end-to-end tests included. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
# The prebuilt PostgreSQL + pgvector of the [pg] extra, and what setup compiled here (hnswlib,
# llama.cpp), must run on any CPU with AVX2 (the next machine may lack AVX-512): no AVX-512
# instruction outside run-time-dispatched variants.
.venv/bin/python scripts/check_cpu_baseline.py --installed
# With the [pg] extra installed, a Postgres test that would skip fails instead.
export LLMCACHE_REQUIRE_PG=1
# The fast tests on every core; then the slow end-to-end ones one after another, since each
# runs the local LLM, which already uses every core. Exit status 5 is pytest's "no test
# selected" (e.g. arguments that name only slow tests); both selecting none is an error.
ran=0
for selection in "not slow" "slow"; do
    if [[ "$selection" == "slow" ]]; then parallel=(); else parallel=(-n auto); fi
    status=0
    .venv/bin/python -m pytest -m "$selection" "${parallel[@]}" "$@" || status=$?
    if [[ $status -eq 0 ]]; then
        ran=1
    elif [[ $status -ne 5 ]]; then
        exit "$status"
    fi
done
if [[ $ran -eq 0 ]]; then
    echo "scripts/test.sh: no test selected" >&2
    exit 5
fi
