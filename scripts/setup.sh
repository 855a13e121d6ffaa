#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine for Unstuck and builds it (Release). Idempotent: rerunning
# skips what is already in place. Steps: Debian packages -> .venv with pinned PyTorch (whose
# libtorch we link) and the Python test/plot tools -> CMake configure + build in build/.
#
#   scripts/setup.sh              # everything
#   scripts/setup.sh --no-apt     # skip apt-get (packages already installed, or not root)
#   UNSTUCK_CUDA=OFF scripts/setup.sh   # build without our CUDA kernels / NCCL
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD_DIR=${UNSTUCK_BUILD_DIR:-build}
DO_APT=1
for arg in "$@"; do
  case "$arg" in
    --no-apt) DO_APT=0 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

APT_PACKAGES=(build-essential cmake ninja-build ccache pkg-config python3-venv
  libyaml-cpp-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libsentencepiece-dev sentencepiece
  libcli11-dev googletest libgtest-dev libgmock-dev libbenchmark-dev
  libpcre2-dev libutf8proc-dev libgmp-dev
  clang libclang-rt-14-dev libomp-14-dev clang-format-14)

step() { printf '\n[setup] %s\n' "$*"; }

if [[ $DO_APT == 1 ]]; then
  missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    step "installing Debian packages: ${missing[*]}"
    SUDO=""; [[ $(id -u) == 0 ]] || SUDO="sudo"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
  else
    step "Debian packages already installed"
  fi
fi

# The pinned torch wheel (CUDA build) plus its NVIDIA libraries unpack to ~6 GiB in .venv, and pip
# needs room for the download and unpack in $TMPDIR as well; say so up front instead of failing
# halfway through with pip's "No space left on device".
need_gib() {  # need_gib DIR GIB WHAT
  local avail_kib; avail_kib=$(df -Pk "$1" | awk 'NR==2 {print $4}')
  if ((avail_kib < $2 * 1024 * 1024)); then
    echo "setup.sh: $3 needs about $2 GiB free in $1, only $((avail_kib / 1024 / 1024)) GiB are available;" \
         "free some space (old build folders, clones, pip caches) and rerun" >&2
    exit 1
  fi
}
PY=${PYTHON:-python3}
if ! .venv/bin/python -c 'import torch' 2>/dev/null; then
  need_gib "$ROOT" 7 "the Python environment (.venv with torch)"
  need_gib "${TMPDIR:-/tmp}" 3 "pip's download and unpack"
fi
if [[ ! -x .venv/bin/python ]]; then
  step "creating virtual environment .venv"
  "$PY" -m venv .venv
fi
step "installing pinned Python packages (torch and test/plot tools) into .venv"
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r requirements.txt
step "installing the peers' reward packages (TRL, math-verify, verl) the compatibility tests run"
.venv/bin/python -m pip install -q -r requirements-peers.txt
.venv/bin/python -m pip install -q --no-deps verl==0.9.1

TORCH_PREFIX=$(.venv/bin/python -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
step "configuring ($BUILD_DIR, Release, torch at $TORCH_PREFIX)"
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
# ccache: hash paths relative to the checkout so fresh clones (CI) reuse earlier compilations.
export CCACHE_BASEDIR="$ROOT" CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
LAUNCHER=(); command -v ccache >/dev/null && LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
if [[ ! -f $BUILD_DIR/CMakeCache.txt ]]; then
  cmake -S . -B "$BUILD_DIR" "${GEN[@]}" "${LAUNCHER[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DUNSTUCK_CUDA="${UNSTUCK_CUDA:-AUTO}" \
    -DPython3_EXECUTABLE="$ROOT/.venv/bin/python"
fi
step "building"
cmake --build "$BUILD_DIR" -j "$(nproc)"
step "done: $BUILD_DIR/unstuck --version"
"$BUILD_DIR/unstuck" --version
