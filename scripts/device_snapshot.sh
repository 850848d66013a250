#!/usr/bin/env bash
# Prepares .snap/ (ignored): the committed tree (git archive HEAD) plus GoogleTest sources, to carry
# to a GPU machine that has neither network nor GoogleTest. Builds there from exactly what is
# committed, whatever else is in the working tree. Then, on the GPU machine:
#   cd .snap && FLASHATTN_COMMIT=<short hash> BUILD_DIR=/tmp/bg bash scripts/gpu_check.sh $OUT
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .snap
mkdir -p .snap/.deps
git archive HEAD | tar -x -C .snap
git rev-parse --short HEAD >.snap/COMMIT  # the snapshot has no .git: gpu_check.sh reads this
src=${GTEST_SRC:-/usr/src/googletest}
[ -f "$src/CMakeLists.txt" ] || { echo "device_snapshot: no GoogleTest sources at $src (apt-get install googletest)"; exit 1; }
cp -r "$src" .snap/.deps/googletest
echo "device_snapshot: .snap at $(git rev-parse --short HEAD) ($(du -sh .snap | cut -f1)); carry [\".snap\"]"
