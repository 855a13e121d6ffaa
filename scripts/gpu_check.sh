#!/usr/bin/env bash
# ONE prepared check of the CUDA side, for the GPU machine as it is (docs/BUILD.md, "GPU"):
# no network, no apt, its own python3 with its own PyTorch (2.11 there, our pin is 2.14), nvcc,
# cmake, ninja. The Debian -dev packages travel as .deb files in .gpu/debs (scripts/gpu_debs.sh
# fetches them here) and are unpacked into the private prefix .gpu/prefix; the build uses that
# python's libtorch. Steps, each timed: prefix -> configure + build (UNSTUCK_CUDA=ON, sm_90), or the
# binaries built here (--prebuilt) -> [first CUDA step] CUDA kernel, model, sampling, SFT,
# device/pre-flight and NCCL tests -> a tiny SFT base -> 20 GRPO steps with run.device=cuda and
# run.device=cpu from it, compared step by step -> 3 fp8_sr and 3 LoRA GRPO steps on each -> `bench step
# --device cuda` -> `bench precision` on the host CPU -> `bench sample --device cuda` -> [--paper] the paper's GPU preset
# (reproduce.sh --gpu; GPU_CHECK_PAPER_PRESETS="paper-gpu paper-gpu-phase" adds its phase diagram,
# "paper-gpu-pool" runs it on a 64-prompt pool), reports, plots and metrics packed into
# $OUT/paper_gpu.tar.gz -> [--scale] at the size people train (scripts/gpu_scale.py: Qwen2.5-0.5B and
# 1.5B shapes, rollout against transformers' generate and the bandwidth limit, a GRPO step against
# TRL, training MFU, a 7B-shaped memory plan; $OUT/scale.json).
#   scripts/gpu_debs.sh                                   # here: fetch the .deb files (~5 MB)
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux2014_x86_64 -d .gpu/whl trl==1.16.0 datasets dill multiprocess  # here: TRL for --scale
#   UNSTUCK_GPU_PYTHON=/work/t211/bin/python3 scripts/gpu_check.sh --build-dir /work/build-t211 \
#       --no-prefix --pack .gpu/bin                       # here: build against the GPU machine's torch
#   scripts/gpu_check.sh --prebuilt .gpu/bin [--paper]    # there (carry [".gpu"]): no build, minutes saved
#   scripts/gpu_check.sh --prebuilt .gpu/bin --paper-only # there: the device check, then the preset(s)
#   scripts/gpu_check.sh --prebuilt .gpu/bin --scale      # there: the checks, then the scale measurements
#   scripts/gpu_check.sh --prebuilt .gpu/bin --scale-only # there: the device check, then the scale measurements
#   scripts/gpu_check.sh                                  # there: configure and build from source
#   scripts/gpu_check.sh --build-dir build --no-prefix    # dry run on a machine with the packages
#   scripts/gpu_check.sh --build-dir /tmp/x --configure-only  # checks the prefix alone, here too
#   scripts/gpu_check.sh --build-dir build --no-prefix --rehearse  # here: the steps after the CUDA
#       tests with run.device=cpu standing in for cuda (checks the script's own logic, not the GPU)
#   scripts/gpu_check.sh --build-dir build --no-prefix --rehearse --scale-only  # here: gpu_scale.py on
#       the CPU at 2 layers and a tiny work (checks its logic down to the first CUDA step)
# Everything it prints goes to $OUT/gpu_check.log too ($OUT: the device tool's; else
# BUILD_DIR/gpu_check); $OUT gets at most 8 files. Each step has a time limit inside one overall
# budget (GPU_CHECK_BUDGET_S, default 570 s: the device tool's 600 s per command less a margin), so a
# hang ends as a failure naming the step, "(timed out)", with the logs in place.
# Exit status: 0 all passed; 1 a check failed; 2 prefix, configure or build failed; 3 no usable CUDA
# device: everything before the first CUDA step passed and the script stopped there.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=build-gpu PREFIX_MODE=auto STEPS=20 CONFIGURE_ONLY=0 REHEARSE=0 PACK="" PREBUILT="" PAPER=0 SCALE=0
while (($#)); do
  case $1 in
    --build-dir) BUILD_DIR=$2; shift 2 ;;
    --no-prefix) PREFIX_MODE=off; shift ;;
    --steps) STEPS=$2; shift 2 ;;
    --configure-only) CONFIGURE_ONLY=1; shift ;;
    --rehearse) REHEARSE=1; shift ;;
    --pack) PACK=$2; shift 2 ;;
    --prebuilt) PREBUILT=$2; shift 2 ;;
    --paper) PAPER=1; shift ;;
    --paper-only) PAPER=2; shift ;;
    --scale) SCALE=1; shift ;;
    --scale-only) SCALE=2; shift ;;
    *) echo "gpu_check: unknown argument '$1' (--build-dir DIR, --no-prefix, --steps N, --configure-only, --rehearse, --pack DIR, --prebuilt DIR, --paper, --paper-only, --scale, --scale-only)" >&2; exit 2 ;;
  esac
