#!/usr/bin/env bash
# Kernel tuning on a GPU machine, in one command: builds the C library once per kernel variant
# (the compile-time knobs FLASHATTN_SM80_FWD_VARIANT and FLASHATTN_SM80_BWD_VARIANT; 0 is the
# default kernel), all builds in parallel, then times every variant beside the default build,
# cuDNN and FlashAttention-2 in one benchmark process per direction (bench_gpu.py --variant), so
# that they are compared on the same inputs, clocks and temperature. Each variant's outputs are
# checked against the default build's (max_rel_diff in the JSON); the full test suite runs on
# whatever becomes the default.
#
#   FWD="1 2" BWD="3 9" scripts/gpu_variants.sh OUT_DIR
# Environment: BUILD_ROOT (default /tmp/variants), HEADDIMS (default "64;128;256"; FWD_HEADDIMS and
# BWD_HEADDIMS narrow the variant builds), CUDA_ARCHS
# (default 90a), FWD_BENCH_ARGS / BWD_BENCH_ARGS (bench_gpu.py flags for each direction's run),
# STEPS (default build,bench: "build" alone leaves the libraries in BUILD_ROOT/libs for a later
# "bench", so that other work can run between them).
set -uo pipefail
OUT=${1:?usage: gpu_variants.sh OUT_DIR}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
BUILD_ROOT=${BUILD_ROOT:-/tmp/variants}
HEADDIMS=${HEADDIMS:-64;128;256}
CUDA_ARCHS=${CUDA_ARCHS:-90a}
LIBS="$BUILD_ROOT/libs"
mkdir -p "$LIBS"
export FLASHATTN_COMMIT=${FLASHATTN_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}

build() {  # build NAME FWD_VARIANT BWD_VARIANT [HEADDIMS]: its own build dir, so that all run at once
  local start=$(date +%s) dir="$BUILD_ROOT/$1" headdims=${4:-$HEADDIMS}
  { cmake -S . -B "$dir" -DFLASHATTN_CUDA=ON -DFLASHATTN_CUDA_ARCHS="$CUDA_ARCHS" \
      -DFLASHATTN_HEADDIMS="$headdims" -DFLASHATTN_SM80_FWD_VARIANT="$2" -DFLASHATTN_SM80_BWD_VARIANT="$3" \
      -DFLASHATTN_BUILD_TESTS=OFF -DFLASHATTN_BUILD_TOOLS=OFF -DFLASHATTN_BUILD_BENCH=OFF -DFLASHATTN_PTXAS_VERBOSE=ON &&
    cmake --build "$dir" --target flashattn_c -j 4; } >"$OUT/build_$1.log" 2>&1
  local rc=$?
  echo "build $1 (fwd $2, bwd $3): rc $rc, $(( $(date +%s) - start )) s" | tee -a "$OUT/variants.log"
  [ $rc = 0 ] && cp "$dir/libflashattn_c.so" "$LIBS/$1.so"
}

STEPS=${STEPS:-build,bench}
if [[ ",$STEPS," == *",build,"* ]]; then
  build base 0 0 &
  for n in ${FWD:-}; do build "fwd$n" "$n" 0 "${FWD_HEADDIMS:-$HEADDIMS}" & done
  for n in ${BWD:-}; do build "bwd$n" 0 "$n" "${BWD_HEADDIMS:-$HEADDIMS}" & done
  wait
  # The build logs (ptxas reports) go back as one archive.
  (cd "$OUT" && tar czf build_logs.tgz build_*.log && rm -f build_*.log)
fi
[ -f "$LIBS/base.so" ] || { echo "no $LIBS/base.so"; exit 1; }
[[ ",$STEPS," == *",bench,"* ]] || exit 0

bench() {  # bench DIRECTION VARIANT_NUMBERS BENCH_ARGS
  local args=() n
  for n in $2; do [ -f "$LIBS/$1$n.so" ] && args+=(--variant "$1$n=$LIBS/$1$n.so"); done
  python3 bench/bench_gpu.py --lib "$LIBS/base.so" "${args[@]}" --modes "$1" --out "$OUT/variants_$1.json" $3 2>&1 |
    tee "$OUT/bench_$1.log" | grep -v "^\s*$"
}
[ -n "${FWD:-}" ] && bench fwd "$FWD" "${FWD_BENCH_ARGS:-}"
[ -n "${BWD:-}" ] && bench bwd "$BWD" "${BWD_BENCH_ARGS:-}"
