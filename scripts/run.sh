#!/usr/bin/env bash
# The main job: install everything (scripts/setup.sh), then simulate the town through CachedLLM
# on the local LLM -- no network, no API key -- and print what the cache spent and avoided.
#   scripts/run.sh                     half a simulated day, one agent (about 15-30 minutes on 2 cores)
#   DAYS=1 AGENTS="Alice Ethan" scripts/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

DAYS=${DAYS:-0.5}
AGENTS=${AGENTS:-Alice}
CACHE_DIR=${CACHE_DIR:-.llmcache/town}
OUT=${OUT:-runs/town.jsonl}
mkdir -p "$(dirname "$OUT")"

# shellcheck disable=SC2086 # AGENTS is a list of names
.venv/bin/python -m agent_core run --days "$DAYS" --agents $AGENTS --seed 1 \
  --llm local --max-attempts 3 --cache-mode online --embedder minilm \
  --cache-dir "$CACHE_DIR" --out "$OUT"
echo
echo "cache tables after the run ($CACHE_DIR):"
.venv/bin/python -m llmcache stats "$CACHE_DIR"
