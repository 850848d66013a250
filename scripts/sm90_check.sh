#!/usr/bin/env bash
# The sm90 family on a Hopper GPU in one call, for one direction: a small build (head dims 64, 128,
# 192, 256; sm_90a) with the Python package built beside it, the direction's tests (forced to sm90,
# sm80 beside), compute-sanitizer (memcheck, racecheck, synccheck) on a subset, its benchmark (grid,
# GQA, varlen; the C API and flashattn-py beside cuDNN and FlashAttention-2 in one process), and ncu
# on one cell per head dim. Every command runs under a timeout, so a hang costs minutes, not the call.
# "decode": the decode family's sm_90 loads the same way (kvcache_test on its own loads and forced to
# TMA, the sanitizers on paged TMA loads, bench/decode_loads.py: cp.async and TMA beside cuDNN).
#
#   scripts/sm90_check.sh forward|backward|decode OUT_DIR
#   STEPS=build,test,sanitize,python,bench,ncu  BUILD_DIR=build-sm90  BENCH_ARGS="--parts grid --modes bwd"
#   PREBUILT=FILE.tar.xz: a build folder packed elsewhere (scripts/sm90_prebuild.sh) instead of the
#   build step's C++ part (the Python package is still built here: it links this machine's PyTorch;
#   PY_INSTALL=0 when it is installed already).
set -uo pipefail
DIRECTION=${1:?usage: sm90_check.sh forward|backward|decode OUT_DIR}
OUT=${2:?usage: sm90_check.sh forward|backward|decode OUT_DIR}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
STEPS=${STEPS:-build,test,sanitize,bench}
B=${BUILD_DIR:-build-sm90}
HDIMS="64;128;192;256"
SUMMARY=check.log
DEADLINE=${DEADLINE:-570}
# shellcheck source=scripts/device_steps.sh
source scripts/device_steps.sh

case "$DIRECTION" in
  forward)
    CUDA_FILTER='CudaFwdSm90.*:CudaFwdSmall.*:CudaPtxSm90*'
    DIFF_FILTER='All/Diff.Forward/sm90_*'
    SMOKE='All/Diff.Forward/sm90_b2_q129_k127_h4x2_d128_f16' SMOKE_TEST=diff_test
    SMS_RUNS="1 3"  # the persistent grid as on a GPU of 1 and 3 SMs: many tiles per CTA
    SANITIZE_CUDA='CudaFwdSm90.CausalHdim128:CudaFwdSm90.VarlenCausalHdim64:CudaFwdSm90.Hdim256Mqa:CudaFwdSm90.VarlenWindowSoftcapHdim256Mqa'
    SANITIZE_DIFF='All/Diff.Forward/sm90_varlen*:All/Diff.Forward/sm90_b2_q272_k203_h4x2_d192_bf16_causal'
    MODES=fwd
    NCU_DEFAULT="fwd:64:8192 fwd:128:8192 fwd:256:8192"
    ;;
  backward)
    CUDA_FILTER='CudaPtxSm90*:CudaSm90*:CudaBackwardSplit*:CudaMask*'
    DIFF_FILTER='All/Diff.Backward/sm90_*'
    # The smoke (60 s, then the watchdog build names a stuck barrier) holds every head dim's 64-column
    # kernel: D = 64 runs 128-row steps, D = 128 64-row ones (133 rows: a partial second step).
    SMOKE='All/Diff.Backward/sm90_b2_q129_k127_h4x2_d128_f16:All/Diff.Backward/sm90_b2_q133_k150_h2x2_d64_bf16_cap30'
    SMOKE_TEST=diff_test
    SMS_RUNS="1 3"  # the chain bound and the deterministic turns planned for a GPU of 1 and 3 SMs
    SANITIZE_CUDA=''
    SANITIZE_DIFF='All/Diff.Backward/sm90_b2_q129_k127_h4x2_d128_f16*:All/Diff.Backward/sm90_varlen_q5_0_130_77_k9_40_0_201_h4x2_d64_bf16:All/Diff.Backward/sm90_b1_q1000_k300_h2x1_d256_bf16:All/Diff.Backward/sm90_b1_q200_k100_h2x2_d64_bf16_causal_det:All/Diff.Backward/sm90_b2_q133_k150_h2x2_d64_bf16_cap30:All/Diff.Backward/sm90_b1_q1000_k100_h8x1_d128_f16:All/Diff.Backward/sm90_b1_q1200_k60_h6x1_d256_bf16'
    MODES=bwd
    NCU_DEFAULT="bwd:64:8192 bwd:128:8192 bwd:256:8192"
    ;;
  decode)
    CUDA_FILTER='CudaDecode*:CudaPtxSm90*'
    SMOKE='All/KVCacheTmaLoads.MatchesReference/len300_77_0_513_cap520_q1_h4x2_d64_f16_page16'
    SMOKE_TEST=kvcache_test
    SANITIZE_DECODE='All/KVCacheTmaLoads.*page16*:All/KVCacheTmaLoads.*page8*:All/PagedEqualsContiguous.BitwiseWithTmaLoads/decode_page32:All/KVCacheProducerLoads.*page16*:All/KVCacheProducerLoads.*page3*:All/PagedEqualsContiguous.BitwiseWithProducerLoads/decode_page1'
    MODES=decode
    NCU_DEFAULT=""
    ;;
  *) echo "sm90_check.sh: direction '$DIRECTION' is not forward, backward or decode"; exit 2 ;;
