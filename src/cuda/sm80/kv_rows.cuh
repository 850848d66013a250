// The K/V addressing seam: where key row `key` of kv head h_kv of sequence b lives in K or V.
// Packed or padded K/V (KVRows) step a key block as rows one stride apart; paged K/V (common/
// paged_rows.cuh's PagedRows, the forward's paged instances) find each row through the block table.
#pragma once

#include <cstdint>

#include "cuda/common/paged_rows.cuh"
#include "cuda/common/seqlen.cuh"

namespace flashattn::cuda::sm80 {

// Contiguous today: the tensor's strides (elements) plus the sequence's first row (varlen offset).
struct KVRows {
  int64_t batch_stride, row_stride, head_stride;
  int64_t seq_offset;  // SeqLens::k_offset

  // Element offset of key row `key` (within the sequence) of kv head h_kv of sequence b.
  __device__ __forceinline__ int64_t offset(int b, int h_kv, int key) const {
    return gmem_offset(b, seq_offset + key, h_kv, batch_stride, row_stride, head_stride);
  }
};

}  // namespace flashattn::cuda::sm80
