#!/usr/bin/env bash
# ncu side by side on a GPU machine: this library's kernel and PyTorch's FlashAttention-2 kernel on
# the same shapes (tests/cuda/bench_one.py), with the full section set, exported as text so that it
# can be read without ncu: per-kernel details (CSV) and the SASS with per-instruction counters.
#
#   LIB=/tmp/bg/libflashattn_c.so CASES="fwd:256:512 bwd:128:4096 bwd:64:4096:causal" \
#     scripts/gpu_profile.sh OUT_DIR
# A case is DIRECTION:HDIM:SEQLEN[:causal]. FA_PATH=sm90 (or another family) runs this library's
# calls on that family. Writes OUT_DIR/ncu.tgz (the .ncu-rep reports, the details CSVs, the SASS
# source pages).
set -uo pipefail
OUT=${1:?usage: gpu_profile.sh OUT_DIR}
cd "$(dirname "$0")/.."
LIB=${LIB:?LIB=path to libflashattn_c.so}
work=$(mktemp -d)
for c in ${CASES:?}; do
  IFS=: read -r dir hdim seqlen causal <<<"$c"
  name="${dir}_d${hdim}_s${seqlen}${causal:+_causal}"
  flags=(--lib "$LIB" --hdim "$hdim" --seqlen "$seqlen")
  [ -n "$causal" ] && flags+=(--causal)
  [ -n "${FA_PATH:-}" ] && flags+=(--path "$FA_PATH")
  # The main kernels: sm80's bwd_main_kernel, sm90's bwd_kernel / bwd_kernel_wide, FA2's.
  if [ "$dir" = bwd ]; then flags+=(--backward); regex='bwd_main|bwd_kernel|flash_bwd_dq_dk_dv'; else regex='fwd_kernel|flash_fwd_kernel'; fi
  start=$(date +%s)
  ncu --clock-control none --set full --import-source no -k "regex:$regex" -c 2 -f -o "$work/$name" \
    python3 tests/cuda/bench_one.py "${flags[@]}" >"$work/$name.log" 2>&1
  echo "ncu $name: rc $?, $(( $(date +%s) - start )) s" | tee -a "$work/profile.log"
  ncu -i "$work/$name.ncu-rep" --page details --csv >"$work/${name}_details.csv" 2>>"$work/$name.log"
  ncu -i "$work/$name.ncu-rep" --page raw --csv >"$work/${name}_raw.csv" 2>>"$work/$name.log"
  ncu -i "$work/$name.ncu-rep" --page source --csv --print-source sass >"$work/${name}_sass.csv" 2>>"$work/$name.log" ||
    ncu -i "$work/$name.ncu-rep" --page source --csv >"$work/${name}_sass.csv" 2>>"$work/$name.log"
done
tar czf "$OUT/ncu.tgz" -C "$work" .
