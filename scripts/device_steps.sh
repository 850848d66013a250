# Sourced by the scripts that run on the GPU machine in one device call (sm90_check.sh,
# gpu_record.sh): steps under one deadline, their summary in OUT/SUMMARY, and the Python package
# built in the background meanwhile. The caller sets OUT, SUMMARY (a file name in OUT), DEADLINE
# (seconds: the device tool stops a command at 600, so every step is cut to what is left, and the
# logs are still packed and come back) and STEPS.
started=$(date +%s)
has() { [[ ",$STEPS," == *",$1,"* ]]; }
log() { echo "== $(date +%T) $*" | tee -a "$OUT/$SUMMARY"; }
left() { echo $(( DEADLINE - ($(date +%s) - started) - 10 )); }
# run NAME SECONDS CMD...: CMD under a timeout cut to what is left, its output in OUT/NAME.log, its
# exit status logged, then its test counts, failed tests and where their errors lie (first 20
# lines). A step with under 20 s left is skipped, saying so (run it in a second call with STEPS=).
run() {
  local name=$1 seconds=$2
  shift 2
  local remaining
  remaining=$(left)
  if [ "$remaining" -lt 20 ]; then
    echo "$name skipped: $remaining s left of DEADLINE" | tee -a "$OUT/$SUMMARY"
    return
  fi
  [ "$seconds" -gt "$remaining" ] && seconds=$remaining
  timeout "$seconds" "$@" >"$OUT/$name.log" 2>&1
  echo "$name rc $?" | tee -a "$OUT/$SUMMARY"
  grep -E "^\[  (PASSED|SKIPPED|FAILED) +\] [0-9]+ tests?|ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/$name.log" |
    tee -a "$OUT/$SUMMARY"
  grep -E "^\[  FAILED  \] [A-Z]|breaks the error rule|hazard" "$OUT/$name.log" | head -20 | tee -a "$OUT/$SUMMARY"
}
# install_package JOBS HDIMS: the Python package (sm_90a, head dims HDIMS) built and installed in the
# background with JOBS compile jobs; OUT/pip.log, its exit status in OUT/pip.rc.
install_package() {
  ( CMAKE_BUILD_PARALLEL_LEVEL=$1 python3 -m pip install -q --no-build-isolation --no-deps ./python \
      -C cmake.define.FLASHATTN_CUDA=ON -C cmake.define.FLASHATTN_CUDA_ARCHS=90a \
      -C "cmake.define.FLASHATTN_HEADDIMS=$2" >"$OUT/pip.log" 2>&1; echo $? >"$OUT/pip.rc" ) &
  pip_pid=$!
}
# Waits for that package while more than 90 s are left.
wait_for_package() {
  if [ -n "${pip_pid:-}" ]; then
    while kill -0 "$pip_pid" 2>/dev/null && [ "$(left)" -gt 90 ]; do sleep 2; done
  fi
}
