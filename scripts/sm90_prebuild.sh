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
#   VARIANTS="NAME=PATCH ...": also the C library of HEAD with each patch applied (a worktree per
#   name under PREBUILD_DIR, kept), as variants/NAME.so in the pack, for the benchmark's
#   --variant NAME=BUILD_DIR/variants/NAME.so@PATH beside HEAD's in one process.
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
variant_files=()
rm -rf "$B/variants"
for v in ${VARIANTS:-}; do
  name=${v%%=*} patch=$(realpath "${v#*=}")
  src=$dir/variant-$name/src build=$dir/variant-$name/build
  if [ -d "$src/.git" ] || [ -f "$src/.git" ]; then
    git -C "$src" checkout -q -f --detach "$commit"
    git -C "$src" clean -fdq  # the files the patch added last time (the build is outside src)
  else
    mkdir -p "$dir/variant-$name"
    git worktree add -q --detach "$src" "$commit"
  fi
  git -C "$src" apply "$patch"
  cmake -S "$src" -B "$build" "${config[@]}" >/dev/null
  cmake --build "$build" -j "$(nproc)" --target flashattn_c
  mkdir -p "$B/variants" && cp "$build/libflashattn_c.so" "$B/variants/$name.so"
  variant_files+=("variants/$name.so")
done
mkdir -p "$(dirname "$file")"
tar -cJf "$file" -C "$B" COMMIT libflashattn_c.so tests/diff_test tests/edge_test tests/grad_test tests/kvcache_test \
  tests/cuda/flashattn_cuda_tests tools/flashattn/flashattn watchdog/diff_test watchdog/kvcache_test \
  ${variant_files[@]+"${variant_files[@]}"}
echo "sm90_prebuild: $file at $commit ($(du -h "$file" | cut -f1)); carry [\".prebuilt\"]"
