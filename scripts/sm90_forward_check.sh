#!/usr/bin/env bash
# The sm90 forward on a Hopper GPU in one call: a small build (head dims 64, 128, 192, 256; sm_90a), its
# tests (forced to sm90, with sm80 beside), compute-sanitizer on a subset, the forward benchmark
# (grid, GQA, varlen; the C API and flashattn-py beside cuDNN and FlashAttention-2 in one process),
# and ncu on one cell per head dim. Each test command runs under a timeout, so a hang costs a minute.
#
#   scripts/sm90_forward_check.sh OUT_DIR
#   STEPS=build,test,sanitize,bench,ncu  BUILD_DIR=build-sm90  BENCH_ARGS="--parts grid --modes fwd"
set -uo pipefail
OUT=${1:?usage: sm90_forward_check.sh OUT_DIR}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
STEPS=${STEPS:-build,test,sanitize,bench}
B=${BUILD_DIR:-build-sm90}
HDIMS="64;128;192;256"
BENCH_ARGS=${BENCH_ARGS:---parts grid,gqa,varlen --modes fwd}
has() { [[ ",$STEPS," == *",$1,"* ]]; }
log() { echo "== $(date +%T) $*" | tee -a "$OUT/check.log"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv >"$OUT/gpu.txt" 2>&1

if has build; then
  log "build ($B) and the Python package, in parallel"
  ( CMAKE_BUILD_PARALLEL_LEVEL=7 python3 -m pip install -q --no-build-isolation --no-deps ./python \
      -C cmake.define.FLASHATTN_CUDA=ON -C cmake.define.FLASHATTN_CUDA_ARCHS=90a \
      -C "cmake.define.FLASHATTN_HEADDIMS=$HDIMS" >"$OUT/pip.log" 2>&1; echo $? >"$OUT/pip.rc" ) &
  pip_pid=$!
  { cmake -S . -B "$B" -DFLASHATTN_CUDA=ON -DFLASHATTN_CUDA_ARCHS=90a "-DFLASHATTN_HEADDIMS=$HDIMS" \
      -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_PTXAS_VERBOSE=ON &&
    cmake --build "$B" -j 9 --target flashattn_cuda_tests diff_test edge_test flashattn_cli flashattn_c; } \
    >"$OUT/build.log" 2>&1 || { log "build FAILED"; tail -30 "$OUT/build.log"; exit 1; }
  log "build done"
fi

if has test; then
  log "tests"
  timeout 120 "$B/tests/cuda/flashattn_cuda_tests" --gtest_filter='CudaFwdSm90.*:CudaFwdSmall.*:CudaPtxSm90*' \
    >"$OUT/cuda_tests.log" 2>&1; echo "cuda_tests rc $?" | tee -a "$OUT/check.log"
  tail -3 "$OUT/cuda_tests.log"; grep -E "^\[  FAILED" "$OUT/cuda_tests.log" | head -20
  timeout 300 "$B/tests/diff_test" --gtest_filter='All/Diff.Forward/sm90_*' >"$OUT/diff_sm90.log" 2>&1
  echo "diff_test sm90 rc $?" | tee -a "$OUT/check.log"
  tail -3 "$OUT/diff_sm90.log"; grep -E "^\[  FAILED" "$OUT/diff_sm90.log" | head -20
  for sms in 1 3; do  # the persistent grid as on a GPU of 1 and 3 SMs: many tiles per CTA
    timeout 300 "$B/tests/diff_test" --gtest_filter='All/Diff.Forward/sm90_*' --sms=$sms >"$OUT/diff_sm90_sms$sms.log" 2>&1
    echo "diff_test sm90 --sms=$sms rc $?" | tee -a "$OUT/check.log"
    grep -E "^\[  FAILED" "$OUT/diff_sm90_sms$sms.log" | head -10
  done
  timeout 300 "$B/tests/edge_test" --gtest_filter='*sm90*' >"$OUT/edge_sm90.log" 2>&1
  echo "edge_test sm90 rc $?" | tee -a "$OUT/check.log"
  tail -3 "$OUT/edge_sm90.log"; grep -E "^\[  FAILED" "$OUT/edge_sm90.log" | head -20
fi

if has sanitize; then
  filter='CudaFwdSm90.CausalHdim128:CudaFwdSm90.VarlenCausalHdim64:CudaFwdSm90.Hdim256Mqa:CudaFwdSm90.VarlenWindowSoftcapHdim256Mqa'
  for tool in memcheck racecheck synccheck; do
    timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 9 "$B/tests/cuda/flashattn_cuda_tests" \
      --gtest_filter="$filter" >"$OUT/sanitize_$tool.log" 2>&1
    echo "compute-sanitizer $tool rc $?" | tee -a "$OUT/check.log"
    timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 9 "$B/tests/diff_test" --sms=2 \
      --gtest_filter='All/Diff.Forward/sm90_varlen*:All/Diff.Forward/sm90_b2_q272_k203_h4x2_d192_bf16_causal' \
      >>"$OUT/sanitize_$tool.log" 2>&1
    echo "compute-sanitizer $tool rc $?" | tee -a "$OUT/check.log"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard" "$OUT/sanitize_$tool.log" | tail -3
  done
fi

if has bench; then
  [ -n "${pip_pid:-}" ] && wait "$pip_pid"
  log "bench (pip rc $(cat "$OUT/pip.rc" 2>/dev/null))"
  # shellcheck disable=SC2086
  timeout 900 python3 bench/bench_gpu.py --lib "$B/libflashattn_c.so" $BENCH_ARGS --out "$OUT/bench.json" \
    >"$OUT/bench.log" 2>&1
  echo "bench rc $?" | tee -a "$OUT/check.log"
  tail -60 "$OUT/bench.log"
fi

if has ncu; then
  log "ncu"
  LIB="$B/libflashattn_c.so" CASES="${NCU_CASES:-fwd:64:8192 fwd:128:8192 fwd:256:8192}" \
    scripts/gpu_profile.sh "$OUT" >"$OUT/ncu.log" 2>&1
  echo "ncu rc $?" | tee -a "$OUT/check.log"
fi
