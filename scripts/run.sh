#!/usr/bin/env bash
# The main job: install everything (scripts/setup.sh), then the quick cost-reduction study --
# the town simulated through CachedLLM on the local LLM (no network, no API key), the thesis's
# chapter-3 experiments on those runs, the cost with and without caching, the saturation
# curve, figures and report.md (about 17 minutes on 2 cores, 2026-11-27: README.md says how long).
#   scripts/run.sh                       the quick profile, into results/quick
#   PROFILE=standard scripts/run.sh      8 agents, 3 runs x 1.5 days, all 14 categories (about
#                                        4 h 5 min on 2 cores, 2026-11-25: the runs 2 h 20 min,
#                                        the steps 1 h 45 min; docs/results/standard)
#   PROFILE=full scripts/run.sh          the study-sized reproduction (days on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

PROFILE=${PROFILE:-quick}
.venv/bin/python -m experiments reproduce --profile "$PROFILE" --out "results/$PROFILE"
