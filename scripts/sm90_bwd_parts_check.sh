#!/usr/bin/env bash
# The sm90 backward's key blocks in parts (docs/kernels-sm90-backward.md, "Key blocks in parts") on a
# Hopper GPU in one device call of about eight minutes, from a pack built here first:
#
#   VARIANTS="whole=scripts/sm90_bwd_whole_key_blocks.patch" scripts/sm90_prebuild.sh
#   then on the GPU machine (carry [".prebuilt"]): scripts/sm90_bwd_parts_check.sh $OUT
#
# 1. sm90_check.sh backward's tests (the diff cases that split on any GPU and SM count among them);
# 2. the GQA/MQA rows' backward on sm90 beside sm80's and beside the variant without parts (`whole`),
#    C API and flash_attn_func, cuDNN and FA2, in one process;
# 3. batch-1 MQA through the CLI on sm90 (in parts) and sm80 (its own split);
# 4. the sanitizers on sm90_check.sh's backward subset (two split cases in it); SANITIZE=0 leaves them
#    to a second call (STEPS=sanitize scripts/sm90_check.sh backward OUT) when the bench is wider.
# BENCH_PARTS (default gqa): the bench's parts, bwd only; every variant in the pack runs beside.
# DEADLINE (default 560 s): the whole script's; each step gets at most what is left of it. (Not an
# outer `timeout`: sm90_check.sh runs each step under its own, in its own process group, which an outer
# one does not stop: a benchmark left running then times beside whatever runs next.)
set -uo pipefail
OUT=${1:?usage: sm90_bwd_parts_check.sh OUT_DIR}
cd "$(dirname "$0")/.." || exit 1
mkdir -p "$OUT"
started=$(date +%s)
DEADLINE=${DEADLINE:-560}
# within SECONDS: SECONDS or what is left of DEADLINE, whichever is less (at least 1).
within() { local left=$(( DEADLINE - ($(date +%s) - started) )); echo $(( $1 < left ? $1 : (left > 1 ? left : 1) )); }
export PREBUILT=${PREBUILT:-.prebuilt/sm90a.tar.xz}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv >"$OUT/gpu.txt" 2>&1
STEPS=build,test DEADLINE=$(within 260) scripts/sm90_check.sh backward "$OUT/tests"
# The Python package the build step started installing in the background, before the benchmark.
for _ in $(seq $(( $(within 200) / 2 ))); do pgrep -f "pip install" >/dev/null || break; sleep 2; done
variants=(--variant sm80=@sm80)
for so in build-sm90/variants/*.so; do
  [ -e "$so" ] && variants+=(--variant "$(basename "$so" .so)=$so@sm90")
done
parts=${BENCH_PARTS:-gqa}
STEPS=bench PY_INSTALL=0 DEADLINE=$(within "$([ "$parts" = gqa ] && echo 150 || echo 230)") \
  BENCH_ARGS="--parts $parts --modes bwd --path sm90 ${variants[*]}" scripts/sm90_check.sh backward "$OUT/bench"
cli=build-sm90/tools/flashattn/flashattn
# batch heads heads_kv seqlen headdim [--causal]: MQA and GQA at batch 1, both kernels' widths.
for shape in "1 32 1 8192 128 --causal" "1 32 1 16384 128 --causal" "1 16 1 8192 128" "1 32 8 8192 128 --causal" \
  "1 8 1 8192 256 --causal"; do
  read -r b h hkv s d mask <<<"$shape"
  for path in sm90 sm80; do
    echo "== batch $b, heads $h/$hkv, seqlen $s, hdim $d ${mask:-} on $path" >>"$OUT/cli.txt"
    timeout "$(within 60)" "$cli" run --backend cuda --path "$path" --backward --batch "$b" --heads "$h" --heads-kv "$hkv" \
      --seqlen "$s" --headdim "$d" ${mask:+"$mask"} --no-check --repeats 20 --quiet >>"$OUT/cli.txt" 2>&1
  done
done
[ "${SANITIZE:-1}" = 1 ] && STEPS=sanitize DEADLINE=$(within 120) scripts/sm90_check.sh backward "$OUT/sanitize"
cat "$OUT/gpu.txt" "$OUT/tests/check.log" "$OUT/cli.txt" "$OUT"/sanitize/check.log 2>/dev/null
