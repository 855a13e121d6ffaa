#!/usr/bin/env bash
# Sets up and builds Unstuck (scripts/setup.sh, idempotent), then runs every test suite with ctest,
# then each fuzz target for a bounded time (scripts/fuzz.sh). Extra arguments go to ctest (and skip
# the fuzzing), e.g. scripts/test.sh -R Rounding
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${UNSTUCK_BUILD_DIR:-build}
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" "$@"
# libFuzzer targets (tests/fuzz), UNSTUCK_FUZZ_SECONDS each (0 skips); needs clang (scripts/setup.sh).
FUZZ_SECONDS=${UNSTUCK_FUZZ_SECONDS:-20}
if (($# == 0 && FUZZ_SECONDS > 0)) && command -v clang++ >/dev/null; then
  scripts/fuzz.sh "$FUZZ_SECONDS"
fi
