set -u
rm -rf build-sm90
PREBUILT=.prebuilt/sm90a.tar.xz STEPS=build,test,sanitize,bench DEADLINE=585 BENCH_ARGS="--variant sm80=@sm80" \
scripts/sm90_check.sh backward $OUT
