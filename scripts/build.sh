#!/usr/bin/env bash
# Configures and builds into ./build (Release). CUDA is used when nvcc is found.
# Extra CMake options: FLASHATTN_CMAKE_ARGS="-DFLASHATTN_HEADDIMS=128 ...".
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${FLASHATTN_CMAKE_ARGS:-} >/dev/null
cmake --build build -j "$(nproc)"