esac
# The backward beside the sm80 family's in the same process (bench/summarize.py's variant table).
BENCH_ARGS=${BENCH_ARGS:---parts grid,gqa,varlen --modes $MODES$([ "$DIRECTION" = backward ] && echo " --path sm90 --variant sm80=@sm80")}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv >"$OUT/gpu.txt" 2>&1

if has build; then
  log "build ($B${PREBUILT:+ from $PREBUILT}) and the Python package, in parallel"
  if [ "${PY_INSTALL:-1}" = 1 ]; then  # 0: the package is installed already
    install_package 7 "$HDIMS"
  fi
  if [ -n "${PREBUILT:-}" ]; then
    mkdir -p "$B" && tar -xJf "$PREBUILT" -C "$B" >"$OUT/build.log" 2>&1 || { log "unpacking FAILED"; exit 1; }
    log "prebuilt at commit $(cat "$B/COMMIT")"
    # The benchmark's record names the library's commit (this copy's own git HEAD may be stale).
    export FLASHATTN_COMMIT=${FLASHATTN_COMMIT:-$(cat "$B/COMMIT")}
  else
    { cmake -S . -B "$B" -DFLASHATTN_CUDA=ON -DFLASHATTN_CUDA_ARCHS=90a "-DFLASHATTN_HEADDIMS=$HDIMS" \
        -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_PTXAS_VERBOSE=ON &&
      cmake --build "$B" -j 9 --target flashattn_cuda_tests diff_test edge_test grad_test kvcache_test flashattn_cli \
        flashattn_c; } \
      >"$OUT/build.log" 2>&1 || { log "build FAILED"; tail -30 "$OUT/build.log"; exit 1; }
  fi
  log "build done"
fi

