#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (clang, ASan + UBSan, libtorch-free core) in build-fuzz/
# and runs each for a bounded time on a copy of its seed corpus (tests/fuzz/corpus/<target>/).
#   scripts/fuzz.sh [SECONDS_PER_TARGET=20] [TARGET ...]
# A crash leaves the input in build-fuzz/crashes/<target>/ and fails the script; turn it into a
# regression test (tests/faults) and a corpus entry.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-20}
shift || true
BUILD=${UNSTUCK_FUZZ_BUILD_DIR:-build-fuzz}
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"
cmake -S tests/core_only -B "$BUILD" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUNSTUCK_FUZZ=ON "-DCMAKE_CXX_FLAGS=$SAN" "-DCMAKE_C_FLAGS=$SAN" \
  $(command -v ccache >/dev/null && echo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache) >/dev/null
cmake --build "$BUILD" -j "$(nproc)"
targets=("$@")
if ((${#targets[@]} == 0)); then
  for f in tests/fuzz/fuzz_*.cpp; do targets+=("$(basename "$f" .cpp)"); done
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
