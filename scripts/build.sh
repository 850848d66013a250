#!/usr/bin/env bash
# Configures and builds (Release) into ${FLASHATTN_BUILD_DIR:-build}, showing progress.
# FLASHATTN_CUDA=ON|OFF|AUTO (default AUTO: the CUDA kernels when nvcc is found); extra CMake options:
# FLASHATTN_CMAKE_ARGS="-DFLASHATTN_CUDA_ARCHS=90a -DFLASHATTN_HEADDIMS=128 ...". JOBS (default nproc);
# FLASHATTN_TARGET builds one target only (default: all).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${FLASHATTN_BUILD_DIR:-build}
bash scripts/setup.sh
start=$(date +%s)
echo "build: configuring $dir (FLASHATTN_CUDA=${FLASHATTN_CUDA:-AUTO} ${FLASHATTN_CMAKE_ARGS:-})"
# Only the library's summary line of the configure step (errors and warnings go to stderr, shown).
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA="${FLASHATTN_CUDA:-AUTO}" \
  ${FLASHATTN_CMAKE_ARGS:-} | { grep -E '^-- flashattn:' || true; }
echo "build: compiling ${FLASHATTN_TARGET:-everything} in $dir with ${JOBS:-$(nproc)} jobs (the first build takes minutes)"
cmake --build "$dir" -j "${JOBS:-$(nproc)}" ${FLASHATTN_TARGET:+--target "$FLASHATTN_TARGET"}
echo "build: $dir done in $(( $(date +%s) - start )) s"