hung=0
if has test; then
  log "tests ($DIRECTION)"
  run cuda_tests 120 "$B/tests/cuda/flashattn_cuda_tests" --gtest_filter="$CUDA_FILTER"
  # One small case first, under a short timeout: kernels that hang (an mbarrier phase or a count
  # off) would otherwise cost every later step its whole timeout. A hang skips the other tests and
  # leaves the sanitizers (synccheck, racecheck) that one case.
  run smoke 60 "$B/tests/$SMOKE_TEST" --gtest_filter="$SMOKE"
  if grep -q "^smoke rc 124" "$OUT/check.log"; then
    hung=1
    log "the smoke case hung: other tests skipped"
    # The same case with every mbarrier wait bounded (FLASHATTN_HANG_WATCHDOG, from the prebuilt
    # pack): the first stuck wait prints its barrier's shared address, phase, block and warp.
    [ -x "$B/watchdog/$SMOKE_TEST" ] && run smoke_watchdog 60 "$B/watchdog/$SMOKE_TEST" --gtest_filter="$SMOKE" &&
      grep -m 20 "mbarrier wait hung" "$OUT/smoke_watchdog.log" | tee -a "$OUT/check.log"
  fi
  if [ "$hung" = 0 ] && [ "$DIRECTION" = decode ]; then
    run kvcache 300 "$B/tests/kvcache_test"  # every case on the family's own loads, the TMA suites included
    run kvcache_sms1 300 "$B/tests/kvcache_test" --sms=1 --gtest_filter='*TmaLoads*'
  elif [ "$hung" = 0 ]; then
    run diff_sm90 300 "$B/tests/diff_test" --gtest_filter="$DIFF_FILTER"
    for sms in $SMS_RUNS; do
      run "diff_sm90_sms$sms" 300 "$B/tests/diff_test" --gtest_filter="$DIFF_FILTER" --sms="$sms"
    done
    run edge_sm90 300 "$B/tests/edge_test" --gtest_filter='*sm90*'
    [ "$DIRECTION" = backward ] && run grad_sm90 300 "$B/tests/grad_test" --gtest_filter='*sm90*'
  fi
fi

if has sanitize; then
  log "compute-sanitizer"
  tools="memcheck racecheck synccheck" limit=300
  [ "$hung" = 1 ] && { SANITIZE_CUDA=''; SANITIZE_DIFF=$SMOKE; tools="synccheck racecheck"; limit=90; }
  for tool in $tools; do
    if [ "$DIRECTION" = decode ]; then
      run "sanitize_${tool}_decode" "$limit" compute-sanitizer --tool "$tool" --error-exitcode 9 \
        "$B/tests/kvcache_test" --gtest_filter="$([ "$hung" = 1 ] && echo "$SMOKE" || echo "$SANITIZE_DECODE")"
      continue
    fi
    if [ -n "$SANITIZE_CUDA" ]; then
      run "sanitize_${tool}_cuda" "$limit" compute-sanitizer --tool "$tool" --error-exitcode 9 \
        "$B/tests/cuda/flashattn_cuda_tests" --gtest_filter="$SANITIZE_CUDA"
    fi
    run "sanitize_${tool}_diff" "$limit" compute-sanitizer --tool "$tool" --error-exitcode 9 "$B/tests/diff_test" \
      --sms=2 --gtest_filter="$SANITIZE_DIFF"
  done
fi

if has python && [ "$hung" = 0 ]; then
  wait_for_package
  log "Python tests on the GPU (pip rc $(cat "$OUT/pip.rc" 2>/dev/null))"
  run python 240 python3 -m pytest python/tests -q -rs -x -p no:cacheprovider
  tail -3 "$OUT/python.log" | tee -a "$OUT/check.log"
fi

if has bench && [ "$hung" = 1 ]; then
  log "bench skipped: the smoke case hung"
elif has bench; then
  wait_for_package
  log "bench (pip rc $(cat "$OUT/pip.rc" 2>/dev/null))"
  if [ "$DIRECTION" = decode ]; then
    run bench 900 python3 bench/decode_loads.py --loads cp_async,tma --json "$OUT/bench.json"
  else
    # shellcheck disable=SC2086
    run bench 900 python3 bench/bench_gpu.py --lib "$B/libflashattn_c.so" $BENCH_ARGS --out "$OUT/bench.json"
  fi
  tail -60 "$OUT/bench.log" 2>/dev/null
fi

if has ncu && [ -n "${NCU_CASES:-$NCU_DEFAULT}" ]; then
  log "ncu"
  run ncu 600 env LIB="$B/libflashattn_c.so" FA_PATH=sm90 CASES="${NCU_CASES:-$NCU_DEFAULT}" scripts/gpu_profile.sh "$OUT"
fi

# The device tool brings back at most 8 files: keep the summary log and the benchmark record as
# files, every other log packed into logs.tgz.
(cd "$OUT" && tar czf logs.tgz --exclude=logs.tgz --exclude=check.log --exclude=bench.json -- * &&
   find . -maxdepth 1 -type f ! -name logs.tgz ! -name check.log ! -name bench.json -delete)
