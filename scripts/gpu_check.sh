#!/usr/bin/env bash
# On a GPU machine, in one command: build, run the GPU tests, run compute-sanitizer (memcheck and
# racecheck) on a subset, run the benchmark, and write a JSON report plus logs to an output folder.
#
#   scripts/gpu_check.sh OUT_DIR            (all steps)
#   STEPS=build,test,sanitize,bench,cli scripts/gpu_check.sh OUT_DIR
# Environment: BUILD_DIR (default build-gpu; reused when it exists), CUDA_ARCHS (default: the
# visible GPU's, e.g. 90a on Hopper), JOBS, TEST_FILTER (ctest -R regex; default all: CPU cases take seconds on 16 cores),
# SANITIZE_FILTER (gtest filter of the sanitizer subset of diff_test), SANITIZE_KV_FILTER (of kvcache_test), SANITIZE_SPLIT_FILTER (the
# subset rerun with the grid planned for 3 SMs, --sms=3, so that the backward splits its tail), BENCH_ARGS (extra bench_gpu.py flags),
# CTEST_JOBS (default half the cores, at least 4: the CPU reference dominates most cases), SWEEP_CONFIGS / SWEEP_PROCS / SWEEP_SEED (the differential sweep), PY_INSTALL (default 1; 0: the Python package is already installed, e.g. by a
# pip install run in the background during the build).
set -uo pipefail
OUT=${1:?usage: gpu_check.sh OUT_DIR}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
STEPS=${STEPS:-build,test,sanitize,sweep,cli,python,bench}
BUILD_DIR=${BUILD_DIR:-build-gpu}
JOBS=${JOBS:-$(nproc)}
TEST_FILTER=${TEST_FILTER:-.}
SANITIZE_FILTER=${SANITIZE_FILTER:-All/Diff.*/sm80_b2_q129_k127_h4x2_d128_f16*:All/Diff.*/sm80_varlen_q5_0_130_77_k9_40_0_201_h4x2_d64_bf16:All/Diff.*/sm80_b1_q200_k100_h2x2_d64_bf16_causal_det:All/Diff.*/sm80_b2_q272_k203_h4x2_d192_bf16_causal:All/Diff.*/sm80_b2_q133_k150_h2x2_d64_bf16_cap30:All/Diff.Forward/sm90_b2_q129_k127_h4x2_d128_f16*:All/Diff.Forward/sm90_varlen_q5_0_130_77_k9_40_0_201_h4x2_d64_bf16:All/Diff.Forward/sm90_b2_q272_k203_h4x2_d192_bf16_causal:All/Diff.Forward/sm90_b2_q133_k150_h2x2_d64_bf16_cap30:All/Diff.Backward/sm90_b2_q129_k127_h4x2_d128_f16*:All/Diff.Backward/sm90_varlen_q5_0_130_77_k9_40_0_201_h4x2_d64_bf16:All/Diff.Backward/sm90_b1_q1000_k300_h2x1_d256_bf16}
# The KV-cache call on the decode family, garbage device indices included (kvcache_test).
SANITIZE_KV_FILTER=${SANITIZE_KV_FILTER:-All/KVCache.*/decode_*:All/KVCacheBadIndices.*/decode_*:All/PagedEqualsContiguous.*/decode_*}
SANITIZE_SPLIT_FILTER=${SANITIZE_SPLIT_FILTER:-All/Diff.Backward/sm80_b2_q129_k127_h4x2_d128_f16:All/Diff.Backward/sm80_b1_q1023_k777_h2x1_d64_bf16_permuted:All/Diff.Backward/sm80_b1_q1000_k300_h2x1_d256_bf16:All/Diff.Backward/sm80_b1_q1000_k1000_h1x1_d128_f16}
# The commit: as given, else the snapshot's (device_snapshot.sh writes COMMIT), else git's.
COMMIT=${FLASHATTN_COMMIT:-$(cat COMMIT 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)}
export FLASHATTN_COMMIT=${FLASHATTN_COMMIT:-$COMMIT}
report="$OUT/report.json"
declare -A status
has() { [[ ",$STEPS," == *",$1,"* ]]; }
log() { echo "== $(date +%T) $*" | tee -a "$OUT/gpu_check.log"; }

if [ -z "${CUDA_ARCHS:-}" ]; then
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
  case "$cc" in 90) CUDA_ARCHS=90a ;; "") CUDA_ARCHS="80;90a" ;; *) CUDA_ARCHS=$cc ;; esac
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv >"$OUT/gpu.txt" 2>&1

