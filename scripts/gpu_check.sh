#!/usr/bin/env bash
# Checks the CUDA side of Unstuck on a machine with an NVIDIA GPU, its driver and the CUDA toolkit
# (nvcc, NCCL): sets up and builds with our CUDA kernels (UNSTUCK_CUDA=ON) through scripts/setup.sh,
# prints `unstuck --version`, then runs every ctest test whose name contains "Cuda" (the device
# kernels against the CPU reference, bit for bit) or "Nccl" (the NCCL communicator's collectives
# against a single-process reference and the ZeRO-1 sharded update against the unsharded one, one
# rank per visible GPU: world size 1 on a single GPU; CUDA_VISIBLE_DEVICES picks them). Exits
# non-zero when the build or a test fails, and also when a test was skipped, which means no usable
# device was found.
#
#   scripts/gpu_check.sh             # Debian packages too (root or sudo)
#   scripts/gpu_check.sh --no-apt    # packages already installed
#   UNSTUCK_BUILD_DIR=build-gpu scripts/gpu_check.sh --no-apt
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${UNSTUCK_BUILD_DIR:-build}
export UNSTUCK_CUDA=ON
# libtorch's CMake package adds its own -gencode list (default: every arch it knows, some of which
# nvcc 13 rejects); TORCH_CUDA_ARCH_LIST pins it to the archs we build for (A100, H100/H200).
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-8.0;9.0}

# setup.sh configures only a fresh build dir; force CUDA on in an existing one.
if [[ -f $BUILD_DIR/CMakeCache.txt ]]; then
  cmake -S . -B "$BUILD_DIR" -DUNSTUCK_CUDA=ON >/dev/null
fi
UNSTUCK_BUILD_DIR=$BUILD_DIR scripts/setup.sh "$@"   # packages, .venv, configure, build, --version

printf '\n[gpu_check] CUDA and NCCL tests\n'
log=$(mktemp)
trap 'rm -f "$log"' EXIT
ctest --test-dir "$BUILD_DIR" -R 'Cuda|Nccl' --no-tests=error --output-on-failure 2>&1 | tee "$log"
if grep -q 'Skipped' "$log"; then
  echo "gpu_check: CUDA/NCCL tests were skipped (no usable CUDA device?); for the reason run" \
       "$BUILD_DIR/tests/test_precision --gtest_filter='*Cuda*' or $BUILD_DIR/tests/test_dist --gtest_filter='Nccl.*'" >&2
  exit 1
fi
echo "gpu_check: OK"
