// The K/V addressing seam: where key row `key` of kv head h_kv of sequence b lives in K or V.
// Packed or padded K/V (KVRows) step a key block as rows one stride apart; paged K/V (PagedKVRows,
// the forward's paged instances) find each row through the block table.
#pragma once

#include <cstdint>

#include "cuda/common/fast_divmod.cuh"
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

// Paged: one sequence's block-table row and one kv head of the page pool. Key t is row
// t % page_size of page block_table[t / page_size]; the page index is clamped into the pool, so a
// bad table entry reads a wrong page of this pool, never memory outside it.
struct PagedKVRows {
  const int32_t* pages;  // the sequence's block-table row
  int64_t head_offset;   // h_kv · head_stride
  int64_t page_stride, row_stride;
  FastDivmod page_size;
  int last_page;

  // Element offset of key `key` (< the table row's capacity).
  __device__ __forceinline__ int64_t offset(int key) const {
    const int slot = page_size.quotient(key);
    const int entry = pages[slot];
    const int page = entry < 0 ? 0 : (entry > last_page ? last_page : entry);
    return head_offset + int64_t{page} * page_stride + int64_t{key - slot * page_size.divisor} * row_stride;
  }
};

}  // namespace flashattn::cuda::sm80
