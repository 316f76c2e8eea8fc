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
LLMCACHE_REQUIRE_PG=1 .venv/bin/python -m pytest "$@"
