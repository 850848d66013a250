#!/usr/bin/env bash
# The sm90 kernels' machine code, checked without a GPU (cuobjdump on the static library): every sm90
# forward and backward kernel holds HGMMA (wgmma) and UTMALDG (TMA) instructions, no LDL/STL (local memory: spills
# or an array indexed at run time), and its resource usage reports no stack and no local memory. The
# backward kernels may spill up to BWD_SPILL_BYTES (16) of stack: at D = 64 and 128 the branch-free
# mask costs ptxas two or four registers over its 255, and it spills loop invariants (a shared-memory
# address, a row offset), reloaded once per step from L1; every form without them measured 0.80x /
# 0.92x at D = 64 / 128 on the H100 (docs/kernels-sm90-backward.md, "The mask's form"). Anything
# beyond the budget fails, as does any local array (LOCAL:).
#
#   scripts/sass_check.sh build/libflashattn.a
# Exit 77 (ctest: skipped) when the library has no sm_90a kernels or no cuobjdump can be found or
# installed (CUDA's toolkit may not ship it; PyPI's nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm,
# which it runs, do: put under build/_tools on first use).
set -uo pipefail
lib=${1:?usage: sass_check.sh LIBRARY}
tools="$(dirname "$lib")/_tools"
export PATH="$PATH:$tools/nvidia/cu13/bin"  # cuobjdump finds nvdisasm on PATH
find_cuobjdump() {
  for c in "${CUOBJDUMP:-}" "$(command -v cuobjdump 2>/dev/null)"; do
    [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return 0; }
  done
  return 1
}
cuobjdump=$(find_cuobjdump) || {
  python3 -m pip install -q --target "$tools" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm >/dev/null 2>&1
  cuobjdump=$(find_cuobjdump) || { echo "sass_check: skipped: no cuobjdump (pip install nvidia-cuda-cuobjdump)"; exit 77; }
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
members=$(ar t "$lib" | grep -E '^sm90_(fwd|bwd)_.*\.o$')
[ -n "$members" ] || { echo "sass_check: skipped: no sm90 kernel objects in $lib"; exit 77; }
(cd "$work" && ar x "$(realpath "$lib")" $members)
fail=0
n=0
for obj in "$work"/*.o; do
  usage=$("$cuobjdump" -res-usage -arch sm_90a "$obj" 2>/dev/null)
  sass=$("$cuobjdump" -sass -arch sm_90a "$obj" 2>/dev/null)
  for k in $(grep -o 'Function _ZN9flashattn4cuda4sm90[^:]*' <<<"$usage" | sed 's/^Function //' | sort -u); do
    n=$((n + 1))
    res=$(grep -A1 "Function $k:" <<<"$usage" | tail -1)
    body=$(awk -v k="$k" '/Function : / { on = ($3 == k) } on' <<<"$sass")
    hgmma=$(grep -c 'HGMMA' <<<"$body")
    tma=$(grep -c 'UTMALDG' <<<"$body")
    local_ops=$(grep -cE '[^A-Z](LDL|STL)[ .]' <<<"$body")
    stack=$(grep -o 'STACK:[0-9]*' <<<"$res" | cut -d: -f2)
    budget=0
    [[ "$k" == *sm9010bwd_kernel* ]] && budget=${BWD_SPILL_BYTES:-16}
    name=$(c++filt "$k" 2>/dev/null | sed 's/(.*//')
    if [ "$hgmma" -eq 0 ] || [ "$tma" -eq 0 ] || [ "${stack:-1}" -gt "$budget" ] || ! grep -q 'LOCAL:0' <<<"$res" ||
       { [ "${stack:-1}" -eq 0 ] && [ "$local_ops" -ne 0 ]; }; then
      echo "FAIL ${name:-$k}: HGMMA $hgmma, UTMALDG $tma, LDL/STL $local_ops (stack budget $budget B);$res"
      fail=1
    elif [ "$stack" -gt 0 ]; then
      echo "ok   ${name:-$k}: HGMMA $hgmma, UTMALDG $tma, spills $stack B (budget $budget B, $local_ops LDL/STL), $(grep -o 'REG:[0-9]*' <<<"$res")"
    else
      echo "ok   ${name:-$k}: HGMMA $hgmma, UTMALDG $tma, no local memory, $(grep -o 'REG:[0-9]*' <<<"$res")"
    fi
  done
done
[ "$n" -gt 0 ] || { echo "sass_check: skipped: no sm_90a kernel in $lib"; exit 77; }
echo "sass_check: $n sm90 kernels, $([ $fail = 0 ] && echo "all pass" || echo "FAILURES")"
exit $fail
