// The decode family's first step, before attention: the appended keys and values written into the
// cache at cache_seqlens[b] + t (keys rotated when rotary tables are given), and q rotated into the
// workspace. Small kernels: one warp per row, lanes over the row's elements (or rotary pairs), fp32
// arithmetic rounded once to the cache's dtype, as the CPU backend does (src/cpu/kvcache.cpp).
// Positions and cache addresses are clamped (params.cuh): a bad index never writes outside the cache.
// For calls routed through the forward (forward_route.cu), the sequence index the varlen forward
// reads: one block scans the sequences' key counts.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cub/block/block_scan.cuh>

#include "cuda/common/host_runtime.hpp"
#include "cuda/decode/launch.hpp"

namespace flashattn::cuda::decode {
namespace {

constexpr int kWarpsPerBlock = 4;

template <class Tag>
struct Elem;
template <>
struct Elem<ptx::F16> {
  using T = __half;
  __device__ static float load(const void* base, int64_t i) { return __half2float(static_cast<const T*>(base)[i]); }
  __device__ static void store(void* base, int64_t i, float x) { static_cast<T*>(base)[i] = __float2half_rn(x); }
};
template <>
struct Elem<ptx::BF16> {
  using T = __nv_bfloat16;
  __device__ static float load(const void* base, int64_t i) { return __bfloat162float(static_cast<const T*>(base)[i]); }
  __device__ static void store(void* base, int64_t i, float x) { static_cast<T*>(base)[i] = __float2bfloat16_rn(x); }
};

// Copies `dim` elements from src[src_off ..] to dst[dst_off ..], rotating the first rotary_dim of
// them to position `pos` when r.cos is set: x0' = x0·cos − x1·sin, x1' = x0·sin + x1·cos over the
// pairs (2i, 2i + 1) (interleaved) or (i, i + rotary_dim / 2). One warp; `lane` its lane.
template <class Tag>
__device__ void copy_rotated_row(void* dst, int64_t dst_off, const void* src, int64_t src_off, int dim,
                                 const RotaryTables& r, int pos, int lane) {
  using E = Elem<Tag>;
  int done = 0;
  if (r.cos != nullptr) {
    const int half = r.rotary_dim / 2;
    const int row = CacheIndex::clamp(pos, 0, r.seqlen_rotary - 1);
    for (int i = lane; i < half; i += 32) {
      const int i0 = r.interleaved ? 2 * i : i, i1 = r.interleaved ? 2 * i + 1 : i + half;
      const float c = E::load(r.cos, int64_t{row} * r.row_stride + i), s = E::load(r.sin, int64_t{row} * r.row_stride + i);
      const float x0 = E::load(src, src_off + i0), x1 = E::load(src, src_off + i1);
      E::store(dst, dst_off + i0, x0 * c - x1 * s);
      E::store(dst, dst_off + i1, x0 * s + x1 * c);
    }
    done = r.rotary_dim;
  }
  for (int d = done + lane; d < dim; d += 32) E::store(dst, dst_off + d, E::load(src, src_off + d));
}

// Row (b, t, h) of k_new / v_new → the cache at key cached(b) + t (< capacity by the clamp).
template <class Tag, bool kPaged>
__global__ void __launch_bounds__(32 * kWarpsPerBlock) append_kernel(const __grid_constant__ AppendParams p) {
  const int warp = static_cast<int>(blockIdx.x * kWarpsPerBlock + threadIdx.x / 32), lane = threadIdx.x % 32;
  if (warp >= p.batch * p.seqlen_new * p.heads_kv) return;
  const int h = warp % p.heads_kv, t = (warp / p.heads_kv) % p.seqlen_new, b = warp / (p.heads_kv * p.seqlen_new);
  const int key = p.index.cached(b) + t;
  const int64_t k_src = int64_t{b} * p.kn_batch_stride + int64_t{t} * p.kn_row_stride + int64_t{h} * p.kn_head_stride;
  const int64_t v_src = int64_t{b} * p.vn_batch_stride + int64_t{t} * p.vn_row_stride + int64_t{h} * p.vn_head_stride;
  const int64_t k_dst = p.index.rows<kPaged>(p.k, b, h).offset(key);
  const int64_t v_dst = p.index.rows<kPaged>(p.v, b, h).offset(key);
  copy_rotated_row<Tag>(p.k.data, k_dst, p.k_new, k_src, p.hdim_qk, p.rotary, key, lane);
  copy_rotated_row<Tag>(p.v.data, v_dst, p.v_new, v_src, p.hdim_v, RotaryTables{}, key, lane);
}

// Row (b, i, h) of q → the workspace's contiguous [batch, seqlen_q, heads_q, hdim_qk], rotated to
// cached(b) + i (causal or windowed calls) or cached(b) (flash-attn's rule, KVCacheParams).
template <class Tag>
__global__ void __launch_bounds__(32 * kWarpsPerBlock) rotate_q_kernel(const __grid_constant__ RotateQParams p) {
  const int warp = static_cast<int>(blockIdx.x * kWarpsPerBlock + threadIdx.x / 32), lane = threadIdx.x % 32;
  if (warp >= p.batch * p.seqlen_q * p.heads_q) return;
  const int h = warp % p.heads_q, i = (warp / p.heads_q) % p.seqlen_q, b = warp / (p.heads_q * p.seqlen_q);
  const int pos = p.index.cached(b) + (p.per_query ? i : 0);
  const int64_t src = int64_t{b} * p.q_batch_stride + int64_t{i} * p.q_row_stride + int64_t{h} * p.q_head_stride;
  copy_rotated_row<Tag>(p.q_rotated, int64_t{warp} * p.hdim_qk, p.q, src, p.hdim_qk, p.rotary, pos, lane);
}

// cu_seqlens_q, cu_seqlens_k and the contiguous cache's one-page tables of SequenceIndexParams. One
// block: thread t sums the key counts of its run of sequences, a block scan gives each run its start.
constexpr int kIndexThreads = 1024;
__global__ void __launch_bounds__(kIndexThreads) sequence_index_kernel(const __grid_constant__ SequenceIndexParams p) {
  using Scan = cub::BlockScan<int, kIndexThreads>;
  __shared__ typename Scan::TempStorage scan;
  const int per_thread = (p.batch + kIndexThreads - 1) / kIndexThreads;
  const int first = min(static_cast<int>(threadIdx.x) * per_thread, p.batch);
  const int last = min(first + per_thread, p.batch);
  int keys = 0;
  for (int b = first; b < last; ++b) keys += p.index.keys(b);
  int start = 0, total = 0;
  Scan(scan).ExclusiveSum(keys, start, total);
  for (int b = first; b < last; ++b) {
    p.cu_seqlens_q[b] = b * p.seqlen_q;
    p.cu_seqlens_k[b] = start;
    start += p.index.keys(b);
    if (p.cache_rows != nullptr) p.cache_rows[b] = p.index.cache_row(b);
  }
  if (threadIdx.x == 0) {
    p.cu_seqlens_q[p.batch] = p.batch * p.seqlen_q;
    p.cu_seqlens_k[p.batch] = total;
  }
}

unsigned blocks_for(int64_t warps) { return static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock); }

template <class Tag>
Status launch_append_as(const AppendParams& p, bool paged, cudaStream_t stream) {
  const unsigned blocks = blocks_for(int64_t{p.batch} * p.seqlen_new * p.heads_kv);
  if (blocks == 0) return Status::success();
  if (paged) {
    append_kernel<Tag, true><<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(p);
  } else {
    append_kernel<Tag, false><<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(p);
  }
  return cuda_status("cuda decode append", cudaGetLastError(), "kernel launch");
}

template <class Tag>
Status launch_rotate_q_as(const RotateQParams& p, cudaStream_t stream) {
  const unsigned blocks = blocks_for(int64_t{p.batch} * p.seqlen_q * p.heads_q);
  if (blocks == 0) return Status::success();
  rotate_q_kernel<Tag><<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(p);
  return cuda_status("cuda decode rotary", cudaGetLastError(), "kernel launch");
}

}  // namespace

Status launch_sequence_index(const SequenceIndexParams& p, cudaStream_t stream) {
  sequence_index_kernel<<<1, kIndexThreads, 0, stream>>>(p);
  return cuda_status("cuda decode sequence index", cudaGetLastError(), "kernel launch");
}

Status launch_append(const AppendParams& p, DType dtype, bool paged, cudaStream_t stream) {
  return dtype == DType::bf16 ? launch_append_as<ptx::BF16>(p, paged, stream) : launch_append_as<ptx::F16>(p, paged, stream);
}

Status launch_rotate_q(const RotateQParams& p, DType dtype, cudaStream_t stream) {
  return dtype == DType::bf16 ? launch_rotate_q_as<ptx::BF16>(p, stream) : launch_rotate_q_as<ptx::F16>(p, stream);
}

}  // namespace flashattn::cuda::decode
