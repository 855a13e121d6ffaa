#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer build of the libtorch-free core and its test suites
# (tests/core_only) in build-asan/, then runs them with ctest. Extra arguments go to ctest.
#   scripts/sanitize.sh [-R Config]
# Uses clang when installed (else the default compiler); libtorch code is not covered: its library
# is not instrumented and mixing it with ASan gives false reports.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${UNSTUCK_ASAN_BUILD_DIR:-build-asan}
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"
compilers=()
command -v clang++ >/dev/null && compilers=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++)
cmake -S tests/core_only -B "$BUILD" -G Ninja "${compilers[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DUNSTUCK_CORE_TESTS=ON "-DCMAKE_CXX_FLAGS=$SAN" "-DCMAKE_C_FLAGS=$SAN" \
  $(command -v ccache >/dev/null && echo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache) >/dev/null
cmake --build "$BUILD" -j "$(nproc)"
export ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:check_initialization_order=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir "$BUILD" --output-on-failure -j "$(nproc)" "$@"
