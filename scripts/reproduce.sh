#!/usr/bin/env bash
# Reproduces the comparison of arXiv 2611.13545 on the embedded default (countdown, SFT base policy)
# with one command: builds if needed, trains (or reuses) the base policy, builds the prompt pool from
# it (prompts the base solves 20-80% of the time, 0/1 reward), runs the arms for several paired seeds
# (every arm computing in FP32 on its rounded weights, so weight rounding is the only difference),
# then writes the plots, the drift analysis and the report.
#
#   scripts/reproduce.sh --quick     # 4 arms x 3 seeds x 200 steps -> docs/RESULTS.md (16.5 min on 2 cores)
#   scripts/reproduce.sh --phase     # the phase diagram: FP16, BF16-RN, BF16-SR at 4 LRs -> docs/RESULTS-phase.md
#   scripts/reproduce.sh --phase-analog # the same over the grid: BF16 with 6, 5, 4 mantissa bits (a labelled
#                                    # analog, not a real format) at x -> docs/RESULTS-phase-analog.md
#   scripts/reproduce.sh --quick-analog # --quick on the 5-bit analog grid, k = 1.7 -> docs/RESULTS-quick-analog.md
#   scripts/reproduce.sh --quick-analog-pool # the same on a 3-bit grid, 64 prompts, x = 2e-5 (FP16 gains >= 0.3)
#                                    # -> docs/RESULTS-quick-analog-pool.md
#   scripts/reproduce.sh --quick-fp8 # --quick with FP8 E4M3 in BF16's place (FP16, FP8-RN @ x and @ k*x,
#                                    # FP8-SR; a real format, the base on the FP8 grid) -> docs/RESULTS-fp8.md
#   scripts/reproduce.sh --full      # 2 model sizes x 4 arms x 5 seeds (200 steps) -> docs/RESULTS-full*.md
#   scripts/reproduce.sh --gpu       # a 27M-parameter policy on one CUDA device -> docs/RESULTS-gpu.md
#   scripts/reproduce.sh --gpu-phase # its phase diagram at 1e-5, 2e-5, 4e-5 -> docs/RESULTS-gpu-phase.md
#   scripts/reproduce.sh --gpu-pool  # --gpu on the first 64 prompts of its pool, 200 steps -> docs/RESULTS-gpu-pool.md
#   scripts/reproduce.sh --smoke     # pipeline check in about a minute (tiny base, 1 seed, 4 steps)
#
# A thin wrapper of scripts/compare.py --preset paper-<name>; every other option goes to it (see
# scripts/compare.py --help): --out DIR, --results FILE, --plots DIR, --seeds N, --steps N,
# --arms "fp16 bf16 ...", --k K (BF16-RN @ k*x's LR multiple), --jobs J, --base DIR, --pool FILE,
# --compute native (the secondary sweep), --no-build, key=value overrides. UNSTUCK_BUILD_DIR picks another build folder (default build/).
# Ctrl-C stops cleanly (the running arms checkpoint); rerunning the same command resumes: finished
# runs are kept and an interrupted one continues bit-exactly. Run --phase before --quick and the
# quick report embeds the phase diagram (rerunning --quick only rewrites the report).
set -euo pipefail
cd "$(dirname "$0")/.."
COMMAND_LINE="scripts/reproduce.sh${*:+ $(printf '%q ' "$@" | sed 's/ $//')}"
PRESET=quick ARGS=() BUILD=1
for arg in "$@"; do
  case "$arg" in
    --quick|--quick-analog|--quick-analog-pool|--quick-fp8|--full|--smoke|--phase|--phase-analog|--gpu|--gpu-phase|--gpu-pool) PRESET=${arg#--} ;;
    -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
    --no-build) BUILD=0; ARGS+=("$arg") ;;
    *) ARGS+=("$arg") ;;
  esac
done
if [[ ! -x .venv/bin/python ]]; then
  [[ $BUILD == 1 ]] || { echo "reproduce.sh: error: .venv/bin/python not found; run scripts/setup.sh first" >&2; exit 2; }
  scripts/setup.sh
fi
if [[ $PRESET == full ]]; then  # two model sizes, one after the other
  .venv/bin/python scripts/compare.py --preset paper-full --command-line "$COMMAND_LINE" "${ARGS[@]}"
  exec .venv/bin/python scripts/compare.py --preset paper-full-wide --command-line "$COMMAND_LINE" --no-build "${ARGS[@]}"
fi
exec .venv/bin/python scripts/compare.py --preset "paper-$PRESET" --command-line "$COMMAND_LINE" "${ARGS[@]}"