done
[[ -n $PREBUILT ]] && BUILD_DIR=$PREBUILT
[[ $BUILD_DIR == /* ]] || BUILD_DIR=$ROOT/$BUILD_DIR
OUT_DIR=${OUT:-$BUILD_DIR/gpu_check}   # the run tool's $OUT comes back to the caller
mkdir -p "$OUT_DIR" "$BUILD_DIR"
exec > >(tee "$OUT_DIR/gpu_check.log") 2>&1
T0=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET_S:-570}
step() { printf '\n[gpu_check %4ds] %s\n' $(($(date +%s) - T0)) "$*"; }
fail() { echo "gpu_check: FAILED: $1 (after $(($(date +%s) - T0)) s)"; exit "${2:-1}"; }
# limited SECONDS CMD...: CMD under min(SECONDS, what is left of the budget); 124 when it ran out.
limited() {
  local want=$1 left=$((BUDGET - ($(date +%s) - T0))); shift
  ((left > 5)) || { echo "gpu_check: out of time (GPU_CHECK_BUDGET_S=$BUDGET) before: $*"; return 124; }
  timeout --kill-after=5 $((want < left ? want : left)) "$@"
}
# why RC: " (timed out)" for the exit status of a command that `limited` stopped.
why() { [[ $1 == 124 || $1 == 137 ]] && echo " (timed out)"; }
DEV=cuda
((REHEARSE)) && DEV=cpu   # --rehearse: the CPU stands in for the GPU in steps 6 and 7
# nvcc where CUDA installs it, when it is not on PATH.
if ! command -v nvcc > /dev/null; then
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [[ -x $d/nvcc ]] && { export PATH=$d:$PATH; break; }; done
fi

# ---- 1. private prefix of Debian packages -------------------------------------------------------
PFX=$ROOT/.gpu/prefix
if [[ $PREFIX_MODE == auto ]] && compgen -G ".gpu/debs/*.deb" > /dev/null; then
  step "unpacking $(ls .gpu/debs/*.deb | wc -l) .deb files into $PFX"
  rm -rf "$PFX" && mkdir -p "$PFX"
  for f in .gpu/debs/*.deb; do dpkg-deb -x "$f" "$PFX" 2> /dev/null || dpkg -x "$f" "$PFX" ||
    { ar p "$f" data.tar.xz | tar -xJ -C "$PFX"; } || fail "cannot unpack $f" 2; done
  # pkg-config files name /usr: point them at the prefix.
  find "$PFX" -name '*.pc' -exec sed -i "s#=/usr#=$PFX/usr#g" {} +
  LIB=$PFX/usr/lib/x86_64-linux-gnu
  export PKG_CONFIG_PATH=$LIB/pkgconfig:$PFX/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  export LD_LIBRARY_PATH=$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PATH=$PATH:$PFX/usr/bin   # pkg-config (pkgconf) only where the machine has none
  EXTRA_PREFIX="$PFX/usr;$LIB/cmake"
  command -v pkg-config > /dev/null || fail "no pkg-config after unpacking the prefix" 2
elif [[ $PREFIX_MODE == auto ]]; then
  step "no .gpu/debs/*.deb (run scripts/gpu_debs.sh where apt works): using the system's packages"
  EXTRA_PREFIX=""
else
  step "--no-prefix: using the system's packages"
  EXTRA_PREFIX=""
fi

# ---- 2. that machine's python and libtorch --------------------------------------------------------
PY=${UNSTUCK_GPU_PYTHON:-$(command -v python3)}
[[ -z ${UNSTUCK_GPU_PYTHON:-} && -x $ROOT/.venv/bin/python ]] && PY=$ROOT/.venv/bin/python  # here; absent there
TORCH_INFO=$("$PY" -c 'import torch, torch.utils; print(torch.utils.cmake_prefix_path, torch.__version__, torch.version.cuda)') ||
  fail "$PY has no torch" 2
read -r TORCH_PREFIX TORCH_VERSION TORCH_CUDA <<< "$TORCH_INFO"
step "python $PY, torch $TORCH_VERSION (CUDA $TORCH_CUDA) at $TORCH_PREFIX; nvcc: $(nvcc --version 2> /dev/null | tail -1 || echo none)"

# The sources the binaries are built from (what --prebuilt must match): every file under src,
# include, tests, cmake and the top CMakeLists.txt, by content.
source_hash() {
  find src include tests cmake CMakeLists.txt -type f -print0 2> /dev/null | LC_ALL=C sort -z | xargs -0 sha256sum |
    sha256sum | cut -c1-16
}

# ---- 3. configure and build, or the binaries built here ------------------------------------------
TARGETS=(unstuck test_precision test_dist test_model test_rollout test_train test_config)
if [[ -n $PREBUILT ]]; then
  step "prebuilt binaries in $BUILD_DIR (built against torch $(cat "$BUILD_DIR/TORCH_VERSION" 2> /dev/null || echo '?'))"
  [[ -x $BUILD_DIR/unstuck ]] || fail "--prebuilt $BUILD_DIR: no unstuck there (make it with --pack)" 2
  [[ $(cat "$BUILD_DIR/TORCH_VERSION" 2> /dev/null) == "$TORCH_VERSION" ]] ||
    fail "--prebuilt $BUILD_DIR was built against torch $(cat "$BUILD_DIR/TORCH_VERSION" 2> /dev/null || echo '?'), this python has $TORCH_VERSION" 2
  [[ $(cat "$BUILD_DIR/SOURCE_HASH" 2> /dev/null) == "$(source_hash)" ]] ||
    fail "--prebuilt $BUILD_DIR was built from other sources than this tree's (SOURCE_HASH differs): repack with --pack" 2
  # The libraries the binaries were linked against, from this machine's python (torch, NCCL, the
  # CUDA runtime) and the prefix (the Debian packages).
  SITE=${TORCH_PREFIX%/torch/share/cmake}  # torch.utils.cmake_prefix_path is site-packages/torch/share/cmake
  for d in "$SITE/torch/lib" "$SITE/nvidia/nccl/lib" "$SITE/nvidia/cu13/lib" "$SITE/nvidia/cuda_runtime/lib" \
    /usr/local/cuda/lib64 /usr/local/cuda/lib; do
    [[ -d $d ]] && export LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  done
  if missing=$(ldd "$BUILD_DIR/unstuck" | grep "not found"); then fail "unresolved libraries: $missing" 2; fi
else
  if [[ ! -f $BUILD_DIR/CMakeCache.txt ]]; then
    step "configuring $BUILD_DIR (Release, UNSTUCK_CUDA=ON, sm_90)"
    GEN=(); command -v ninja > /dev/null && GEN=(-G Ninja)
    limited 180 cmake -S . -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DUNSTUCK_CUDA=ON \
      -DUNSTUCK_CUDA_ARCHS=9.0 -DUNSTUCK_PCH=ON -DCMAKE_PREFIX_PATH="$TORCH_PREFIX${EXTRA_PREFIX:+;$EXTRA_PREFIX}" \
      -DPython3_EXECUTABLE="$PY" > "$OUT_DIR/configure.log" 2>&1 ||
      { rc=$?; tail -40 "$OUT_DIR/configure.log"; rm -f "$BUILD_DIR/CMakeCache.txt"; fail "configure$(why $rc)" 2; }
    grep -E "unstuck: CUDA kernels|PyTorch: CUDA detected|Added CUDA NVCC flags" "$OUT_DIR/configure.log"
  else
    step "reusing the configured $BUILD_DIR"
  fi
  if ((CONFIGURE_ONLY)); then
    grep -E "^(yaml-cpp|spdlog|fmt|nlohmann_json|CLI11|GTest)_DIR|^SentencePiece_LIBRARY|^pkgcfg_lib_PCRE2|^pkgcfg_lib_UTF8PROC|^UNSTUCK_GMP_LIBRARY|^Torch_DIR|^NCCL_(LIBRARY|INCLUDE_DIR)" "$BUILD_DIR/CMakeCache.txt"
    step "configured; stopping (--configure-only)"
    exit 0
  fi
  step "building ${TARGETS[*]} (-j $(nproc))"
  TORCH_CUDA_ARCH_LIST=9.0 limited 420 cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${TARGETS[@]}" \
    > "$OUT_DIR/build.log" 2>&1 ||
    { rc=$?; grep -E "error|FAILED" "$OUT_DIR/build.log" | head -40; tail -3 "$OUT_DIR/build.log"; fail "build$(why $rc)" 2; }
  if [[ -n $PACK ]]; then  # binaries for --prebuilt on the GPU machine (its libraries come from there)
    # A smoke run on this machine's CPU first: objects built while a header was being edited can keep
    # an old struct layout that ninja takes as up to date (it happened: `unstuck sft` crashed on exit and
    # `config check` aborted in ~RunConfig on the GPU machine, and here too).
    step "smoke test of $BUILD_DIR/unstuck on the CPU (a 4-step SFT, its config check)"
    SMOKE=$(mktemp -d)
    limited 120 "$BUILD_DIR/unstuck" sft --config configs/sft/arithmetic.yaml run.output_dir="$SMOKE" run.name=smoke \
      sft.output="$SMOKE/base" model.dim=32 model.n_layers=1 model.n_heads=2 model.n_kv_heads=1 model.ffn_dim=64 \
      sft.steps=4 sft.batch_size=4 sft.warmup_steps=1 sft.eval_every=0 sft.eval_samples=2 sft.log_every=4 \
      run.device=cpu > "$SMOKE/sft.log" 2>&1 &&
      limited 60 "$BUILD_DIR/unstuck" config check --config configs/sft/arithmetic.yaml run.output_dir="$SMOKE" \
        run.name=check run.device=cpu >> "$SMOKE/sft.log" 2>&1 ||
      { rc=$?; tail -5 "$SMOKE/sft.log"; rm -rf "$SMOKE"; fail "the built binaries fail a CPU smoke test (exit $rc): rebuild after touching the headers edited during the build" 2; }
    rm -rf "$SMOKE"
    rm -rf "$PACK" && mkdir -p "$PACK/tests"
    strip -o "$PACK/unstuck" "$BUILD_DIR/unstuck"
    for t in "${TARGETS[@]:1}"; do strip -o "$PACK/tests/$t" "$BUILD_DIR/tests/$t"; done
    echo "$TORCH_VERSION" > "$PACK/TORCH_VERSION"
    source_hash > "$PACK/SOURCE_HASH"
    step "packed $(du -sh "$PACK" | cut -f1) of binaries into $PACK (torch $TORCH_VERSION); stopping (--pack)"
    exit 0
  fi
fi
U=$BUILD_DIR/unstuck
"$U" --version | head -4
"$U" --version | grep -q "CUDA kernels: compiled in" || fail "$BUILD_DIR has no CUDA kernels (configure with UNSTUCK_CUDA=ON)" 2

# ---- 8. the paper's GPU presets (--paper, --paper-only), in what is left of the budget ------------
# GPU_CHECK_PAPER_PRESETS (default paper-gpu; e.g. "paper-gpu paper-gpu-phase", or paper-gpu-phase
# alone on a machine that still holds the first one's runs). The reports, plots and every run's
# metrics come back in $OUT/paper_gpu.tar.gz (no weights).
run_paper() {
  local preset rc=0
  for preset in ${GPU_CHECK_PAPER_PRESETS:-paper-gpu}; do
    step "paper GPU preset: scripts/compare.py --preset $preset (the rest of the budget)"
    UNSTUCK_BUILD_DIR=$BUILD_DIR PYTHONUNBUFFERED=1 limited 100000 "$PY" scripts/compare.py --preset "$preset" \
      --no-build --progress-every 20
    rc=$?
    ((rc == 0)) || break
  done
  tar -czf "$OUT_DIR/paper_gpu.tar.gz" --exclude='*.safetensors' --exclude='checkpoints' --exclude='*.bin' \
    --exclude='*.tfevents*' $(ls -d docs/RESULTS-gpu*.md docs/results/gpu* runs/paper-gpu* runs/sft-countdown-gpu 2> /dev/null)
  ls -la "$OUT_DIR/paper_gpu.tar.gz"
  ((rc == 0)) || fail "the paper GPU preset $preset$(why $rc)"
  step "paper GPU presets done"
}

# ---- 9. at the size people train (--scale, --scale-only; issue 27), in what is left of the budget ---
# scripts/gpu_scale.py: Qwen2.5-0.5B- and 1.5B-shaped models built on the device by transformers;
# rollout tokens/s against transformers' generate and the HBM-bandwidth limit, a GRPO step against
# TRL's GRPOTrainer with the training MFU, a 7B-shaped memory plan. TRL and the datasets package are
# not on the GPU machine: their wheels travel in .gpu/whl (here: pip download, docs/BUILD.md) and are
# installed into a private directory first. $OUT/scale.json holds every figure.
run_scale() {
  local left=$((BUDGET - ($(date +%s) - T0) - 15)) extra=()
  step "at the size people train: scripts/gpu_scale.py (${left} s of the budget)"
  if ((REHEARSE)); then
    extra=(--rehearse)
  elif compgen -G ".gpu/whl/*.whl" > /dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/unstuck_site \
      .gpu/whl/*.whl > "$LOGS/whl.log" 2>&1 && export PYTHONPATH=/tmp/unstuck_site${PYTHONPATH:+:$PYTHONPATH} ||
      { tail -5 "$LOGS/whl.log"; echo "gpu_check: the wheels in .gpu/whl did not install; TRL is left out"; }
  fi
  # GPU_SCALE_ARGS: more options of gpu_scale.py (e.g. --skip-hf qwen2.5-0.5b on a second lease).
  PYTHONUNBUFFERED=1 limited $((left + 10)) "$PY" scripts/gpu_scale.py --unstuck "$U" --out "$OUT_DIR" \
    --budget "$left" "${extra[@]}" ${GPU_SCALE_ARGS:-}
  local rc=$?
  ((rc == 0)) || fail "scripts/gpu_scale.py$(why $rc) (the figures so far are in $OUT_DIR/scale.json)"
  step "scale done"
}

# ---- 4. the first CUDA step: is there a device? --------------------------------------------------
# gtest_run LOG FILTER BINARY: runs the filtered tests; fails when one fails, none ran, or any skipped.
# Their logs stay in $LOGS ($OUT takes 8 files at most): gpu_check.log has their output.
LOGS=$BUILD_DIR/gpu_check_logs && mkdir -p "$LOGS"
gtest_run() {
  local log=$1 filter=$2 bin=$3
  limited 150 "$bin" --gtest_filter="$filter" --gtest_brief=1 > "$log" 2>&1
  local rc=$?
  cat "$log"
  ((rc == 0)) || fail "$(basename "$bin") --gtest_filter='$filter'$(why $rc)"
  grep -qE '^\[==========\] [1-9][0-9]* tests? from' "$log" || fail "$(basename "$bin"): no test matched '$filter'"
  ! grep -q "SKIPPED" "$log" || fail "$(basename "$bin"): tests were skipped on a machine with a device"
}
if ((REHEARSE)); then
  step "--rehearse: no CUDA device check and no CUDA tests; run.device=cpu stands in for cuda below"
  ((SCALE == 2)) && { run_scale; echo "gpu_check: OK (rehearsal of --scale-only on the CPU: no CUDA step ran)"; exit 0; }
else
  step "CUDA device"
  WHY=$("$PY" -c 'import torch; n = torch.cuda.device_count(); print(torch.cuda.get_device_name(0) if n else "torch.cuda.device_count() == 0")' 2>&1 | tail -1)
  if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2> /dev/null; then
    echo "gpu_check: reached the first CUDA step (CUDA kernel and NCCL tests) and found no usable CUDA device: $WHY"
    echo "gpu_check: everything before it passed (prefix, configure, build in $(($(date +%s) - T0)) s); stopping (exit 3)"
    exit 3
  fi
  nvidia-smi -L 2> /dev/null || true
  echo "device: $WHY"
  ((PAPER == 2)) && { run_paper; echo "gpu_check: OK (--paper-only)"; exit 0; }
  ((SCALE == 2)) && { run_scale; echo "gpu_check: OK (--scale-only)"; exit 0; }

  # ---- 5. CUDA kernel and NCCL tests -------------------------------------------------------------
  step "CUDA kernel tests (bits vs the CPU reference, TrainableWeights on the device)"
  gtest_run "$LOGS/cuda_tests.log" '*Cuda*:*DeviceIndependentKey*' "$BUILD_DIR/tests/test_precision"
  step "model, sampling and SFT on CUDA vs the CPU"
  gtest_run "$LOGS/model_tests.log" '*Cuda*' "$BUILD_DIR/tests/test_model"
  gtest_run "$LOGS/rollout_tests.log" '*Cuda*' "$BUILD_DIR/tests/test_rollout"
  gtest_run "$LOGS/sft_tests.log" 'Sft.TrainsOnTheConfiguredDevice' "$BUILD_DIR/tests/test_train"
  step "run.device on this machine and the pre-flight against the GPU's free memory"
  gtest_run "$LOGS/device_tests.log" 'ResolveDevice.ThisMachine:TrainMemory.GpuFreeMemoryOnThisMachine' "$BUILD_DIR/tests/test_config"
  step "NCCL tests (collectives on device buffers, sharded update)"
  gtest_run "$LOGS/nccl_tests.log" '*Nccl*' "$BUILD_DIR/tests/test_dist"
fi

# ---- 6. a tiny SFT base, then GRPO on cuda and on cpu ---------------------------------------------
# The work files stay in the build dir; $OUT gets the comparison and the metrics only.
W=$BUILD_DIR/gpu_check_work && rm -rf "$W" && mkdir -p "$W"
step "tiny SFT base (cpu)"
limited 180 "$U" sft --config configs/sft/arithmetic.yaml run.output_dir="$W" run.name=sft sft.output="$W/base" \
  model.dim=64 model.n_layers=2 model.n_heads=4 model.n_kv_heads=2 model.ffn_dim=128 sft.steps=40 \
  sft.batch_size=16 sft.warmup_steps=2 sft.eval_every=0 sft.eval_samples=8 sft.log_every=20 > "$W/sft.log" 2>&1 ||
  { rc=$?; tail -20 "$W/sft.log"; fail "tiny SFT base$(why $rc)"; }
cat > "$W/grpo.yaml" << EOF
run: {name: tiny, output_dir: $W/runs, seed: 1}
data: {task: arithmetic}
precision: {mode: fp32}
optim: {lr: 1.0e-3, beta2: 0.99, weight_decay: 0.0, grad_clip: 1.0}
rollout: {temperature: 1.0, max_new_tokens: 8}
grpo: {base_model: $W/base, steps: $STEPS, prompts_per_step: 8, group_size: 4, eval_samples: 8}
EOF
# Run "cuda" is on $DEV (cuda; cpu under --rehearse), run "cpu" on the CPU.
for run in cuda cpu; do
  dev=$run && [[ $run == cuda ]] && dev=$DEV
  step "GRPO $STEPS steps, run '$run', run.device=$dev"
  limited 200 "$U" train --config "$W/grpo.yaml" run.name="$run" run.device="$dev" > "$W/$run.log" 2>&1 ||
    { rc=$?; tail -30 "$W/$run.log"; fail "GRPO on $dev$(why $rc)"; }
  grep -E "device|memory" "$W/runs/$run/train.log" | head -4
done
if [[ $DEV == cuda ]]; then  # the grid-scaled analog is CPU only: refused before the run directory exists
  step "precision.analog_mantissa_bits with run.device=cuda is refused before the run starts"
  limited 60 "$U" train --config "$W/grpo.yaml" run.name=analog run.device=cuda precision.mode=bf16 \
    precision.analog_mantissa_bits=5 > "$W/analog.log" 2>&1 && fail "the analog on cuda was accepted"
  grep -q "analog_mantissa_bits (the grid-scaled analog) runs on the CPU only" "$W/analog.log" && [[ ! -e $W/runs/analog ]] ||
    { tail -5 "$W/analog.log"; fail "the analog on cuda: no clear refusal before the run directory"; }
  echo "refused: $(grep -o 'precision.analog_mantissa_bits (the grid.*' "$W/analog.log" | head -1)"
fi
step "cuda vs cpu, step by step"
limited 60 "$PY" - "$W/runs" "$OUT_DIR/grpo_metrics.jsonl" << 'EOF' 2>&1 | tee "$OUT_DIR/compare.txt"
# Tolerances: the sampled tokens depend on the logits, which differ between devices in the last
# bits (other matmul orders), so rewards are identical for the first steps only; after that the runs
# may sample different tokens, and the metrics are compared as trajectories.
import json, sys
def load(run):
    return [json.loads(l) for l in open(f"{sys.argv[1]}/{run}/metrics.jsonl") if '"step"' in l]
g, c = load("cuda"), load("cpu")
with open(sys.argv[2], "w") as out:  # both runs' metrics, for the report
    for run, rows in (("cuda", g), ("cpu", c)):
        for row in rows:
            out.write(json.dumps({"run": run, **row}) + "\n")
assert len(g) == len(c) > 0, f"{len(g)} cuda steps vs {len(c)} cpu steps"
keys = ["reward_mean", "accuracy", "entropy", "grad_norm", "kl_ref_k3", "step_seconds"]
print("step " + " ".join(f"{k:>24}" for k in keys) + "   (cuda/cpu)")
for a, b in zip(g, c):
    print(f"{a['step']:4d} " + " ".join(f"{a.get(k, float('nan')):11.5g}/{b.get(k, float('nan')):<12.5g}" for k in keys))
bad = []
first = 3
for a, b in zip(g[:first], c[:first]):
    if a["reward_mean"] != b["reward_mean"]: bad.append(f"step {a['step']}: rewards differ")
    if abs(a["entropy"] - b["entropy"]) > 1e-3 * max(1.0, abs(b["entropy"])): bad.append(f"step {a['step']}: entropy")
    if abs(a["grad_norm"] - b["grad_norm"]) > 1e-3 * max(1e-6, abs(b["grad_norm"])): bad.append(f"step {a['step']}: grad_norm")
mean = lambda xs: sum(xs) / len(xs)
tail = max(1, len(g) // 2)
dr = abs(mean([a["reward_mean"] for a in g[-tail:]]) - mean([b["reward_mean"] for b in c[-tail:]]))
if dr > 0.15: bad.append(f"mean reward of the last {tail} steps differs by {dr:.3f} > 0.15")
print("tolerances: steps 1-3 identical rewards, entropy and grad_norm within 1e-3 relative; "
      f"mean reward of the last {tail} steps within 0.15 (got {dr:.3f})")
print("OK" if not bad else "MISMATCH: " + "; ".join(bad))
sys.exit(1 if bad else 0)
EOF
rc=${PIPESTATUS[0]}
((rc == 0)) || fail "cuda and cpu runs differ beyond the tolerances$(why $rc)"

# FP8 E4M3 weights on the device (issue 30): the fused update, channel maxima and FP8 rounding run as
# CUDA kernels (their bits against the CPU's are CudaTrainableWeights.*fp8* above). LoRA (issue 28):
# rank-8 adapters on a frozen BF16 base, their master rounded by bf16_sr on the device, a KL penalty to
# the base. Three steps of each on $DEV and on the CPU; both must finish with sane sticking counts (and
# LoRA with a KL of 0 at step 1, up to summation order: B = 0). The rollouts of the two compute in BF16 on different
# devices, so the metrics are printed side by side, not required equal.
for arm in fp8 lora; do
  extra=(precision.mode=fp8_sr)
  [[ $arm == lora ]] && extra=(precision.mode=bf16_sr lora.rank=8 lora.alpha=16 grpo.kl_coef=0.01 optim.lr=1e-3)
  for run in ${arm}_cuda ${arm}_cpu; do
    dev=cpu && [[ $run == *_cuda ]] && dev=$DEV
    step "GRPO 3 steps, ${extra[*]}, run '$run', run.device=$dev"
    limited 120 "$U" train --config "$W/grpo.yaml" run.name="$run" run.device="$dev" "${extra[@]}" \
      grpo.steps=3 > "$W/$run.log" 2>&1 || { rc=$?; tail -30 "$W/$run.log"; fail "$arm GRPO on $dev$(why $rc)"; }
  done
  limited 30 "$PY" - "$W/runs" "$arm" << 'EOF' 2>&1 | tee "$LOGS/compare_$arm.txt"
import json, math, sys
def load(run):
    return [json.loads(l) for l in open(f"{sys.argv[1]}/{run}/metrics.jsonl") if '"step"' in l]
arm = sys.argv[2]
g, c = load(f"{arm}_cuda"), load(f"{arm}_cpu")
keys = ["reward_mean", "entropy", "grad_norm", "sticking_frac", "changed_from_start_frac"] + \
    (["kl_ref_exact"] if arm == "lora" else [])
print("step " + " ".join(f"{k:>26}" for k in keys) + "   (cuda/cpu)")
for a, b in zip(g, c):
    print(f"{a['step']:4d} " + " ".join(f"{a.get(k, float('nan')):12.6g}/{b.get(k, float('nan')):<13.6g}" for k in keys))
bad = [f"{run}: {len(rows)} steps, not 3" for run, rows in ((f"{arm}_cuda", g), (f"{arm}_cpu", c)) if len(rows) != 3]
for run, rows in ((f"{arm}_cuda", g), (f"{arm}_cpu", c)):
    for r in rows:
        s = r.get("sticking_frac", float("nan"))
        if not (math.isfinite(s) and 0.0 < s < 1.0): bad.append(f"{run} step {r['step']}: sticking_frac {s}")
    if arm == "lora" and rows and not abs(rows[0].get("kl_ref_exact", float("nan"))) <= 1e-6:
        bad.append(f"{run} step 1: kl_ref_exact {rows[0].get('kl_ref_exact')}, not 0 (B starts at 0)")
print("requires: 3 steps on each device, sticking_frac in (0, 1) at every step" +
      ("; LoRA: |kl_ref_exact| <= 1e-6 at step 1 (0 up to summation order)" if arm == "lora" else ""))
print("OK" if not bad else "MISMATCH: " + "; ".join(bad))
sys.exit(1 if bad else 0)
EOF
  rc=${PIPESTATUS[0]}
  ((rc == 0)) || fail "$arm on $DEV$(why $rc)"
done

# ---- 7. bench step on the device -----------------------------------------------------------------
step "bench step --device $DEV"
# MFU against the H200's dense BF16 tensor-core peak (989 TFLOP/s, NVIDIA's H200 SXM datasheet).
limited 200 "$U" bench step --device "$DEV" --peak-tflops 989 --config "$W/grpo.yaml" --model "$W/base" --json \
  > "$OUT_DIR/bench_step.json" 2> "$W/bench.log" || { rc=$?; tail -20 "$W/bench.log"; fail "bench step --device $DEV$(why $rc)"; }
cat "$OUT_DIR/bench_step.json"
echo

# ---- 8. the host CPU's rounding kernels against a copy (issue 15, item 3; informational) ----------
# The SR kernel's bandwidth against memcpy at 1 and 2 threads on this machine's CPU (the dev machine
# is an AMD EPYC; this one may be an Intel Xeon). Seconds; a failure here does not fail the check.
step "bench precision on the host CPU ($(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1))"
limited 60 "$U" bench precision --threads 2 --json 2> "$W/bench_precision.log" ||
  { tail -5 "$W/bench_precision.log"; echo "gpu_check: bench precision failed (informational)"; }
echo

# ---- 9. the fused sampler's CUDA twin against libtorch's ops (issue 52; informational) -------------
# Its bits against the CPU kernel's ran with the rollout tests above (SampleKernel.CudaDrawsTheCpuKernelsBits).
step "bench sample --device $DEV: one decode step's draw, the fused sampler against libtorch's ops"
sample_rows=256
((REHEARSE)) && sample_rows=8
limited 60 "$U" bench sample --device "$DEV" --rows "$sample_rows" --repeats 10 --json 2> "$W/bench_sample.log" ||
  { tail -5 "$W/bench_sample.log"; echo "gpu_check: bench sample failed (informational)"; }
echo
step "all checks passed"
((SCALE == 1)) && run_scale
((PAPER == 1)) && run_paper
((REHEARSE)) && echo "gpu_check: OK (rehearsal on the CPU: no CUDA step ran)" || echo "gpu_check: OK"
