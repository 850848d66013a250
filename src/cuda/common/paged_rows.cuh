// One sequence's keys (or values) of one kv head in a page pool, the addressing every paged kernel
// reads through (the decode family's caches, the sm80 and sm90 paged forwards; sm90 takes only the
// page and row, its TMA boxes do the addressing): key t is row t % page_size of
// page pages[t / page_size], each page index clamped into the pool, so a bad table entry reads a
// wrong page of this pool, never memory outside it. Offsets in elements, 64-bit.
#pragma once

#include <cstdint>

#include "cuda/common/fast_divmod.cuh"

namespace flashattn::cuda {

struct PagedRows {
  int64_t base;  // the kv head's element offset within a page (h_kv · head_stride)
  int64_t row_stride, page_stride;
  const int32_t* pages;  // the sequence's block-table row
  FastDivmod page_size;
  int last_page;

  // The block-table entry for key `key`, as stored (a caller may hold it a while before using it:
  // the clamp is what consumes the load).
  __device__ __forceinline__ int entry_of(int key) const { return *entry_address(key); }
  __device__ __forceinline__ const int32_t* entry_address(int key) const { return pages + page_size.quotient(key); }
  // A table entry clamped into the pool.
  __device__ __forceinline__ int clamp_page(int entry) const {
    return entry < 0 ? 0 : (entry > last_page ? last_page : entry);
  }
  // The pool page holding key `key`.
  __device__ __forceinline__ int page_of(int key) const { return clamp_page(entry_of(key)); }
  // Key `key`'s row within its page.
  __device__ __forceinline__ int row_of(int key) const { return key - page_size.quotient(key) * page_size.divisor; }
  // Key `key` on a (clamped) pool page.
  __device__ __forceinline__ int64_t offset_on(int page, int key) const {
    return base + int64_t{page} * page_stride + int64_t{row_of(key)} * row_stride;
  }
  // Element offset of key `key` (< the table row's capacity).
  __device__ __forceinline__ int64_t offset(int key) const { return offset_on(page_of(key), key); }
};

}  // namespace flashattn::cuda
