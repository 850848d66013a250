#!/usr/bin/env bash
# Sets up, builds, and runs the whole test suite (GPU tests skip visibly without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 1800
