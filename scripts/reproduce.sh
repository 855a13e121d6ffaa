#!/usr/bin/env bash
# Reproduces the comparison of arXiv 2611.13545 on the embedded default (countdown, SFT base policy)
# with one command: builds if needed, trains (or reuses) the base policy, runs every arm of
# configs/paper/ for several paired seeds, then writes the plots and the results table.
#
#   scripts/reproduce.sh --quick     # 6 arms x 3 seeds x 40 steps; at most 30 minutes on 2 cores
#   scripts/reproduce.sh --full      # 6 arms x 5 seeds x 180 steps (about 1.5 hours on 2 cores)
#   scripts/reproduce.sh --smoke     # pipeline check in about a minute (tiny base, 1 seed, 4 steps)
#
# Options: --out DIR (sweep folder; default runs/paper-<preset>), --results FILE (default
# docs/RESULTS.md for --quick/--full, <out>/RESULTS.md otherwise), --plots DIR (default
# docs/results/<preset> or <out>/plots), --seeds N, --steps N, --arms "fp16 bf16 ...", --jobs J
# (runs at a time, default: one per core; every run computes on one thread, so its numbers do not
# depend on the machine's core count), --base DIR (base policy to start from),
# --no-build. UNSTUCK_BUILD_DIR picks another build folder (default build/).
# Ctrl-C stops cleanly (the running arms checkpoint); rerunning the same command resumes: finished
# runs are kept and an interrupted one continues bit-exactly from its last checkpoint.
set -euo pipefail
# The body is one brace group, parsed before it runs, so editing this file during a sweep is safe.
{
cd "$(dirname "$0")/.."
ROOT=$(pwd)
COMMAND_LINE="scripts/reproduce.sh${*:+ $(printf '%q ' "$@" | sed 's/ $//')}"

PRESET=quick
OUT="" RESULTS="" PLOTS="" SEEDS="" STEPS="" ARMS="" JOBS="" BASE="" BUILD=1
usage() { sed -n '2,17p' "$0"; }
die() { echo "reproduce.sh: error: $*" >&2; exit 2; }
while (($#)); do
  case "$1" in
    --quick) PRESET=quick ;;
    --full) PRESET=full ;;
    --smoke) PRESET=smoke ;;
    --out) OUT=${2:?--out needs a folder}; shift ;;
    --results) RESULTS=${2:?--results needs a file}; shift ;;
    --plots) PLOTS=${2:?--plots needs a folder}; shift ;;
    --seeds) SEEDS=${2:?--seeds needs a number}; shift ;;
    --steps) STEPS=${2:?--steps needs a number}; shift ;;
    --arms) ARMS=${2:?--arms needs a list}; shift ;;
    --jobs) JOBS=${2:?--jobs needs a number}; shift ;;
    --base) BASE=${2:?--base needs a folder}; shift ;;
    --no-build) BUILD=0 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (try --help)" ;;
  esac
  shift
done

# Presets: steps, seeds, evaluation cadence and size. Everything else comes from configs/paper/.
case "$PRESET" in
  quick) P_STEPS=40 P_SEEDS=3 EVAL_EVERY=10 EVAL_SAMPLES=200 CKPT_EVERY=20 ;;
  full) P_STEPS=180 P_SEEDS=5 EVAL_EVERY=15 EVAL_SAMPLES=500 CKPT_EVERY=30 ;;
  smoke) P_STEPS=4 P_SEEDS=1 EVAL_EVERY=2 EVAL_SAMPLES=16 CKPT_EVERY=2 ;;
esac
STEPS=${STEPS:-$P_STEPS}
SEEDS=${SEEDS:-$P_SEEDS}
ARMS=${ARMS:-"fp32 fp16 bf16 bf16_lr_k bf16_sr fp16_sr"}
OUT=${OUT:-runs/paper-$PRESET}
if [[ $PRESET == smoke ]]; then
  RESULTS=${RESULTS:-$OUT/RESULTS.md}
  PLOTS=${PLOTS:-$OUT/plots}
