#!/usr/bin/env bash
# The record run in one device call (under the tool's 600 s): a build packed here beforehand
# (scripts/sm90_prebuild.sh; sm_90a, head dims 64, 128, 192, 256), the Python package built on the GPU
# machine meanwhile, the GPU tests and a sanitizer subset on the pack's binaries, then the
# benchmark's record (every part; the sm80 family beside "auto" as a variant) and the grid with every
# call on the sm80 family. What comes back (the device tool returns at most 8 files):
#   summary.txt      test counts, failures, where each step ended
#   record.json/.md  bench_gpu.py, all parts, --variant sm80=@sm80
#   sm80.json/.md    bench_gpu.py --path sm80 --parts grid
#   logs.tgz         every log
#
#   scripts/sm90_prebuild.sh                       (here, 5-25 min on 2 cores)
#   then, carrying [".prebuilt"]: scripts/gpu_record.sh "$OUT"
# STEPS=test,sanitize,record,sm80 picks steps; RECORD_ARGS adds bench_gpu.py flags to the record;
# EXTRA="CMD; CMD ..." runs last, with what time is left (its output in extra.log, in the summary),
# the pack's build folder as $B (e.g. python3 python/tools/backward_gap.py --lib $B/libflashattn_c.so).
set -uo pipefail
OUT=${1:?usage: gpu_record.sh OUT_DIR}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
PREBUILT=${PREBUILT:-.prebuilt/sm90a.tar.xz}
STEPS=${STEPS:-test,sanitize,record,sm80}
B=build-record
started=$(date +%s)
DEADLINE=${DEADLINE:-585}
left() { echo $(( DEADLINE - ($(date +%s) - started) )); }
has() { [[ ",$STEPS," == *",$1,"* ]]; }
log() { echo "== $(date +%T) +$(( $(date +%s) - started ))s $*" | tee -a "$OUT/summary.txt"; }
# step NAME SECONDS CMD...: CMD under a timeout cut to what is left, its counts and failures logged.
step() {
  local name=$1 seconds=$2
  shift 2
  local remaining
  remaining=$(( $(left) - 15 ))
  if [ "$remaining" -lt 20 ]; then log "$name skipped: $remaining s left"; return; fi
  [ "$seconds" -gt "$remaining" ] && seconds=$remaining
  timeout "$seconds" "$@" >"$OUT/$name.log" 2>&1
  log "$name rc $?"
  grep -E "^\[  (PASSED|SKIPPED|FAILED) +\] [0-9]+ tests?|ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/$name.log" |
    tee -a "$OUT/summary.txt"
  grep -E "^\[  FAILED  \] [A-Z]|breaks the error rule|hazard" "$OUT/$name.log" | head -20 | tee -a "$OUT/summary.txt"
}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$OUT/summary.txt"
( CMAKE_BUILD_PARALLEL_LEVEL=12 python3 -m pip install -q --no-build-isolation --no-deps ./python \
    -C cmake.define.FLASHATTN_CUDA=ON -C cmake.define.FLASHATTN_CUDA_ARCHS=90a \
    -C "cmake.define.FLASHATTN_HEADDIMS=64;128;192;256" >"$OUT/pip.log" 2>&1; echo $? >"$OUT/pip.rc" ) &
pip_pid=$!
mkdir -p "$B" && tar -xJf "$PREBUILT" -C "$B" || { log "unpacking $PREBUILT FAILED"; exit 1; }
export FLASHATTN_COMMIT=${FLASHATTN_COMMIT:-$(cat "$B/COMMIT")}
log "pack at $FLASHATTN_COMMIT"

if has test; then
  step cuda_tests 150 "$B/tests/cuda/flashattn_cuda_tests"
  step diff 200 "$B/tests/diff_test"
  step edge 60 "$B/tests/edge_test"
  step grad 60 "$B/tests/grad_test"
  step kvcache 120 "$B/tests/kvcache_test"
fi
if has sanitize; then
  step memcheck 90 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tests/diff_test" --sms=2 \
    --gtest_filter='All/Diff.*/sm80_b2_q129_k127_h4x2_d128_f16*:All/Diff.*/sm90_b2_q129_k127_h4x2_d128_f16*:All/Diff.Backward/sm90_b1_q1000_k300_h2x1_d256_bf16'
  step racecheck 90 compute-sanitizer --tool racecheck --error-exitcode 9 "$B/tests/diff_test" --sms=2 \
    --gtest_filter='All/Diff.*/sm80_b2_q129_k127_h4x2_d128_f16:All/Diff.*/sm90_b2_q129_k127_h4x2_d128_f16'
fi

while kill -0 "$pip_pid" 2>/dev/null && [ "$(left)" -gt 120 ]; do sleep 2; done
log "Python package: pip rc $(cat "$OUT/pip.rc" 2>/dev/null || echo 'still building')"
bench() {  # bench NAME SECONDS FLAGS...: bench_gpu.py on the pack's library, its table as NAME.md
  local name=$1 seconds=$2
  shift 2
  step "$name" "$seconds" python3 bench/bench_gpu.py --lib "$B/libflashattn_c.so" --out "$OUT/$name.json" "$@"
  sed -n '/^| mode/,$p' "$OUT/$name.log" >"$OUT/$name.md"
  grep -E "^(plan|wall time)" "$OUT/$name.log" | tee -a "$OUT/summary.txt"
}
# shellcheck disable=SC2086
has record && bench record 420 --variant sm80=@sm80 ${RECORD_ARGS:-}
has sm80 && bench sm80 300 --path sm80 --parts grid
if [ -n "${EXTRA:-}" ]; then
  export B
  step extra 600 bash -c "$EXTRA"
  cat "$OUT/extra.log" >>"$OUT/summary.txt"
fi

(cd "$OUT" && tar czf logs.tgz --exclude=logs.tgz -- *.log pip.rc 2>/dev/null; rm -f -- *.log pip.rc)
log "done"
