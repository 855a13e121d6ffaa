#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (clang, ASan + UBSan) in build-fuzz/ and runs each for a
# bounded time on a copy of its seed corpus (tests/fuzz/corpus/<target>/). Our code is instrumented;
# targets over libtorch code (fuzz_checkpoint) link the venv's prebuilt libtorch as it is, and are
# left out when no Python with torch is found (UNSTUCK_PYTHON, else .venv/bin/python).
#   scripts/fuzz.sh [SECONDS_PER_TARGET=20] [TARGET ...]
# A crash leaves the input in build-fuzz/crashes/<target>/ and fails the script; turn it into a
# regression test (tests/faults) and a corpus entry.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-20}
shift || true
BUILD=${UNSTUCK_FUZZ_BUILD_DIR:-build-fuzz}
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"
PY=${UNSTUCK_PYTHON:-.venv/bin/python}
TORCH_ARGS=(-DUNSTUCK_FUZZ_TORCH=OFF)
if torch_prefix=$("$PY" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' 2>/dev/null); then
  TORCH_ARGS=(-DUNSTUCK_FUZZ_TORCH=ON "-DCMAKE_PREFIX_PATH=$torch_prefix")
  export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-8.0;9.0}  # as the main build (CUDA 13 dropped older)
else
  echo "[fuzz] no Python with torch ($PY): fuzz_checkpoint is not built"
fi
cmake -S tests/core_only -B "$BUILD" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUNSTUCK_FUZZ=ON "${TORCH_ARGS[@]}" "-DCMAKE_CXX_FLAGS=$SAN" "-DCMAKE_C_FLAGS=$SAN" \
  $(command -v ccache >/dev/null && echo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache) >/dev/null
cmake --build "$BUILD" -j "$(nproc)"
targets=("$@")
if ((${#targets[@]} == 0)); then
  for f in tests/fuzz/fuzz_*.cpp; do
    [[ -x "$BUILD/$(basename "$f" .cpp)" ]] && targets+=("$(basename "$f" .cpp)")
  done
fi
export ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1
[[ -d /dev/shm && -w /dev/shm ]] && export TMPDIR=/dev/shm  # the file-reading targets' scratch files
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
for t in "${targets[@]}"; do
  corpus="$BUILD/corpus/$t" crashes="$BUILD/crashes/$t"
  mkdir -p "$corpus" "$crashes"
  [[ -d tests/fuzz/corpus/$t ]] && cp -n tests/fuzz/corpus/$t/* "$corpus"/ 2>/dev/null || true
  echo "[fuzz] $t for ${SECONDS_PER_TARGET}s"
  if ! "$BUILD/$t" "$corpus" -max_total_time="$SECONDS_PER_TARGET" -max_len=65536 -rss_limit_mb=2048 \
       -timeout=10 -seed=1 -print_final_stats=1 -artifact_prefix="$crashes/" 2>"$BUILD/$t.log"; then
    echo "[fuzz] $t FAILED; input(s) in $crashes, log in $BUILD/$t.log"
    tail -40 "$BUILD/$t.log"
    status=1
  else
    grep -E "stat::number_of_executed_units|cov:" "$BUILD/$t.log" | tail -2
  fi
done
exit $status
