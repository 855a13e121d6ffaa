#!/usr/bin/env bash
# Downloads (here, where Debian's archive is reachable) the Debian development packages our build
# needs as .deb files into .gpu/debs, for scripts/gpu_check.sh on the GPU machine, which has no
# network and no apt: it unpacks them into a private prefix. .gpu/ is git-ignored; carry it with
# the working tree (about 5 MB; the run tool's `carry: [".gpu"]`).
#   scripts/gpu_debs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# -dev packages and the runtime libraries they link to (apt-get download fetches no dependencies).
GPU_DEBS=(libyaml-cpp-dev libyaml-cpp0.7 libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 nlohmann-json3-dev
  libsentencepiece-dev libsentencepiece0 libcli11-dev libgtest-dev libgmock-dev libpcre2-dev libpcre2-8-0
  libutf8proc-dev libutf8proc2 libgmp-dev libgmpxx4ldbl libgmp10 pkgconf pkgconf-bin libpkgconf3)
mkdir -p .gpu/debs
rm -f .gpu/debs/*.deb
(cd .gpu/debs && apt-get download "${GPU_DEBS[@]}")
du -sh .gpu/debs
