#!/usr/bin/env bash
# Sets up, builds into ./build (the CUDA kernels too when nvcc is found: FLASHATTN_CUDA=AUTO), and runs
# the whole test suite; GPU cases skip visibly without a GPU, and the skip reasons are summed up.
set -euo pipefail
cd "$(dirname "$0")/.."
FLASHATTN_BUILD_DIR=build bash scripts/build.sh
rc=0
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 1800 || rc=$?
# GoogleTest prints a skipped case's reason on the line after "file:line: Skipped".
log=build/Testing/Temporary/LastTest.log
if [ -f "$log" ] && grep -q ': Skipped$' "$log"; then
  echo "test: skipped GoogleTest cases by reason (a ctest entry may hold many):"
  awk '/: Skipped$/ { getline r; print (r == "" || r ~ /^\[  SKIPPED/ ? "(no reason given)" : r) }' "$log" |
    sort | uniq -c | sort -rn | sed 's/^ */  /'
fi
exit $rc
