// The decode family's launchers, as its plan (family.cu) calls them: the append and rotary
// kernels (prepare.cu), the attention instances (one translation unit per dtype and head dim,
// attend_instance.cu.in → attend_launch.cuh) and the split combine (combine.cu).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/family.hpp"
#include "cuda/decode/params.cuh"
#include "cuda/decode/shape.cuh"  // AttendLoads
#include "cuda/ptx/mma.cuh"

namespace flashattn::cuda::decode {

// Rotary tables [seqlen_rotary][rotary_dim / 2] in the call's dtype; cos == null: no rotation.
struct RotaryTables {
  const void* cos = nullptr;
  const void* sin = nullptr;
  int64_t row_stride = 0;
  int rotary_dim = 0, seqlen_rotary = 0;
  bool interleaved = false;
};

struct AppendParams {
  const void* k_new;
  const void* v_new;
  int64_t kn_batch_stride, kn_row_stride, kn_head_stride;
  int64_t vn_batch_stride, vn_row_stride, vn_head_stride;
  CacheSide k, v;
  CacheIndex index;
  RotaryTables rotary;
  int batch, heads_kv, seqlen_new, hdim_qk, hdim_v;
};

// The q the attention reads (elements): the call's, or with rotary tables its rotated copy in the
// workspace (`rotated`), which rotate_q writes contiguous [batch, seqlen_q, heads_q, hdim_qk].
struct QueryRows {
  const void* data;
  int64_t batch_stride, row_stride, head_stride;
};
inline QueryRows query_rows(const KVCacheParams& p, const void* rotated) {
  if (p.rotary_cos == nullptr) return {p.q, p.q_batch_stride, p.q_row_stride, p.q_head_stride};
  return {rotated, p.seqlen_q * p.heads_q * p.hdim_qk, p.heads_q * p.hdim_qk, p.hdim_qk};
}

struct RotateQParams {
  const void* q;
  int64_t q_batch_stride, q_row_stride, q_head_stride;
  void* q_rotated;  // contiguous [batch, seqlen_q, heads_q, hdim_qk] (query_rows)
  CacheIndex index;
  RotaryTables rotary;
  int batch, seqlen_q, heads_q, hdim_qk;
  bool per_query;  // KVCacheParams::rotary_per_query()
};

// A KV-cache call as the varlen forward sees it (forward_route.cu): q's rows packed b · seqlen_q
// apart, each sequence's keys(b) as prefix sums, and a contiguous cache's rows as one-page tables.
struct SequenceIndexParams {
  CacheIndex index;        // without cache_leftpad: sequence b's keys are cache rows [0, keys(b))
  int batch, seqlen_q;
  int32_t* cu_seqlens_q;   // [batch + 1]: b · seqlen_q
  int32_t* cu_seqlens_k;   // [batch + 1]: Σ_{b' < b} keys(b')
  int32_t* cache_rows;     // [batch]: cache_row(b); null for a paged cache
};

struct CombineParams {
  const float* partial_out;  // [num_splits][rows][hdim_v]
  const float* partial_lse;  // [num_splits][rows]
  void* out;
  int64_t o_batch_stride, o_row_stride, o_head_stride;
  float* lse;  // null: not requested
  int64_t lse_batch_stride, lse_head_stride;
  int batch, heads_q, seqlen_q, hdim_v, num_splits;
};

// The most splits a call is divided into (combine keeps one weight per split in shared memory).
inline constexpr int kMaxSplits = 128;

Status launch_append(const AppendParams& p, DType dtype, bool paged, cudaStream_t stream);
Status launch_rotate_q(const RotateQParams& p, DType dtype, cudaStream_t stream);
Status launch_combine(const CombineParams& p, DType dtype, cudaStream_t stream);
Status launch_sequence_index(const SequenceIndexParams& p, cudaStream_t stream);

// The caches' tensor maps of a TMA call (family.cu builds them; attend_kernel.cuh's CacheMaps).
struct AttendMaps {
  CUtensorMap k, v;
};

// One attention instance (Tag, D): launch on a grid of (num_splits, num_m_blocks·heads_kv, batch);
// `maps` only with TMA loads.
using AttendRunFn = Status (*)(const AttendParams& p, bool paged, AttendLoads loads, const AttendMaps* maps,
                               cudaStream_t stream);
// Whether the instance runs on the current GPU (an image for it, its shared memory; with a producer:
// an sm_90 image).
using AttendCheckFn = Status (*)(bool paged, AttendLoads loads);

template <class Tag, int kHeadDim>
Status attend_run(const AttendParams& p, bool paged, AttendLoads loads, const AttendMaps* maps, cudaStream_t stream);
template <class Tag, int kHeadDim>
Status attend_device_check(bool paged, AttendLoads loads);

}  // namespace flashattn::cuda::decode
