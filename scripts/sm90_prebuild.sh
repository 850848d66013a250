#!/usr/bin/env bash
# Builds what scripts/sm90_check.sh runs (sm_90a only, head dims 64, 128, 192, 256) on this machine
# and packs it, so that a GPU machine spends its time on tests rather than on the compiler:
#
#   scripts/sm90_prebuild.sh [FILE]        (default .prebuilt/sm90a.tar.xz, an ignored path)
#   then on the GPU machine (carry [".prebuilt"]):
#   PREBUILT=.prebuilt/sm90a.tar.xz scripts/sm90_check.sh backward $OUT
# The pack holds the C library, the test binaries sm90_check.sh runs, the CLI and COMMIT (the commit
# built, with "+dirty" when the tree had changes): compare it with the tree before trusting a result.
set -euo pipefail
cd "$(dirname "$0")/.."
file=${1:-.prebuilt/sm90a.tar.xz}
B=${BUILD_DIR:-build-sm90-prebuilt}
cmake -S . -B "$B" -DFLASHATTN_CUDA=ON -DFLASHATTN_CUDA_ARCHS=90a "-DFLASHATTN_HEADDIMS=64;128;192;256" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$B" -j "$(nproc)" --target flashattn_cuda_tests diff_test edge_test grad_test flashattn_cli flashattn_c
commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- . ':!.prebuilt' || commit="$commit+dirty"
echo "$commit" >"$B/COMMIT"
mkdir -p "$(dirname "$file")"
tar -cJf "$file" -C "$B" COMMIT libflashattn_c.so tests/diff_test tests/edge_test tests/grad_test \
  tests/cuda/flashattn_cuda_tests tools/flashattn/flashattn
echo "sm90_prebuild: $file at $commit ($(du -h "$file" | cut -f1)); carry [\"$(dirname "$file")\"]"
