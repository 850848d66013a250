// Where one sequence of the batch lives and how long it is: the uniform indexing of
// src/backend/params.hpp for padded and variable-length (varlen) batches. Shared by the sm80 forward
// and backward kernels.
//
//   element (b, row, h, d) of q is at  q + b·batch_stride + (row_offset(b) + row)·row_stride
//                                        + h·head_stride + d
// with row_offset(b) = cu_seqlens[b] for varlen (where batch_stride is 0) and 0 otherwise. Every
// offset is 64-bit: a packed tensor easily exceeds 2^31 elements.
#pragma once

#include <cstdint>

#include "cuda/common/host_device.cuh"

namespace flashattn::cuda {

// One sequence: its first row in the (packed) tensors and its lengths.
struct SeqLens {
  int64_t q_offset = 0, k_offset = 0;  // row_offset_q(b), row_offset_k(b)
  int seqlen_q = 0, seqlen_k = 0;
};

// Sequence b of the batch. Padded batches (cu_seqlens_q == nullptr): the lengths are the batch's
// seqlen_q/seqlen_k and the offsets 0. Varlen: offsets and lengths come from the device arrays
// cu_seqlens_q/k (int32 [batch + 1]); the lengths are clamped to [0, max_seqlen] so that a bad
// array can never make a block run past the grid the host sized from the maxima.
FLASHATTN_HD SeqLens seq_lens(int b, const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k, int seqlen_q,
                              int seqlen_k) {
  SeqLens s;
  if (cu_seqlens_q == nullptr) {
    s.seqlen_q = seqlen_q;
    s.seqlen_k = seqlen_k;
    return s;
  }
  const int q0 = cu_seqlens_q[b], q1 = cu_seqlens_q[b + 1];
  const int k0 = cu_seqlens_k[b], k1 = cu_seqlens_k[b + 1];
  s.q_offset = q0;
  s.k_offset = k0;
  const int lq = q1 - q0, lk = k1 - k0;
  s.seqlen_q = lq < 0 ? 0 : (lq > seqlen_q ? seqlen_q : lq);
  s.seqlen_k = lk < 0 ? 0 : (lk > seqlen_k ? seqlen_k : lk);
  return s;
}

// Element offset of (b, row, h) in a [batch, rows, heads, d] view with the given strides; `row`
// already includes the sequence's row offset.
FLASHATTN_HD int64_t gmem_offset(int64_t b, int64_t row, int64_t h, int64_t batch_stride, int64_t row_stride,
                                 int64_t head_stride) {
  return b * batch_stride + row * row_stride + h * head_stride;
}

}  // namespace flashattn::cuda
