#!/usr/bin/env bash
# The installed package, used the way a C++ project uses it: configures a CPU-only build of the
# library alone (no tests, tools or benchmarks), `cmake --install`s it into a temporary prefix,
# checks that the installed CMake files name nothing of the source or build tree, then builds
# examples/consumer/ against the prefix (find_package(flashattn CONFIG)) and runs its programs: a
# forward through the C++ API and one through the C ABI, each checked against a naive computation.
# About a minute on 2 cores. Environment: JOBS (default nproc), KEEP=1 keeps the temporary folder.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
jobs=${JOBS:-$(nproc)}
work=$(mktemp -d "${TMPDIR:-/tmp}/flashattn-consumer.XXXXXX")
if [ "${KEEP:-0}" = 1 ]; then echo "consumer_check: keeping $work"; else trap 'rm -rf "$work"' EXIT; fi

# Runs a step quietly into $work/<name>.log; on failure shows the log's end and stops.
step() {
  local name=$1
  shift
  "$@" >"$work/$name.log" 2>&1 || { echo "consumer_check: $name FAILED:"; tail -40 "$work/$name.log"; exit 1; }
}

step configure cmake -S . -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=OFF \
  -DFLASHATTN_BUILD_TESTS=OFF -DFLASHATTN_BUILD_TOOLS=OFF -DFLASHATTN_BUILD_BENCH=OFF
step build cmake --build "$work/build" -j "$jobs"
step install cmake --install "$work/build" --prefix "$work/prefix"
echo "consumer_check: installed to a temporary prefix:"
(cd "$work/prefix" && find . -type f | sort | sed 's|^\./|  |')

# The install interface must not point back into the tree it was built from.
if grep -lE "$(pwd)|$work/build" "$work"/prefix/lib*/cmake/flashattn/*.cmake; then
  echo "consumer_check: FAILED: the installed CMake files above name the source or build tree"
  exit 1
fi

step consumer-configure cmake -S examples/consumer -B "$work/consumer" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix"
step consumer-build cmake --build "$work/consumer" -j "$jobs"
"$work/consumer/consumer"
"$work/consumer/consumer_c"
echo "consumer_check: done in $(( $(date +%s) - start )) s"
