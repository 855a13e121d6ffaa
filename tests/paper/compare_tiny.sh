#!/usr/bin/env bash
# ctest `paper.compare`: scripts/compare.py on a user's own config, end to end in seconds: a tiny SFT
# base on the shipped arithmetic task, a tiny GRPO config, four arms (fp16, bf16, bf16_sr, bf16@2x)
# x 2 seeds. Checks the per-arm overrides, the verdict-free report and plots, the drift analysis,
# a clean stop on SIGTERM with resume (`unstuck train --resume`), the refusal of another sweep
# in the same folder, and FP8 arms (fp8_rn, fp8_sr) with the drift on FP8's grid.
# Usage: compare_tiny.sh BUILD_DIR OUT_DIR
set -euo pipefail
BUILD_DIR=$(cd "$1" && pwd) OUT=$2
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=$ROOT/.venv/bin/python
fail() { echo "FAILED: $*" >&2; exit 1; }
rm -rf "$OUT"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$ROOT"
"$BUILD_DIR/unstuck" sft --config configs/sft/arithmetic.yaml run.output_dir="$OUT" run.name=sft sft.output="$OUT/base" \
  model.dim=32 model.n_layers=2 model.n_heads=2 model.n_kv_heads=2 model.ffn_dim=64 sft.steps=20 \
  sft.batch_size=16 sft.warmup_steps=2 sft.eval_every=0 sft.eval_samples=8 sft.log_every=10 precision.threads=1 \
  > "$OUT/sft.log" 2>&1 || { cat "$OUT/sft.log"; fail "tiny SFT base"; }
cat > "$OUT/my.yaml" <<EOF
run: {name: tiny, output_dir: $OUT/ignored, seed: 1}
data: {task: arithmetic}
precision: {mode: fp32}
optim: {lr: 1.0e-3, beta2: 0.99, weight_decay: 0.0, grad_clip: 1.0}
rollout: {temperature: 1.0, max_new_tokens: 8}
grpo: {base_model: $OUT/base, round_base_to_bf16: true, steps: 50, prompts_per_step: 4, group_size: 4, eval_samples: 8}
EOF
COMPARE=("$PY" scripts/compare.py --config "$OUT/my.yaml" --modes fp16,bf16,bf16_sr,bf16@2x --seeds 2 --steps 30
         --checkpoint-every 1 --eval-every 3 --eval-samples 8 --jobs 2 --no-build --progress-every 1 --out "$OUT/cmp")
export UNSTUCK_BUILD_DIR=$BUILD_DIR
compare() { "${COMPARE[@]}" "$@"; }

# First invocation: stopped by SIGTERM once the first run has a checkpoint (30 steps, so the signal
# lands mid-run even where a step takes milliseconds).
"${COMPARE[@]}" > "$OUT/log1" 2>&1 &
pid=$!
for _ in $(seq 1200); do
  compgen -G "$OUT/cmp/fp16/seed1/checkpoints/step_*/manifest.json" > /dev/null && break
  kill -0 $pid 2> /dev/null || break
  sleep 0.1
done
kill -TERM $pid 2> /dev/null || true
rc=0; wait $pid || rc=$?
cat "$OUT/log1"
[[ $rc == 130 ]] || fail "the stopped sweep exited $rc, expected 130"
grep -q "interrupted after" "$OUT/log1" || fail "no 'interrupted' line after SIGTERM"
pgrep -f "$OUT/cmp/" > /dev/null && fail "trainers still running after the sweep stopped"

# Rerun: resumes the interrupted runs and finishes.
compare > "$OUT/log2" 2>&1 || { cat "$OUT/log2"; fail "the resumed sweep failed"; }
cat "$OUT/log2"
grep -q -- "train --resume [^ ]*cmp/fp16/seed1$" "$OUT/cmp/fp16/seed1.console.log" ||
  fail "the interrupted run was not resumed with unstuck train --resume"
grep -q "ETA" "$OUT/log2" || fail "no progress line with an ETA"
# The stopped-and-resumed run equals the same run made in one go (the driver resumes what it started).
first=$(grep -m1 '^\$ ' "$OUT/cmp/fp16/seed1.console.log" | cut -c3-)
eval "$first run.output_dir=$OUT/oneshot" > "$OUT/oneshot.log" 2>&1 || { cat "$OUT/oneshot.log"; fail "one-shot run"; }
"$PY" - "$OUT/cmp/fp16/seed1/metrics.jsonl" "$OUT/oneshot/seed1/metrics.jsonl" <<'EOF' || fail "resumed run differs from the one-shot run"
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
keys = ("step", "reward_mean", "kl_ref_exact", "sticking_frac", "changed_from_start_frac")
assert [[r[k] for k in keys] for r in a] == [[r[k] for k in keys] for r in b], "metrics differ"
print(f"resumed run equals the one-shot run over {len(a)} steps")
EOF
for arm in fp16 bf16 bf16_sr bf16_lr2x; do
  for s in 1 2; do
    d=$OUT/cmp/$arm/seed$s
    [[ $(wc -l < "$d/metrics.jsonl") == 30 ]] || fail "$arm seed $s: expected 30 steps of metrics"
    grep -q "^  seed: $s" "$d/config.yaml" || fail "$arm seed $s: run.seed is not $s"
  done