else
  RESULTS=${RESULTS:-docs/RESULTS.md}
  PLOTS=${PLOTS:-docs/results/$PRESET}
fi
JOBS=${JOBS:-$(nproc)}
for n in "$STEPS" "$SEEDS" "$JOBS"; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || die "--steps, --seeds and --jobs take positive integers, got '$n'"
done
for arm in $ARMS; do
  [[ -f configs/paper/$arm.yaml ]] || die "unknown arm '$arm': no configs/paper/$arm.yaml (arms: $(ls configs/paper | sed 's/\.yaml$//' | tr '\n' ' '))"
done

say() { printf '[reproduce] %s\n' "$*"; }
BUILD_DIR=${UNSTUCK_BUILD_DIR:-build}
UNSTUCK=$BUILD_DIR/unstuck
PY=.venv/bin/python

# ---- build (scripts/setup.sh on a fresh checkout; otherwise an incremental build)
if [[ $BUILD == 1 ]]; then
  if [[ ! -x $UNSTUCK || ! -x $PY ]]; then
    say "setting up and building (scripts/setup.sh)"
    scripts/setup.sh
  else
    say "building (incremental)"
    if ! cmake --build "$BUILD_DIR" --target unstuck -j "$(nproc)" > "$BUILD_DIR/reproduce-build.log" 2>&1; then
      tail -n 30 "$BUILD_DIR/reproduce-build.log" >&2
      die "the build failed (full log: $BUILD_DIR/reproduce-build.log)"
    fi
  fi
fi
[[ -x $UNSTUCK ]] || die "$UNSTUCK not found; run scripts/setup.sh first (or drop --no-build)"
[[ -x $PY ]] || die "$PY not found; run scripts/setup.sh first (the plots need its matplotlib)"

mkdir -p "$OUT"
T_SWEEP=$(date +%s)
TIMING_BASE="the base policy given by --base"

# ---- base policy: the SFT output of configs/sft/countdown.yaml (trained once, then reused)
if [[ -z $BASE ]]; then
  if [[ $PRESET == smoke ]]; then
    BASE=$OUT/sft-smoke/model
    SFT_ARGS=(precision.threads=1 run.output_dir="$OUT" run.name=sft-smoke sft.steps=30 sft.eval_every=0 sft.eval_samples=16 sft.log_every=10)
    SFT_NOTE="a 30-step base for the smoke test"
  else
    BASE=runs/sft-countdown/model
    SFT_ARGS=(precision.threads=1)
    SFT_NOTE="about 5 minutes on one core"
  fi
fi

# ---- the sweep description; a rerun must describe the same sweep to resume it
COMMIT=$(git rev-parse --short HEAD 2> /dev/null || echo unknown)
[[ -z $(git status --porcelain --untracked-files=no -- src include configs scripts CMakeLists.txt 2> /dev/null) ]] ||
  COMMIT+=" + local changes"
$PY -c 'import json, sys; k = ["preset", "steps", "seeds", "arms", "base", "eval_every", "eval_samples", "command", "commit"]
d = dict(zip(k, sys.argv[2:]))
for n in ("steps", "seeds", "eval_every", "eval_samples"): d[n] = int(d[n])
json.dump(d, open(sys.argv[1], "w"), indent=1)' "$OUT/sweep.json.new" "$PRESET" "$STEPS" "$SEEDS" "$ARMS" "$BASE" \
  "$EVAL_EVERY" "$EVAL_SAMPLES" "$COMMAND_LINE" "$COMMIT"
if [[ -f $OUT/sweep.json ]]; then
  if ! $PY - "$OUT/sweep.json" "$OUT/sweep.json.new" <<'EOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
