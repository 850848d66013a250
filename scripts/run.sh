#!/usr/bin/env bash
# Sets up, builds what can run on this machine, and runs the main job: `flashattn run` on its default
# backend (the GPU when there is one, else the CPU). Arguments are passed to `flashattn run`.
# Without a visible GPU only the CPU backend is built (into build-cpu), unless FLASHATTN_CUDA=ON.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${FLASHATTN_CUDA:-}" ]; then
  echo "run: building with FLASHATTN_CUDA=$FLASHATTN_CUDA (as set)"
elif nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  export FLASHATTN_CUDA=AUTO
  echo "run: GPU visible: building the CUDA kernels and the CPU backend"
else
  export FLASHATTN_CUDA=OFF
  echo "run: building the CPU backend only: no GPU visible (set FLASHATTN_CUDA=ON to build the CUDA kernels too)"
fi
# One build folder per CUDA setting, so that switching never reuses the other's configuration.
[ "$FLASHATTN_CUDA" = OFF ] && export FLASHATTN_BUILD_DIR=build-cpu || export FLASHATTN_BUILD_DIR=build
FLASHATTN_TARGET=flashattn_cli bash scripts/build.sh  # the CLI and the library, not the tests
echo "run: $FLASHATTN_BUILD_DIR/tools/flashattn/flashattn run $*"
exec "$FLASHATTN_BUILD_DIR/tools/flashattn/flashattn" run "$@"
