// The decode family's last step when a call is split: the splits' partial outputs merged by their
// log-sum-exp, exactly (Flash-Decoding's reduction). One warp per output row (b, h, i):
//   LSE = log Σ_s exp(lse_s),   O = Σ_s exp(lse_s − LSE)·O_s,
// where an empty split (lse_s = −inf) weighs 0 and its output is never read. A row no split saw a
// key for gets O = 0 and LSE = +inf, the library's rule for a fully masked row.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/host_runtime.hpp"
#include "cuda/common/scores.cuh"
#include "cuda/decode/launch.hpp"
#include "cuda/ptx/griddep.cuh"
#include "cuda/ptx/math.cuh"
#include "cuda/sm80/softmax.cuh"

namespace flashattn::cuda::decode {
namespace {

constexpr int kWarpsPerBlock = 4;

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int d = 16; d > 0; d /= 2) x = fmaxf(x, __shfl_xor_sync(kFullWarp, x, d));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int d = 16; d > 0; d /= 2) x += __shfl_xor_sync(kFullWarp, x, d);
  return x;
}

// Four output elements (16-bit) at out + i, i a multiple of 4: one 8-byte store (out's rows are
// 16-byte aligned, plan's check).
template <class Tag>
__device__ __forceinline__ void store4(void* out, int64_t i, const float4& o) {
  const uint2 packed = make_uint2(ptx::pack2<Tag>(o.x, o.y), ptx::pack2<Tag>(o.z, o.w));
  *reinterpret_cast<uint2*>(static_cast<uint16_t*>(out) + i) = packed;
}

// o += weight·x, where weight = 0 leaves o as it is: an empty split's partial was never written and
// may hold anything (NaN), so it is selected away, not multiplied by 0.
__device__ __forceinline__ void add_weighted(float4& o, float weight, const float4& x) {
  const bool live = weight != 0.f;
  o.x = live ? fmaf(weight, x.x, o.x) : o.x;
  o.y = live ? fmaf(weight, x.y, o.y) : o.y;
  o.z = live ? fmaf(weight, x.z, o.z) : o.z;
  o.w = live ? fmaf(weight, x.w, o.w) : o.w;
}

// Splits whose partials a lane loads before it uses any of them (predicated past the last split):
// the loads are independent, so a row costs one memory latency per kSplitsInFlight splits, not one
// per split.
inline constexpr int kSplitsInFlight = 16;
template <class Tag>
__global__ void __launch_bounds__(32 * kWarpsPerBlock) combine_kernel(const __grid_constant__ CombineParams p) {
  __shared__ float weights[kWarpsPerBlock][kMaxSplits];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t rows = int64_t{p.batch} * p.heads_q * p.seqlen_q;
  const int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + warp;
  ptx::griddep_wait();  // launched as the attention kernel's dependent: its partials are now visible
  if (row >= rows) return;

  // The splits' LSEs, lane s % 32 holding split s (kMaxSplits / 32 per lane), read once.
  constexpr int kPerLane = kMaxSplits / 32;
  float lse_s[kPerLane];
  float top = -kInfinity;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int s = lane + 32 * j;
    lse_s[j] = s < p.num_splits ? p.partial_lse[s * rows + row] : -kInfinity;
    top = fmaxf(top, lse_s[j]);
  }
  top = warp_max(top);
  float total = 0.f;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) total += lse_s[j] == -kInfinity ? 0.f : __expf(lse_s[j] - top);
  total = warp_sum(total);
  const bool empty = top == -kInfinity;
  const float lse = empty ? kInfinity : top + __logf(total);
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int s = lane + 32 * j;
    if (s < p.num_splits) weights[warp][s] = empty || lse_s[j] == -kInfinity ? 0.f : __expf(lse_s[j] - lse);
  }
  __syncwarp();

  const int i = static_cast<int>(row % p.seqlen_q), h = static_cast<int>((row / p.seqlen_q) % p.heads_q);
  const int b = static_cast<int>(row / (int64_t{p.seqlen_q} * p.heads_q));
  const int64_t out_row = int64_t{b} * p.o_batch_stride + int64_t{i} * p.o_row_stride + int64_t{h} * p.o_head_stride;
  const int64_t split_stride = rows * p.hdim_v;  // floats between one split's partial row and the next's
  // Columns d0 .. d0 + 3 per lane (hdim_v is a multiple of 8), one float4 per split.
  for (int d0 = 4 * lane; d0 < p.hdim_v; d0 += 4 * 32) {
    const float* partial = p.partial_out + row * p.hdim_v + d0;
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s0 = 0; s0 < p.num_splits; s0 += kSplitsInFlight) {
      float4 x[kSplitsInFlight];
#pragma unroll
      for (int u = 0; u < kSplitsInFlight; ++u) {
        x[u] = s0 + u < p.num_splits ? *reinterpret_cast<const float4*>(partial + (s0 + u) * split_stride)
                                     : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int u = 0; u < kSplitsInFlight; ++u) {
        if (s0 + u < p.num_splits) add_weighted(o, weights[warp][s0 + u], x[u]);
      }
    }
    store4<Tag>(p.out, out_row + d0, o);
  }
  if (p.lse != nullptr && lane == 0) p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + i] = lse;
}

// Launched as a programmatic dependent of the attention kernel just before it (where the kernel has
// griddepcontrol: PTX for sm_90+), so that its launch overlaps the attention kernel's last blocks
// instead of following their end; griddep_wait orders its reads. Otherwise plain stream order.
template <class Tag>
Status launch_combine_as(const CombineParams& p, cudaStream_t stream) {
  const int64_t rows = int64_t{p.batch} * p.heads_q * p.seqlen_q;
  const unsigned blocks = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  if (blocks == 0) return Status::success();
  static Sm90PtxFlags griddep;
  return launch_dependent("cuda decode combine", "kernel launch", combine_kernel<Tag>, dim3(blocks),
                          dim3(32 * kWarpsPerBlock), 0, stream, true, griddep, p);
}

}  // namespace

Status launch_combine(const CombineParams& p, DType dtype, cudaStream_t stream) {
  return dtype == DType::bf16 ? launch_combine_as<ptx::BF16>(p, stream) : launch_combine_as<ptx::F16>(p, stream);
}

}  // namespace flashattn::cuda::decode
