#!/usr/bin/env bash
# The pending device call (written 2026-12-07, session 28; delete once its results are in
# bench/results/): GPU tests + sanitizers + the path-sm80 grid (scripts/gpu_record.sh) on the pack of
# HEAD (the plan's paired-kernel check and its GPU test, d23b52d and 0cef553, have not run on a GPU),
# then as EXTRA:
#   split    the backward (grid, GQA, varlen) beside scripts/bwd_block_part_split.patch: lands if no
#            cell is slower by more than 1 % (docs/kernels-sm80-backward.md, "Where the pieces are")
#   grouped  on an H100 only (its rule changes nothing on the H200's memory): the causal hdim-64/128
#            backward and the GQA/varlen rows beside scripts/bwd_grouped_order.patch
# Pack: VARIANTS="split=scripts/bwd_block_part_split.patch grouped=scripts/bwd_grouped_order.patch"
# scripts/sm90_prebuild.sh (.prebuilt/sm90a.tar.xz). Run: scripts/gpu_pending.sh "$OUT", carry
# [".prebuilt"]. ~7 min on an H200 (the grid and the tests ~5, the split ~1.5).
OUT=${1:?OUT}
G=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "GPU: $G"
mkdir -p "$OUT/x"
# job NAME FLAGS...: one bench_gpu.py run on the pack's library (path sm80) as a line of EXTRA, its
# JSON, log and table in $OUT/x, its variant summary in the summary.
job() {
  local name=$1 x=$OUT/x/$1
  shift
  echo "python3 bench/bench_gpu.py --lib \$B/libflashattn_c.so --path sm80 $* --out $x.json > $x.log 2>&1;" \
    "sed -n '/^# .*, commit /,\$p' $x.log > $x.md; grep -E 'main / |Cells where' $x.log"
}
v=\$B/variants
extra="$(job split --parts grid,gqa,varlen --modes bwd --reps 30 --variant split=$v/split.so@sm80)"
case "$G" in
  *H100*) extra+="
$(job grouped --parts grid,gqa,varlen --modes bwd --causal 1 --hdims 64,128 --reps 30 --variant grouped=$v/grouped.so@sm80)" ;;
esac
DEADLINE=580 STEPS=test,sanitize,sm80 EXTRA="$extra" bash scripts/gpu_record.sh "$OUT"
tar czf "$OUT/extra.tgz" -C "$OUT" x && rm -rf "$OUT/x"
ls -la "$OUT"
