#!/usr/bin/env bash
# Checks of the flashattn CLI's options and exit codes (0 ok, 1 check failed, 2 bad option or
# unsupported, 3 runtime error) on a built tree: --path (one kernel family, its names from the
# library), the messages of unavailable combinations, --help. Small CPU runs; a few seconds.
#   scripts/cli_check.sh [BUILD_DIR]      (default: build)
set -uo pipefail
cd "$(dirname "$0")/.."
cli=${1:-build}/tools/flashattn/flashattn
[ -x "$cli" ] || { echo "cli_check: no CLI at $cli (build first)"; exit 1; }
failed=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# expect CODE PATTERN ARGS...: `flashattn ARGS` exits CODE and its output (stdout and stderr) matches
# the extended regex PATTERN.
expect() {
  local code=$1 pattern=$2
  shift 2
  "$cli" "$@" >"$out" 2>&1
  local rc=$?
  if [ "$rc" != "$code" ] || ! grep -qE -- "$pattern" "$out"; then
    echo "cli_check: FAIL: flashattn $* exited $rc (want $code), output (want /$pattern/):"
    sed 's/^/    /' "$out" | tail -15
    failed=1
  else
    echo "cli_check: ok: flashattn $* -> $rc"
  fi
}

# The kernel families of this build, as the library lists them ("sm80, cpu").
families=$("$cli" --version | sed -n 's/.*kernel families \([^)]*\)).*/\1/p')
[ -n "$families" ] || { echo "cli_check: FAIL: --version names no kernel families"; exit 1; }
small=(--seqlen 64 --heads 2 --quiet)

expect 0 "--path F +kernel family: auto( \| [a-z0-9]+)+" run --help
expect 0 "path cpu \(--path cpu\).*" run --path cpu "${small[@]}"
expect 0 '"path": "cpu", "path_requested": "cpu"' run --path cpu "${small[@]}" --json
expect 0 '"path_requested": "auto"' run --backend cpu "${small[@]}" --json
expect 2 "--path nope: not a kernel family of this build \(one of auto, ${families}\)" run --path nope
expect 2 '"exit_code": 2, "error": "--path nope' run --path nope --json
if [[ ", $families," == *", sm80,"* ]]; then
  expect 2 '--path sm80 --backend cpu: .*"sm80" runs cuda tensors; these are on cpu' run --path sm80 --backend cpu "${small[@]}"
  if "$cli" --version | grep -q "CUDA device not available"; then
    expect 2 "--path sm80: (no CUDA device is visible|flashattn was built without CUDA)" run --path sm80 "${small[@]}"
  fi
fi
# Exit codes that were there before --path.
expect 2 "--headdim abc: not an integer" run --headdim abc
expect 2 "--dtype f64: not one of f32, f16, bf16" run --dtype f64
expect 2 "unknown option" run --bogus
expect 2 "unknown command" frobnicate
expect 0 "causal, window \(8, -1\), softcap 30" run --backend cpu "${small[@]}" --causal --window 8,-1 --softcap 30 --scale 0.2

[ $failed = 0 ] && echo "cli_check: all passed" || echo "cli_check: FAILED"
exit $failed
