// Device-side arguments of the sm80 forward kernel: FwdParams (src/backend/params.hpp) reduced to what
// the kernel reads, sizes narrowed to int where the host has checked they fit (kMaxSeqlen, grid).
#pragma once

#include <cstdint>

#include "cuda/common/fast_divmod.cuh"
#include "cuda/common/scores.cuh"

namespace flashattn::cuda::sm80 {

struct FwdKernelParams {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  float* lse;  // null: not requested

  int64_t q_batch_stride, q_row_stride, q_head_stride;  // elements
  int64_t k_batch_stride, k_row_stride, k_head_stride;
  int64_t v_batch_stride, v_row_stride, v_head_stride;
  int64_t o_batch_stride, o_row_stride, o_head_stride;
  int64_t lse_batch_stride, lse_head_stride;

  const int32_t* cu_seqlens_q;  // varlen (device arrays), else null
  const int32_t* cu_seqlens_k;

  // Paged K/V (paged instances only; kv_rows.cuh): k and v are page pools, k_batch_stride and
  // v_batch_stride their page strides, and sequence b's key t is row t % page_size of page
  // block_table[b·block_table_batch_stride + t / page_size], clamped to [0, last_page].
  const int32_t* block_table;
  int64_t block_table_batch_stride;
  FastDivmod page_size;
  int last_page;

  int batch, heads_q, group_size;  // group_size = heads_q / heads_kv (GQA / MQA)
  int seqlen_q, seqlen_k;          // padded: the lengths; varlen: the maxima (paged: ≤ the table's capacity)
  int hdim_qk, hdim_v;             // actual head dims (≤ the instance's D; multiples of 8)
  int num_m_blocks;                // ceil(seqlen_q / block_m): the grid is num_m_blocks·heads_q·batch

  int window_left, window_right;  // clamped (mask.cuh); < 0 unbounded; used by masked instances only
  ScoreTransform scores;
};

}  // namespace flashattn::cuda::sm80
