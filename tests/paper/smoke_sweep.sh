#!/usr/bin/env bash
# ctest `paper.smoke_sweep`: scripts/reproduce.sh --smoke end to end (tiny base policy, every arm,
# one seed, a few steps), then a rerun that must find every run finished and only rewrite the report.
# Usage: smoke_sweep.sh BUILD_DIR OUT_DIR
set -euo pipefail
BUILD_DIR=$1 OUT=$2
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
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
[[ $(ls "$OUT"/plots/*.png | wc -l) == 7 ]] || fail "expected 7 plots in $OUT/plots"
UNSTUCK_BUILD_DIR=$BUILD_DIR "$ROOT/scripts/reproduce.sh" --smoke --no-build --out "$OUT" | tee "$OUT.log2"
grep -q "6 of 6 runs already finished" "$OUT.log2" || fail "the rerun did not reuse the finished runs"
if UNSTUCK_BUILD_DIR=$BUILD_DIR "$ROOT/scripts/reproduce.sh" --smoke --no-build --out "$OUT" --steps 5 2> "$OUT.err"; then
  fail "a different sweep in the same folder was accepted"
fi
grep -q "holds a different sweep" "$OUT.err" || fail "no clear error for a different sweep: $(cat "$OUT.err")"
echo "smoke sweep ok"