if has build; then
  log "build ($BUILD_DIR, archs $CUDA_ARCHS, -j$JOBS)"
  start=$(date +%s)
  { cmake -S . -B "$BUILD_DIR" -DFLASHATTN_CUDA=ON -DFLASHATTN_CUDA_ARCHS="$CUDA_ARCHS" -DCMAKE_BUILD_TYPE=Release &&
    cmake --build "$BUILD_DIR" -j "$JOBS"; } >"$OUT/build.log" 2>&1
  status[build]=$?
  status[build_seconds]=$(( $(date +%s) - start ))
  [ "${status[build]}" = 0 ] || { log "build FAILED"; tail -40 "$OUT/build.log"; }
fi

if has test; then
  log "GPU tests (ctest -R '$TEST_FILTER')"
  ctest --test-dir "$BUILD_DIR" -R "$TEST_FILTER" -j "${CTEST_JOBS:-$(( $(nproc) / 2 > 4 ? $(nproc) / 2 : 4 ))}" --output-on-failure --timeout 600 >"$OUT/ctest.log" 2>&1
  status[test]=$?
  tail -5 "$OUT/ctest.log"
  grep -E "^\s*[0-9]+/[0-9]+ Test.*(Failed|Exception|Timeout)" "$OUT/ctest.log" | head -40
fi

if has sanitize; then
  for tool in memcheck racecheck; do
    log "compute-sanitizer $tool on '$SANITIZE_FILTER'"
    for bin in "$BUILD_DIR"/tests/diff_test; do
      [ -x "$bin" ] || continue
      compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin" --gtest_filter="$SANITIZE_FILTER" \
        >>"$OUT/sanitize_$tool.log" 2>&1
      rc=$?
      status[sanitize_$tool]=$(( ${status[sanitize_$tool]:-0} | rc ))
      # The backward's split tail (a second kernel, a programmatic dependent of the main one) on
      # the cases that split when the grid is planned for 3 SMs.
      compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin" --sms=3 \
        --gtest_filter="$SANITIZE_SPLIT_FILTER" >>"$OUT/sanitize_$tool.log" 2>&1
      rc=$?
      status[sanitize_$tool]=$(( ${status[sanitize_$tool]:-0} | rc ))
    done
    if [ -x "$BUILD_DIR/tests/kvcache_test" ]; then
      compute-sanitizer --tool "$tool" --error-exitcode 9 "$BUILD_DIR/tests/kvcache_test" \
        --gtest_filter="$SANITIZE_KV_FILTER" >>"$OUT/sanitize_$tool.log" 2>&1
      rc=$?
      status[sanitize_$tool]=$(( ${status[sanitize_$tool]:-0} | rc ))
    fi
    tail -3 "$OUT/sanitize_$tool.log"
  done
fi

if has sweep && [ -x "$BUILD_DIR/tests/sweep_test" ]; then
  # The differential sweep on the GPU families: SWEEP_CONFIGS random configurations (default
  # 10000) split over SWEEP_PROCS processes (the float64 reference on the CPU is the slow part),
  # seeds consecutive from SWEEP_SEED; failures and per-process summaries in sweep.jsonl.
  configs=${SWEEP_CONFIGS:-10000} procs=${SWEEP_PROCS:-8} seed=${SWEEP_SEED:-$(date +%s)}
  log "differential sweep: $configs configurations from seed $seed on the CUDA families, $procs processes"
  per=$(( (configs + procs - 1) / procs ))
  : >"$OUT/sweep.jsonl"
  pids=()
  for i in $(seq 0 $((procs - 1))); do
    OMP_NUM_THREADS=2 "$BUILD_DIR/tests/sweep_test" --gtest_filter='Families/Sweep.*/sm*' --sweep-configs=$per \
      --sweep-seed=$((seed + i * per)) --sweep-report="$OUT/sweep.jsonl" >"$OUT/sweep_$i.log" 2>&1 &
    pids+=($!)
  done
  rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  status[sweep]=$rc
  grep -h "SWEEP" "$OUT"/sweep_*.log
  python3 - "$OUT/sweep.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
s = [r for r in rows if "configs" in r]
print(f"sweep: {sum(r['ran'] for r in s)} configurations ran, {sum(r['unsupported'] for r in s)} unsupported, "
      f"{sum(r['failed'] for r in s)} failed, in {len(s)} processes")
PY
fi

if has cli && [ -x "$BUILD_DIR/tools/flashattn/flashattn" ]; then
  log "CLI runs"
  cli="$BUILD_DIR/tools/flashattn/flashattn"
  { $cli run --backend cuda --json;
    $cli run --backend cuda --seqlen 131072 --heads 1 --batch 1 --headdim 128 --dtype bf16 --backward --repeats 3 --no-check --json;
    $cli run --backend cuda --seqlen 8192 --heads 2 --batch 1 --headdim 128 --dtype bf16 --backward --deterministic --repeats 10 --json;
  } >"$OUT/cli.log" 2>&1
  status[cli]=$?
  tail -c 3000 "$OUT/cli.log"
