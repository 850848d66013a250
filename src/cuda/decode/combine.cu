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

template <class Tag>
__device__ __forceinline__ void store_elem(void* base, int64_t i, float x) {
  if constexpr (std::is_same_v<Tag, ptx::BF16>) {
    static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(x);
  } else {
    static_cast<__half*>(base)[i] = __float2half_rn(x);
  }
}

template <class Tag>
__global__ void __launch_bounds__(32 * kWarpsPerBlock) combine_kernel(const __grid_constant__ CombineParams p) {
  __shared__ float weights[kWarpsPerBlock][kMaxSplits];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t rows = int64_t{p.batch} * p.heads_q * p.seqlen_q;
  const int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + warp;
  if (row >= rows) return;

  float top = -kInfinity;
  for (int s = lane; s < p.num_splits; s += 32) top = fmaxf(top, p.partial_lse[s * rows + row]);
  top = warp_max(top);
  float total = 0.f;
  for (int s = lane; s < p.num_splits; s += 32) {
    const float x = p.partial_lse[s * rows + row];
    total += x == -kInfinity ? 0.f : __expf(x - top);
  }
  total = warp_sum(total);
  const bool empty = top == -kInfinity;
  const float lse = empty ? kInfinity : top + __logf(total);
  for (int s = lane; s < p.num_splits; s += 32) {
    const float x = p.partial_lse[s * rows + row];
    weights[warp][s] = empty || x == -kInfinity ? 0.f : __expf(x - lse);
  }
  __syncwarp();

  const int i = static_cast<int>(row % p.seqlen_q), h = static_cast<int>((row / p.seqlen_q) % p.heads_q);
  const int b = static_cast<int>(row / (int64_t{p.seqlen_q} * p.heads_q));
  const int64_t out_row = int64_t{b} * p.o_batch_stride + int64_t{i} * p.o_row_stride + int64_t{h} * p.o_head_stride;
  for (int d = lane; d < p.hdim_v; d += 32) {
    float o = 0.f;
    for (int s = 0; s < p.num_splits; ++s) {
      const float wgt = weights[warp][s];
      if (wgt != 0.f) o = fmaf(wgt, p.partial_out[(s * rows + row) * p.hdim_v + d], o);
    }
    store_elem<Tag>(p.out, out_row + d, o);
  }
  if (p.lse != nullptr && lane == 0) p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + i] = lse;
}

template <class Tag>
Status launch_combine_as(const CombineParams& p, cudaStream_t stream) {
  const int64_t rows = int64_t{p.batch} * p.heads_q * p.seqlen_q;
  const unsigned blocks = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  if (blocks == 0) return Status::success();
  combine_kernel<Tag><<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(p);
  return cuda_status("cuda decode combine", cudaGetLastError(), "kernel launch");
}

}  // namespace

Status launch_combine(const CombineParams& p, DType dtype, cudaStream_t stream) {
  return dtype == DType::bf16 ? launch_combine_as<ptx::BF16>(p, stream) : launch_combine_as<ptx::F16>(p, stream);
}

}  // namespace flashattn::cuda::decode
