#!/usr/bin/env bash
# Checks of the flashattn CLI's options and exit codes (0 ok, 1 check failed, 2 bad option or
# unsupported, 3 runtime error) on a built tree: --path (one kernel family, its names from the
# library), the messages of unavailable combinations, --help; `decode` on the CPU (contiguous and
# paged caches, GQA, append, rotary) passing its check, and its --json. Small CPU runs; seconds.
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

# decode: the KV-cache call on the CPU; exit 0 means its check passed (1: failed).
dec=(--backend cpu --batch 3 --heads 8 --heads-kv 2 --seqlen-k 200 --quiet)
expect 0 "--page-size N +0: a contiguous cache" decode --help
expect 0 "contiguous cache, non-causal" decode "${dec[@]}"
expect 0 "paged cache: pages of 16 keys, 13 per sequence, shuffled over a pool of 42" \
  decode "${dec[@]}" --page-size 16 --new 1
expect 0 "paged cache: pages of 7 keys, .*causal, rotary half" \
  decode "${dec[@]}" --page-size 7 --new 2 --seqlen-q 2 --causal --rotary half --dtype bf16
expect 0 "window \(16, 0\), softcap 30, rotary interleaved" \
  decode "${dec[@]}" --heads-kv 1 --seqlen-q 4 --new 4 --window 16,0 --softcap 30 --rotary interleaved
expect 2 "--heads 8 --heads-kv 3: heads: heads_q = 8 is not a multiple of heads_kv = 3" decode "${dec[@]}" --heads-kv 3
expect 2 "--varlen: not an option of flashattn decode" decode --varlen
expect 2 "--page-size -1: must be >= 0" decode --page-size -1
expect 2 "--rotary yes: not one of interleaved, half, none" decode --rotary yes
if [[ ", $families," == *", sm80,"* ]]; then
  expect 2 '--path sm80 --backend cpu: .*"sm80" runs cuda tensors; these are on cpu' decode --path sm80 --backend cpu "${dec[@]:2}"
  if "$cli" --version | grep -q "CUDA device not available"; then
    expect 2 "--path sm80: (no CUDA device is visible|flashattn was built without CUDA)" decode --path sm80 "${dec[@]:2}"
  else
    expect 2 '--path sm80 --backend cuda: path = "sm80" has no kvcache kernels' decode --path sm80 "${dec[@]:2}"
  fi
fi
# --json: one object that parses, with the decode fields.
if "$cli" decode "${dec[@]}" --page-size 64 --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["mode"] == "decode" and d["ok"] and d["check"]["pass"], d
assert d["problem"]["page_size"] == 64 and d["problem"]["heads_kv"] == 2 and d["problem"]["seqlen_k"] == 200, d
assert d["tbps"] > 0 and d["copy_tbps"] > 0 and d["percent_of_copy"] > 0 and d["kv_bytes"] == 3 * 200 * 2 * 128 * 4, d
'; then
  echo "cli_check: ok: flashattn decode --json parses"
else
  echo "cli_check: FAIL: flashattn decode --json does not parse or lacks fields"
  failed=1
fi
expect 2 '"exit_code": 2, "error": "--heads-kv 0: must be >= 1"' decode --heads-kv 0 --json

[ $failed = 0 ] && echo "cli_check: all passed" || echo "cli_check: FAILED"
exit $failed
