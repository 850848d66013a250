#!/usr/bin/env bash
# Builds what scripts/sm90_check.sh runs (sm_90a only, head dims 64, 128, 192, 256) on this machine
# and packs it, so that a GPU machine spends its time on tests rather than on the compiler:
#
#   scripts/sm90_prebuild.sh [FILE]        (default .prebuilt/sm90a.tar.xz, an ignored path)
#   then on the GPU machine (carry [".prebuilt"]):
#   PREBUILT=.prebuilt/sm90a.tar.xz scripts/sm90_check.sh backward $OUT
# It builds the committed HEAD, not the working tree: a git worktree at PREBUILD_DIR (default
# /tmp/flashattn-prebuild; kept, so a later run recompiles only what changed), checked out at HEAD.
# The pack holds the C library, the test binaries sm90_check.sh runs, the CLI, diff_test and
# kvcache_test built with FLASHATTN_HANG_WATCHDOG (watchdog/) and COMMIT.
set -euo pipefail
cd "$(dirname "$0")/.."
file=$(realpath -m "${1:-.prebuilt/sm90a.tar.xz}")
dir=${PREBUILD_DIR:-/tmp/flashattn-prebuild}
commit=$(git rev-parse --short HEAD)
if [ -d "$dir/src/.git" ] || [ -f "$dir/src/.git" ]; then
  git -C "$dir/src" checkout -q --detach "$commit"
else
  mkdir -p "$dir"
  git worktree add -q --detach "$dir/src" "$commit"
fi
B=$dir/build W=$dir/build-watchdog
config=(-DFLASHATTN_CUDA=ON -DFLASHATTN_CUDA_ARCHS=90a "-DFLASHATTN_HEADDIMS=64;128;192;256" -DCMAKE_BUILD_TYPE=Release)
cmake -S "$dir/src" -B "$B" "${config[@]}" >/dev/null
cmake --build "$B" -j "$(nproc)" --target flashattn_cuda_tests diff_test edge_test grad_test kvcache_test flashattn_cli \
  flashattn_c
# diff_test and kvcache_test once more with FLASHATTN_HANG_WATCHDOG: sm90_check.sh runs one on a case
# that hung, and its mbarrier waits then say which barrier of which block stopped.
cmake -S "$dir/src" -B "$W" "${config[@]}" -DFLASHATTN_HANG_WATCHDOG=ON >/dev/null
cmake --build "$W" -j "$(nproc)" --target diff_test kvcache_test
mkdir -p "$B/watchdog" && cp "$W/tests/diff_test" "$W/tests/kvcache_test" "$B/watchdog/"
echo "$commit" >"$B/COMMIT"
mkdir -p "$(dirname "$file")"
tar -cJf "$file" -C "$B" COMMIT libflashattn_c.so tests/diff_test tests/edge_test tests/grad_test tests/kvcache_test \
  tests/cuda/flashattn_cuda_tests tools/flashattn/flashattn watchdog/diff_test watchdog/kvcache_test
echo "sm90_prebuild: $file at $commit ($(du -h "$file" | cut -f1)); carry [\".prebuilt\"]"
