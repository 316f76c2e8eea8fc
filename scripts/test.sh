#!/usr/bin/env bash
# Installs everything (scripts/setup.sh), then runs lint, type checks and the whole test suite,
# slow end-to-end tests included. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
