#!/usr/bin/env bash
# The pending device call (written 2026-12-07 when no GPU was lent; delete once its results are in
# bench/results/): GPU tests + sanitizers (with the pair's cases) + the path-sm80 grid
# (scripts/gpu_record.sh) on the pack of HEAD, then as EXTRA:
#   pair-vs-prev  the hdim-256 backward beside 8b6fd00 (prev: no pair)
#   order         the causal hdim-64/128 backward beside scripts/bwd_heads_outer.patch (ho),
#                 scripts/bwd_grouped_order.patch (grouped) and scripts/bwd_descending_walk.patch (desc)
#   pair128       the hdim-128 backward beside scripts/bwd_pair_hdim128.patch
#   grouped-gqa   the GQA and varlen backward beside grouped
# On an H200 the decode rows of the record too. Pack: VARIANTS="pair128=scripts/bwd_pair_hdim128.patch
# ho=scripts/bwd_heads_outer.patch grouped=scripts/bwd_grouped_order.patch desc=scripts/bwd_descending_walk.patch"
# scripts/sm90_prebuild.sh; PREV_LIB: a libflashattn_c.so of 8b6fd00 or earlier (before the pair), built
# for 90a like the pack (default .prebuilt/prev-8b6fd00.so). Run: scripts/gpu_pending.sh "$OUT", carry
# [".prebuilt"].
OUT=${1:?OUT}
G=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "GPU: $G"
cp "${PREV_LIB:-.prebuilt/prev-8b6fd00.so}" /tmp/prev.so
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
extra="timeout 60 \$B/tests/diff_test --sms=3 --gtest_filter='All/Diff.Backward/sm80_b1_q1000_k4352_h1x1_d256_bf16_sampled' | grep -E '^\[  (PASSED|FAILED)'
$(job pair-vs-prev --parts grid --modes bwd --hdims 256 --reps 30 --variant prev=/tmp/prev.so@sm80)
$(job order --parts grid --modes bwd --causal 1 --hdims 64,128 --reps 30 --variant ho=$v/ho.so@sm80 --variant grouped=$v/grouped.so@sm80 --variant desc=$v/desc.so@sm80)
$(job pair128 --parts grid --modes bwd --hdims 128 --reps 30 --variant pair128=$v/pair128.so@sm80)
$(job grouped-gqa --parts gqa,varlen --modes bwd --reps 20 --variant grouped=$v/grouped.so@sm80)"
steps=test,sanitize,sm80 record_args=
case "$G" in *H200*) steps+=,record record_args="--parts decode" ;; esac
DEADLINE=580 STEPS=$steps RECORD_ARGS=$record_args EXTRA="$extra" bash scripts/gpu_record.sh "$OUT"
tar czf "$OUT/extra.tgz" -C "$OUT" x && rm -rf "$OUT/x"
ls -la "$OUT"
