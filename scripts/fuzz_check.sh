#!/usr/bin/env bash
# The fuzzer (tests/fuzz_test.cpp) under AddressSanitizer and UndefinedBehaviorSanitizer: a CPU-only
# build of the library and the fuzzer in its own folder, then FUZZ_ITERATIONS mutated calls
# (default 6000, about a minute on 2 cores). Any out-of-bounds access or undefined behaviour aborts
# the run with the sanitizer's report and the seed of the call that stopped it (a SIGABRT handler in
# the test: both sanitizers abort); the last line prints the corpus size and the crash count.
# A longer run: FUZZ_ITERATIONS=200000 bash scripts/fuzz_check.sh (FUZZ_SEED=S replays a seed).
# Then the CPU test binaries SANITIZED_TESTS under the same sanitizers, each whole in one process
# (GPU cases skip): the accesses of every case the suite holds, not only of the calls the fuzzer
# draws (about 8 minutes on 2 cores with the build; SANITIZED_TESTS="" skips them).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${FUZZ_BUILD_DIR:-build-fuzz}
iterations=${FUZZ_ITERATIONS:-6000}
start=$(date +%s)
bash scripts/setup.sh
echo "fuzz: building the fuzzer with -fsanitize=address,undefined in $dir"
cmake -S . -B "$dir" -DFLASHATTN_CUDA=OFF -DFLASHATTN_BUILD_TOOLS=OFF -DFLASHATTN_BUILD_BENCH=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
  >/dev/null
tests=${SANITIZED_TESTS-bad_input_test c_api_test cpu_unit_test reference_test grad_test edge_test kvcache_test sweep_test diff_test}
cmake --build "$dir" --target fuzz_test $tests -j "$(nproc)" >/dev/null
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:abort_on_error=1
echo "fuzz: running $iterations iterations"
rc=0
"$dir/tests/fuzz_test" --fuzz-iterations="$iterations" ${FUZZ_SEED:+--fuzz-seed=$FUZZ_SEED} || rc=$?
if [ "$rc" -gt 128 ]; then echo "fuzz: crashed (signal $((rc - 128))): crash count 1"; fi
for t in $tests; do
  step=$(date +%s)
  log="$dir/$t.log"
  t_rc=0
  "$dir/tests/$t" >"$log" 2>&1 || t_rc=$?
  echo "fuzz: $t under the sanitizers: exit $t_rc in $(( $(date +%s) - step )) s ($(grep -E '^\[  (PASSED|FAILED) ' "$log" | tr '\n' ' '))"
  if [ "$t_rc" -ne 0 ]; then
    grep -E -A30 'ERROR: AddressSanitizer|runtime error|^\[  FAILED' "$log" | head -60
    rc=$t_rc
  fi
done
echo "fuzz: done in $(( $(date +%s) - start )) s (exit $rc)"
exit "$rc"
