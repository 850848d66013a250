#!/usr/bin/env bash
# Sets up, builds, and runs the main job: `flashattn run` on the machine's default backend
# (the GPU when there is one, else the CPU). Arguments are passed to `flashattn run`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
exec build/tools/flashattn/flashattn run "$@"
