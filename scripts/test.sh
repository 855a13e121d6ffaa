#!/usr/bin/env bash
# Sets up and builds Unstuck (scripts/setup.sh, idempotent), then runs every test suite with ctest.
# Extra arguments go to ctest, e.g. scripts/test.sh -R Rounding
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${UNSTUCK_BUILD_DIR:-build}
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" "$@"
