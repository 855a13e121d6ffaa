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
rm -rf "$OUT" "$OUT-k3" "$OUT-bad" "$OUT-qa" "$OUT-qa1" "$OUT-qap"
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
# --k: the bf16_lr_k arm at k times x (the other arms' LR; an optim.lr override sets x), labelled with k;
# a folder that ran another k is another sweep; --k without that arm or with --config is refused, and so
# is an optim.lr override of a phase sweep (its rows set the LRs) or one that is not a positive number.
UNSTUCK_BUILD_DIR=$BUILD_DIR .venv/bin/python scripts/compare.py --preset paper-smoke --no-build --no-drift \
  --arms bf16_lr_k --k 3 --steps 1 --eval-every 1 --base "$OUT/sft-smoke/model" --pool "$OUT/pool-first16.jsonl" \
  --out "$OUT-k3" optim.lr=4e-6 > "$OUT.k3.log" 2>&1 || fail "--k 3: $(cat "$OUT.k3.log")"
X=4e-6
.venv/bin/python - "$OUT-k3" "$X" <<'EOF' || fail "--k 3 did not run bf16_lr_k at 3x"
import json, re, sys
out, x = sys.argv[1], float(sys.argv[2])
lr = float(re.search(r"^  lr: ([0-9.e+-]+)", open(f"{out}/bf16_lr_k/seed1/config.yaml").read(), re.M).group(1))
assert abs(lr - 3 * x) <= 1e-12, (lr, x)
assert json.load(open(f"{out}/sweep.json"))["labels"]["bf16_lr_k"] == "BF16-RN @ k*x (k = 3)"
EOF
# A preset's own k (--quick-analog: 1.7, calibrated) applies when the sweep runs bf16_lr_k, and only then.
UNSTUCK_BUILD_DIR=$BUILD_DIR .venv/bin/python scripts/compare.py --preset paper-quick-analog --no-build \
  --arms "fp16 bf16_lr_k" --steps 1 --eval-every 1 --eval-samples 4 --base "$OUT/sft-smoke/model" \
  --pool "$OUT/pool-first16.jsonl" --out "$OUT-qa" --results "$OUT-qa/RESULTS.md" --plots "$OUT-qa/plots" \
  reward.format_reward=0.1 > "$OUT.qa.log" 2>&1 ||
  fail "--quick-analog's k: $(cat "$OUT.qa.log")"
grep -Eq "^  lr: 8.5e-0?6 " "$OUT-qa/bf16_lr_k/seed1/config.yaml" || fail "--quick-analog: bf16_lr_k is not at 1.7x"
grep -Eq "^  lr: 5e-0?6 " "$OUT-qa/fp16/seed1/config.yaml" || fail "--quick-analog: fp16 is not at x"
# A preset's own x (--quick-analog-pool: 2e-5) for every arm, bf16_lr_k at k times it.
UNSTUCK_BUILD_DIR=$BUILD_DIR .venv/bin/python scripts/compare.py --preset paper-quick-analog-pool --no-build \
  --arms "fp16 bf16_lr_k" --steps 1 --eval-every 1 --eval-samples 4 --base "$OUT/sft-smoke/model" \
  --pool "$OUT/pool-first16.jsonl" --out "$OUT-qap" --results "$OUT-qap/RESULTS.md" --plots "$OUT-qap/plots" \
  reward.format_reward=0.1 > "$OUT.qa.log" 2>&1 || fail "--quick-analog-pool: $(cat "$OUT.qa.log")"
grep -Eq "^  lr: 3.4e-0?5 " "$OUT-qap/bf16_lr_k/seed1/config.yaml" || fail "--quick-analog-pool: bf16_lr_k not at 1.7x"
grep -Eq "^  lr: 2e-0?5 " "$OUT-qap/fp16/seed1/config.yaml" || fail "--quick-analog-pool: fp16 is not at x = 2e-5"
grep -Eq "^  analog_mantissa_bits: 3( |$)" "$OUT-qap/fp16/seed1/config.yaml" || fail "--quick-analog-pool: not on 3 bits"
UNSTUCK_BUILD_DIR=$BUILD_DIR .venv/bin/python scripts/compare.py --preset paper-quick-analog --no-build --arms fp16 \
  --steps 1 --eval-every 1 --eval-samples 4 --base "$OUT/sft-smoke/model" --pool "$OUT/pool-first16.jsonl" \
  --out "$OUT-qa1" --results "$OUT-qa1/RESULTS.md" --plots "$OUT-qa1/plots" reward.format_reward=0.1 \
  > "$OUT.qa.log" 2>&1 || fail "--quick-analog without bf16_lr_k: $(cat "$OUT.qa.log")"
if UNSTUCK_BUILD_DIR=$BUILD_DIR "$ROOT/scripts/reproduce.sh" --smoke --no-build --out "$OUT" --k 3 2> "$OUT.err"; then
  fail "a sweep at another k in the same folder was accepted"
fi
grep -q "holds a different sweep (arm_overrides" "$OUT.err" || fail "unclear error for another k: $(cat "$OUT.err")"
for bad in "--preset paper-smoke --arms fp16 --k 2|--k" "--preset paper-smoke --k 0|--k" \
           "--config configs/paper/fp16.yaml --modes fp16 --k 2|--k" \
           "--preset paper-phase optim.lr=1e-5|optim.lr=1e-5: the phase sweep" \
           "--preset paper-smoke optim.lr=fast|optim.lr must be a positive number, got 'fast'"; do
  args=${bad%%|*} want=${bad#*|}
  # shellcheck disable=SC2086 # each case is a list of arguments
  if UNSTUCK_BUILD_DIR=$BUILD_DIR .venv/bin/python scripts/compare.py $args --no-build --out "$OUT-bad" 2> "$OUT.err"; then
    fail "compare.py $args was accepted"
  fi
  grep -qF -- "$want" "$OUT.err" || fail "compare.py $args: the error does not say '$want': $(cat "$OUT.err")"
done
echo "smoke sweep ok"