fi

if has python; then
  log "Python package: build with CUDA, GPU tests"
  { if [ "${PY_INSTALL:-1}" = 1 ]; then CMAKE_BUILD_PARALLEL_LEVEL=$JOBS python3 -m pip install -q --no-build-isolation \
      --no-deps ./python -C cmake.define.FLASHATTN_CUDA=ON -C cmake.define.FLASHATTN_CUDA_ARCHS="$CUDA_ARCHS"; fi &&
    { so=$(cd /tmp && python3 -c "import flashattn._C as c; print(c.__file__)");
      c++ --version | head -1; echo "CXX=${CXX:-} CXXFLAGS=${CXXFLAGS:-} LDFLAGS=${LDFLAGS:-}";
      echo "std:: symbols defined in $so: $(nm -D -C --defined-only "$so" | grep -c 'std::')"; ldd "$so"; true; } \
      >"$OUT/python_env.log" 2>&1 &&
    python3 -m pytest python/tests -q -rs -x -p no:cacheprovider &&
    python3 python/examples/train_step.py --device cuda --dtype bfloat16 --compile; } >"$OUT/python.log" 2>&1
  status[python]=$?
  tail -15 "$OUT/python.log"
  if [ "${status[python]}" -gt 128 ]; then
    # A crash (signal): localize it (file by file), then take a native backtrace with cuda-gdb
    # (the GPU machine has no gdb) of the whole run.
    log "Python tests crashed (rc ${status[python]}): file by file, then a backtrace"
    for f in python/tests/test_*.py; do
      timeout 300 python3 -m pytest "$f" -q -x -p no:cacheprovider >>"$OUT/python_files.log" 2>&1
      echo "$f: rc $?" | tee -a "$OUT/python_files.log"
    done
    # Two files together (the crash followed CUDA tests), then with glibc's heap checker, which
    # aborts at the first corrupted chunk instead of wherever the damage is found later.
    timeout 300 python3 -m pytest python/tests/test_cuda.py python/tests/test_errors.py -q -x -p no:cacheprovider \
      >>"$OUT/python_files.log" 2>&1
    echo "test_cuda.py + test_errors.py: rc $?" | tee -a "$OUT/python_files.log"
    malloc_debug=$(ldconfig -p | awk '/libc_malloc_debug.so/ {print $NF; exit}')
    LD_PRELOAD=$malloc_debug MALLOC_CHECK_=3 MALLOC_PERTURB_=165 timeout 400 \
      python3 -m pytest python/tests -q -x -p no:cacheprovider >"$OUT/python_malloc_check.log" 2>&1
    echo "full suite under MALLOC_CHECK_=3 ($malloc_debug): rc $?" | tee -a "$OUT/python_files.log"
    tail -30 "$OUT/python_malloc_check.log"
    timeout 400 cuda-gdb -batch -ex run -ex bt -ex "info threads" --args python3 -m pytest python/tests -q -x \
      -p no:cacheprovider >"$OUT/python_gdb.log" 2>&1
    grep -v "^\[New Thread\|^\[Thread" "$OUT/python_gdb.log" | tail -60
  fi
fi

if has bench; then
  log "benchmark"
  python3 bench/bench_gpu.py --lib "$(realpath "$BUILD_DIR")/libflashattn_c.so" --out "$OUT/bench.json" ${BENCH_ARGS:-} \
    2>&1 | tee "$OUT/bench.log"
  status[bench]=${PIPESTATUS[0]}
fi

{
  echo "{\"commit\": \"$COMMIT\", \"date\": \"$(date -I)\", \"archs\": \"$CUDA_ARCHS\", \"steps\": {"
  first=1
  for k in "${!status[@]}"; do
    [ $first = 1 ] || echo ","
    first=0
    printf '  "%s": %s' "$k" "${status[$k]}"
  done
  echo "}}"
} >"$report"
log "report: $(tr -d '\n' <"$report")"

# The device tool brings back at most 8 files: keep the record (report, benchmark, summary log)
# as files and pack every other log into logs.tgz.
(cd "$OUT" && tar czf logs.tgz --exclude=logs.tgz --exclude=report.json --exclude=bench.json \
   --exclude=gpu_check.log -- * && find . -maxdepth 1 -type f ! -name logs.tgz ! -name report.json \
   ! -name bench.json ! -name gpu_check.log -delete)
