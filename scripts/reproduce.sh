#!/usr/bin/env bash
# Reproduces the comparison of arXiv 2611.13545 on the embedded default (countdown, SFT base policy)
# with one command: builds if needed, trains (or reuses) the base policy, runs every arm of
# configs/paper/ for several paired seeds (every arm computing in FP32 on its rounded weights, so
# weight rounding is the only difference), then writes the plots, the drift analysis and the report.
#
#   scripts/reproduce.sh --quick     # 6 arms x 3 seeds x 40 steps -> docs/RESULTS.md
#   scripts/reproduce.sh --full      # 6 arms x 5 seeds x 180 steps
#   scripts/reproduce.sh --smoke     # pipeline check in about a minute (tiny base, 1 seed, 4 steps)
#
# A thin wrapper of scripts/compare.py --preset paper-<quick|full|smoke>; every other option goes to
# it (see scripts/compare.py --help): --out DIR, --results FILE, --plots DIR, --seeds N, --steps N,
# --arms "fp16 bf16 ...", --jobs J, --base DIR, --compute native (the secondary sweep, computing in
# the weights' own format), --no-build, key=value overrides. UNSTUCK_BUILD_DIR picks another build
# folder (default build/). Ctrl-C stops cleanly (the running arms checkpoint); rerunning the same
# command resumes: finished runs are kept and an interrupted one continues bit-exactly.
set -euo pipefail
cd "$(dirname "$0")/.."
COMMAND_LINE="scripts/reproduce.sh${*:+ $(printf '%q ' "$@" | sed 's/ $//')}"
PRESET=quick ARGS=() BUILD=1
for arg in "$@"; do
  case "$arg" in
    --quick|--full|--smoke) PRESET=${arg#--} ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    --no-build) BUILD=0; ARGS+=("$arg") ;;
    *) ARGS+=("$arg") ;;
  esac
done
if [[ ! -x .venv/bin/python ]]; then
  [[ $BUILD == 1 ]] || { echo "reproduce.sh: error: .venv/bin/python not found; run scripts/setup.sh first" >&2; exit 2; }
  scripts/setup.sh
fi
exec .venv/bin/python scripts/compare.py --preset "paper-$PRESET" --command-line "$COMMAND_LINE" "${ARGS[@]}"