keys = ["steps", "seeds", "arms", "base", "eval_every", "eval_samples"]
diff = [k for k in keys if a.get(k) != b.get(k)]
if diff:
    print("; ".join(f"{k}: {a.get(k)!r} there, {b.get(k)!r} now" for k in diff))
    sys.exit(1)
EOF
  then
    rm -f "$OUT/sweep.json.new"
    die "$OUT holds a different sweep (above); pick another --out or delete it"
  fi
fi
mv "$OUT/sweep.json.new" "$OUT/sweep.json"

if [[ ${SFT_ARGS+set} && ! -f $BASE/sft_result.json ]]; then
  TIMING_BASE="including the SFT of the base policy"
  say "training the base policy by SFT (configs/sft/countdown.yaml; $SFT_NOTE)"
  "$UNSTUCK" sft --config configs/sft/countdown.yaml "${SFT_ARGS[@]}"
elif [[ ${SFT_ARGS+set} ]]; then
  say "reusing the base policy $BASE (delete it to retrain)"
  TIMING_BASE="the base policy reused"
fi
[[ -f $BASE/model.safetensors ]] || die "base policy '$BASE' has no model.safetensors"

if [[ ! -f $OUT/base_eval.json ]]; then
  say "evaluating the base policy (greedy, BF16 weights, $EVAL_SAMPLES test records)"
  "$UNSTUCK" eval --model "$BASE" --samples "$EVAL_SAMPLES" --dtype bf16 --json > "$OUT/base_eval.json.tmp"
  mv "$OUT/base_eval.json.tmp" "$OUT/base_eval.json"
fi

