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
SUMMARY=summary.txt
DEADLINE=${DEADLINE:-585}
B=build-record
# shellcheck source=scripts/device_steps.sh
source scripts/device_steps.sh

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$OUT/$SUMMARY"
install_package 12 "64;128;192;256"
mkdir -p "$B" && tar -xJf "$PREBUILT" -C "$B" || { log "unpacking $PREBUILT FAILED"; exit 1; }
export FLASHATTN_COMMIT=${FLASHATTN_COMMIT:-$(cat "$B/COMMIT")}
log "pack at $FLASHATTN_COMMIT"

if has test; then
  run cuda_tests 150 "$B/tests/cuda/flashattn_cuda_tests"
  run diff 200 "$B/tests/diff_test"
  run edge 60 "$B/tests/edge_test"
  run grad 60 "$B/tests/grad_test"
  run kvcache 120 "$B/tests/kvcache_test"
fi
if has sanitize; then
  run memcheck 90 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tests/diff_test" --sms=2 \
    --gtest_filter='All/Diff.*/sm80_b2_q129_k127_h4x2_d128_f16*:All/Diff.*/sm90_b2_q129_k127_h4x2_d128_f16*:All/Diff.Backward/sm90_b1_q1000_k300_h2x1_d256_bf16'
  run racecheck 90 compute-sanitizer --tool racecheck --error-exitcode 9 "$B/tests/diff_test" --sms=2 \
    --gtest_filter='All/Diff.*/sm80_b2_q129_k127_h4x2_d128_f16:All/Diff.*/sm90_b2_q129_k127_h4x2_d128_f16'
  # The split tail planned for 3 SMs: equal parts (hdim 256) and spans (hdim 128).
  split='All/Diff.Backward/sm80_b1_q1000_k300_h2x1_d256_bf16:All/Diff.Backward/sm80_b1_q1000_k1000_h1x1_d128_f16'
  run memcheck_split 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tests/diff_test" --sms=3 --gtest_filter="$split"
  run racecheck_split 60 compute-sanitizer --tool racecheck --error-exitcode 9 "$B/tests/diff_test" --sms=3 --gtest_filter="$split"
  # dQ summed over a CTA pair (hdim 256, sm_90): without a mask, and causal.
  pair='All/Diff.Backward/sm80_b2_q300_k4352_h2x2_d256_bf16_sampled'
  run memcheck_pair 90 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tests/diff_test" \
    --gtest_filter="$pair:All/Diff.Backward/sm80_b1_q2048_k2048_h8x8_d256_bf16_causal_sampled"
  run racecheck_pair 90 compute-sanitizer --tool racecheck --error-exitcode 9 "$B/tests/diff_test" --gtest_filter="$pair"
fi

wait_for_package
log "Python package: pip rc $(cat "$OUT/pip.rc" 2>/dev/null || echo 'still building')"
bench() {  # bench NAME SECONDS FLAGS...: bench_gpu.py on the pack's library, its table as NAME.md
  local name=$1 seconds=$2
  shift 2
  run "$name" "$seconds" python3 bench/bench_gpu.py --lib "$B/libflashattn_c.so" --out "$OUT/$name.json" "$@"
  sed -n '/^# .*, commit /,$p' "$OUT/$name.log" >"$OUT/$name.md"  # bench/summarize.py's tables, whichever parts ran
  grep -E "^(plan|wall time)" "$OUT/$name.log" | tee -a "$OUT/$SUMMARY"
}
# shellcheck disable=SC2086
has record && bench record 420 --variant sm80=@sm80 ${RECORD_ARGS:-}
has sm80 && bench sm80 300 --path sm80 --parts grid
if [ -n "${EXTRA:-}" ]; then
  export B
  run extra 600 bash -c "$EXTRA"
  cat "$OUT/extra.log" >>"$OUT/$SUMMARY"
fi

(cd "$OUT" && tar czf logs.tgz --exclude=logs.tgz -- *.log pip.rc 2>/dev/null; rm -f -- *.log pip.rc)
log "done"