done
mode_lr() { "$PY" -c 'import sys; sys.path.insert(0, "scripts"); from paper.arms import yaml_scalar as y
t = open(sys.argv[1]).read(); print(y(t, "precision", "mode"), float(y(t, "optim", "lr")))' "$OUT/cmp/$1/seed1/config.yaml"; }
[[ $(mode_lr fp16) == "fp16 0.001" ]] || fail "fp16 arm: $(mode_lr fp16)"
[[ $(mode_lr bf16_sr) == "bf16_sr 0.001" ]] || fail "bf16_sr arm: $(mode_lr bf16_sr)"
[[ $(mode_lr bf16_lr2x) == "bf16 0.002" ]] || fail "bf16@2x arm: $(mode_lr bf16_lr2x)"
R=$OUT/cmp/RESULTS.md
for label in "FP16 @ x" "BF16-RN @ x" "BF16-SR @ x" "BF16-RN @ 2x"; do
  grep -q "^| $label |" "$R" || fail "no table row for $label"
done
grep -q "^## Size of the effect" "$R" || fail "no size-of-effect table"
grep -q "Verdicts\|reproduced" "$R" && fail "a user comparison must be verdict-free"
grep -q "^## Drift of FP16" "$R" || fail "no drift table"
n=$(ls "$OUT"/cmp/plots/*.png | wc -l)
[[ $n == 10 ]] || fail "expected 10 plots, found $n"
"$PY" - "$OUT/cmp/drift.json" <<'EOF' || fail "drift.json"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["arm"] == "fp16" and d["rows"], d
for r in d["rows"]:
    # Adam moves a weight by about the LR per step: far more would mean a wrong flat layout.
    assert 0 < r["max_abs_drift"] <= 3 * r["lr"] * r["step"], r
    assert 0 <= r["below_one"] <= 1 and r["median"] >= 0, r
    p = r["probe"]
    assert all(0 <= p[k] <= 1 for k in ("base", "unrounded", "bf16_rounded")), p
# The drift series has every kept checkpoint of each seed; the drift only grows with the steps
# taken on average, so the median at the last checkpoint is at least the first one's.
for s in {p["seed"] for p in d["series"]}:
    pts = [p for p in d["series"] if p["seed"] == s]
    assert [p["step"] for p in pts] == sorted(p["step"] for p in pts) and len(pts) >= 2, pts
    assert pts[-1]["median"] >= pts[0]["median"] > 0, pts
print("drift rows:", [(r["seed"], r["level"], r["step"], round(r["median"], 2)) for r in d["rows"]])
EOF

# A different sweep in the same folder is refused, naming what differs.
if compare --modes fp16,bf16 > "$OUT/log3" 2>&1; then fail "a different sweep in the same folder was accepted"; fi
grep -q "holds a different sweep" "$OUT/log3" || fail "no clear error for a different sweep: $(cat "$OUT/log3")"
# Bad arm specifications are errors that name them.
if compare --modes fp16,bf17 > "$OUT/log4" 2>&1; then fail "an unknown mode was accepted"; fi
grep -q "unknown precision mode 'bf17'" "$OUT/log4" || fail "unclear error for an unknown mode: $(cat "$OUT/log4")"
# FP8 arms beside FP16: they train and report, and the drift analysis measures FP16's drift in
# half-ulps of fp8_rn's grid (per-channel E4M3 on the layers' matrices, BF16 on the rest).
compare --modes fp16,fp8_rn,fp8_sr --seeds 1 --steps 6 --out "$OUT/cmp8" > "$OUT/log6" 2>&1 ||
  { cat "$OUT/log6"; fail "the FP8 sweep failed"; }
for arm in fp8_rn fp8_sr; do
  grep -q '"sticking_frac"' "$OUT/cmp8/$arm/seed1/metrics.jsonl" || fail "no metrics for the $arm arm"
done
grep -q "FP8-SR @ x" "$OUT/cmp8/RESULTS.md" || fail "the report does not name the FP8-SR arm"
grep -q "^## Drift of FP16's weights in FP8 E4M3 half-ulps" "$OUT/cmp8/RESULTS.md" || fail "no FP8 drift table"
"$PY" - "$OUT/cmp8/drift.json" "$OUT/cmp/drift.json" <<'EOF' || fail "FP8 drift.json"
import json, sys
d, bf16 = (json.load(open(p)) for p in sys.argv[1:])
assert d["grid"] == "FP8 E4M3" and d["fp8"] and not bf16.get("fp8"), (d["grid"], bf16["grid"])
for r in d["rows"]:
    m = r["fp8_matrices"]
    assert 0 < m["fraction_of_weights"] < 1 and 0 <= m["below_one"] <= 1, r
    assert 0 <= r["probe"]["bf16_rounded"] <= 1, r  # the master rounded to nearest on FP8's grid, evaluated
print("FP8 drift rows:", [(r["level"], r["step"], round(r["median"], 3), round(r["fp8_matrices"]["median"], 3))
                          for r in d["rows"]])
EOF
echo "compare ok"