# ---- the runs, seed-major so an interrupted sweep has every arm for the seeds it finished
RUNS=()
for ((s = 1; s <= SEEDS; ++s)); do for arm in $ARMS; do RUNS+=("$arm:$s"); done; done
TOTAL=${#RUNS[@]}
run_dir() { echo "$OUT/${1%%:*}/seed${1##*:}"; }
is_done() { [[ -f $(run_dir "$1")/checkpoints/$(printf step_%08d "$STEPS")/manifest.json ]]; }
steps_done() {
  local f; f=$(run_dir "$1")/metrics.jsonl
  [[ -f $f ]] && wc -l < "$f" || echo 0
}
start_run() {  # arm:seed -> background trainer, console output in <run dir>.console.log
  local arm=${1%%:*} seed=${1##*:} dir
  dir=$(run_dir "$1")
  mkdir -p "$OUT/$arm"
  local args=(train)
  if compgen -G "$dir/checkpoints/step_*/manifest.json" > /dev/null; then
    args+=(--resume "$dir")
  else
    rm -rf "$dir"  # killed before its first checkpoint: nothing to keep
    args+=(--config "configs/paper/$arm.yaml" run.output_dir="$OUT/$arm" run.name="seed$seed" run.seed="$seed"
           grpo.steps="$STEPS" grpo.eval_every="$EVAL_EVERY" grpo.eval_samples="$EVAL_SAMPLES"
           grpo.checkpoint_every="$CKPT_EVERY" grpo.base_model="$BASE" precision.threads=1)
  fi
  "$UNSTUCK" "${args[@]}" > "$dir.console.log" 2>&1 &
  PIDS[$!]=$1
}

declare -A PIDS=()
STOPPING=0
stop_all() {  # SIGTERM: every running trainer finishes its step, checkpoints and exits
  for pid in "${!PIDS[@]}"; do kill -TERM "$pid" 2> /dev/null || true; done
}
on_signal() {
  STOPPING=1
  say "stopping: the running arms checkpoint and exit; rerun the same command to resume"
  stop_all
}
trap on_signal INT TERM

fmt_time() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
DONE=0
for r in "${RUNS[@]}"; do is_done "$r" && DONE=$((DONE + 1)); done
RESUMED=$DONE
((DONE == 0)) || say "$DONE of $TOTAL runs already finished in $OUT"
say "sweep: $TOTAL runs (arms: $ARMS; seeds 1..$SEEDS; $STEPS steps each; $JOBS at a time, one thread each)"
T_RUNS=$(date +%s)
STEPS_AT_START=0
for r in "${RUNS[@]}"; do STEPS_AT_START=$((STEPS_AT_START + $(steps_done "$r"))); done
NEXT=0
LAST_STATUS=0
while :; do
  while ((STOPPING == 0 && ${#PIDS[@]} < JOBS && NEXT < TOTAL)); do
    r=${RUNS[$NEXT]}; NEXT=$((NEXT + 1))
    is_done "$r" && continue
    start_run "$r"
  done
  ((${#PIDS[@]} > 0)) || break
  sleep 2
  for pid in "${!PIDS[@]}"; do
    kill -0 "$pid" 2> /dev/null && continue
    r=${PIDS[$pid]}; unset "PIDS[$pid]"
    rc=0; wait "$pid" || rc=$?
    dir=$(run_dir "$r")
    if ((rc != 0)); then
      stop_all
      wait || true
      tail -n 15 "$dir.console.log" >&2
      die "run ${r%%:*} seed ${r##*:} failed (exit $rc); log: $dir.console.log"
    fi
    if ! is_done "$r" && ((STOPPING == 0)); then  # stopped by a signal of its own: stop the sweep too
      stop_all
      STOPPING=1
      say "run ${r%%:*} seed ${r##*:} stopped before its last step (log: $dir.console.log)"
    fi
    if is_done "$r"; then
      DONE=$((DONE + 1))
      summary=$($PY -c 'import json,sys
m=[json.loads(l) for l in open(sys.argv[1])]
e=[x["eval_accuracy"] for x in m if "eval_accuracy" in x]
print("reward %.3f, eval acc %.3f, KL %.2e, sticking %.2f" % (sum(x["reward_mean"] for x in m[-10:])/len(m[-10:]), e[-1], m[-1]["kl_ref_exact"], m[-1]["sticking_frac"]))' "$dir/metrics.jsonl")
      say "[$DONE/$TOTAL] ${r%%:*} seed ${r##*:} done: $summary"
    fi
  done
  now=$(date +%s)
  if ((now - LAST_STATUS >= 30 && ${#PIDS[@]} > 0)); then
    LAST_STATUS=$now
    total_done=0 running=""
    for r in "${RUNS[@]}"; do total_done=$((total_done + $(steps_done "$r"))); done
    for pid in "${!PIDS[@]}"; do r=${PIDS[$pid]}; running+=" ${r%%:*}/seed${r##*:} step $(steps_done "$r")/$STEPS"; done
    new=$((total_done - STEPS_AT_START)); eta="?"
    ((new > 0)) && eta=$(fmt_time $(( (now - T_RUNS) * (TOTAL * STEPS - total_done) / new )))
    say "progress: $total_done/$((TOTAL * STEPS)) steps, $(fmt_time $((now - T_SWEEP))) elapsed, ETA $eta |$running"
  fi
done
if ((STOPPING)); then
  say "interrupted after $DONE of $TOTAL runs; rerun \`$COMMAND_LINE\` to resume"
  exit 130
fi

# ---- plots and the results table
say "all $TOTAL runs finished in $(fmt_time $(( $(date +%s) - T_SWEEP ))); writing plots ($PLOTS) and $RESULTS"
ELAPSED=$(( $(date +%s) - T_SWEEP ))
TIMING="$((ELAPSED / 60)) min $((ELAPSED % 60)) s on $(nproc) cores, $TIMING_BASE"
((RESUMED == 0)) || TIMING="resumed with $RESUMED of $TOTAL runs done; this invocation took $TIMING"
$PY scripts/paper_report.py --sweep "$OUT" --results "$RESULTS" --plots "$PLOTS" --timing "$TIMING"
say "done: $RESULTS"
exit 0
}
