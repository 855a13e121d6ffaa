#!/usr/bin/env bash
# ctest `paper.smoke_sweep`: scripts/reproduce.sh --smoke end to end (tiny base policy, every arm,
# one seed, a few steps, every arm computing in FP32), then a rerun that must find every run finished
# and only rewrite the report, and a different sweep in the same folder, which must be refused.
# Usage: smoke_sweep.sh BUILD_DIR OUT_DIR
set -euo pipefail
BUILD_DIR=$1 OUT=$2
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
fail() { echo "FAILED: $*" >&2; exit 1; }
rm -rf "$OUT"
UNSTUCK_BUILD_DIR=$BUILD_DIR "$ROOT/scripts/reproduce.sh" --smoke --no-build --out "$OUT" | tee "$OUT.log1"
[[ -f $OUT/RESULTS.md ]] || fail "no $OUT/RESULTS.md"
for arm in fp32 fp16 bf16 bf16_lr_k bf16_sr fp16_sr; do
  [[ -s $OUT/$arm/seed1/metrics.jsonl ]] || fail "arm $arm wrote no metrics"
  [[ $(wc -l < "$OUT/$arm/seed1/metrics.jsonl") == 4 ]] || fail "arm $arm: expected 4 steps of metrics"
done
for arm in "FP32 (control)" "FP16 @ x" "BF16-RN @ x" "BF16-RN @ k\*x" "BF16-SR @ x" "FP16-SR @ x"; do
  grep -q "^| $arm |" "$OUT/RESULTS.md" || fail "no table row for $arm"
done
[[ $(ls "$OUT"/plots/*.png | wc -l) == 10 ]] || fail "expected 10 plots in $OUT/plots (7 + drift, drift vs step, probe)"
grep -q "^  compute: fp32" "$OUT/bf16/seed1/config.yaml" || fail "the paper preset must compute every arm in FP32"
# The prompt pool: built from the smoke base in the sweep folder, recorded; the arms train on its
# first 16 prompts (the preset's pool size), copied into the sweep folder.
POOL=$OUT/sft-smoke/pool-n24-k2-0-1.jsonl
[[ $(wc -l < "$POOL") == 24 ]] || fail "expected the 24-prompt smoke pool at $POOL"
cmp -s <(head -16 "$POOL") "$OUT/pool-first16.jsonl" || fail "pool-first16.jsonl must hold the pool's first 16 prompts"
grep -q "^  train_path: .*/pool-first16.jsonl" "$OUT/fp16/seed1/config.yaml" || fail "the arms must train on the pool's first 16 prompts"
grep -q "the sweep trains on its first 16 prompts" "$OUT/RESULTS.md" || fail "the report does not give the pool size"
# The paper arms use a 0/1 reward; the smoke preset gives its base (which solves nothing) the 0.1 format reward.
grep -Eq "^reward: \{format_reward: 0\.0\}" configs/paper/fp16.yaml || fail "configs/paper: the arms use a 0/1 reward"
grep -Eq "^  format_reward: 0\.1( |$)" "$OUT/fp16/seed1/config.yaml" || fail "the smoke preset's reward override"
grep -q "^Prompts: the pool" "$OUT/RESULTS.md" || fail "the report does not describe the pool"
grep -q "^## Drift of FP16" "$OUT/RESULTS.md" || fail "no drift table in the report"
grep -q "^## Size targets" "$OUT/RESULTS.md" || fail "no size targets in the report"
# The smoke base gains nothing in 4 steps: no claim may read reproduced, no size target (T1-T3) be met.
grep -q "\*\*reproduced\|^\* \*T[123],.*Result: \*\*met" "$OUT/RESULTS.md" && fail "a verdict passed on the smoke sweep"
grep -q "^## Regime targets" "$OUT/RESULTS.md" || fail "no regime targets in the report"
.venv/bin/python - "$OUT/drift.json" <<'EOF' || fail "drift.json"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["rows"]:
    assert 0 < r["max_abs_drift"] <= 3 * r["lr"] * r["step"], r  # else the flat layout is misread
    assert r["probe"] and 0 <= r["probe"]["bf16_rounded"] <= 1, r
EOF
UNSTUCK_BUILD_DIR=$BUILD_DIR "$ROOT/scripts/reproduce.sh" --smoke --no-build --out "$OUT" | tee "$OUT.log2"
grep -q "6 of 6 runs already finished" "$OUT.log2" || fail "the rerun did not reuse the finished runs"
if UNSTUCK_BUILD_DIR=$BUILD_DIR "$ROOT/scripts/reproduce.sh" --smoke --no-build --out "$OUT" --steps 5 2> "$OUT.err"; then
  fail "a different sweep in the same folder was accepted"
fi
grep -q "holds a different sweep" "$OUT.err" || fail "no clear error for a different sweep: $(cat "$OUT.err")"
echo "smoke sweep ok"
