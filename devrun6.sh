set -u
B=build-sm90; rm -rf $B; mkdir -p $B && tar -xJf .prebuilt/sm90a.tar.xz -C $B && echo "pack at $(cat $B/COMMIT)"; ls $B/variants
nvidia-smi --query-gpu=name --format=csv,noheader
V="--variant v4=$B/variants/v4.so@sm90 --variant v4wg=$B/variants/v4wg.so@sm90 --variant v4wgrow=$B/variants/v4wgrow.so@sm90"
timeout 420 python3 bench/bench_gpu.py --lib $B/libflashattn_c.so --parts grid,gqa,varlen --modes bwd --path sm90 --reps 20 \
  --seqlens 512,1024,2048,4096,8192,16384 $V --out $OUT/bwd.json > $OUT/bwd.log 2>&1
echo "bench rc $?"; grep -A200 "Build variants" $OUT/bwd.log | grep -E "^- |Cells where"
