// Device-side arguments of the decode family's kernels: KVCacheParams (src/backend/params.hpp)
// reduced to what they read, sizes narrowed to int where the plan has checked they fit; and the
// cache's row addressing, which clamps every index it reads from the device arrays so that a bad
// length, cache row or page can never make a kernel read or write outside the cache.
#pragma once

#include <cstdint>

#include "cuda/common/host_device.cuh"
#include "cuda/common/paged_rows.cuh"
#include "cuda/common/scores.cuh"

namespace flashattn::cuda::decode {

// One side of the cache (keys or values): where row `key` of kv head h of sequence b lives.
//   contiguous: data + cache_row(b)·batch_stride + key·row_stride + h·head_stride
//   paged:      data + page(b, key)·batch_stride + (key % page_size)·row_stride + h·head_stride
// (batch_stride is the page stride when paged; cache_row(b) = cache_batch_idx[b] or b,
// page(b, key) = block_table[b][key / page_size]). Offsets in elements, 64-bit.
struct CacheSide {
  void* data;
  int64_t batch_stride, row_stride, head_stride;
};

// One sequence's rows of one kv head: the element offset of key `key` (< capacity). Contiguous: a
// base and a row stride. Paged: the sequence's block-table row, each page index clamped into the
// pool, so a bad entry reads a wrong page of this cache, never memory outside it.
template <bool kPaged>
struct SequenceRows;
template <>
struct SequenceRows<false> {
  int64_t base, row_stride;
  __device__ __forceinline__ int64_t offset(int key) const { return base + int64_t{key} * row_stride; }
};
template <>
struct SequenceRows<true> : PagedRows {};

struct CacheIndex {
  const int32_t* cache_seqlens;    // [batch] or null: every sequence holds `capacity − seqlen_new` cached keys
  const int32_t* cache_batch_idx;  // [batch] or null (contiguous only)
  const int32_t* cache_leftpad;    // [batch] or null (contiguous only): the first row of b's keys
  const int32_t* block_table;      // paged when non-null: [batch][block_table_batch_stride]
  int64_t block_table_batch_stride;
  FastDivmod page_size;  // paged only
  int num_pages;   // paged only: valid page indices are [0, num_pages)
  int batch_cache; // contiguous only: valid cache rows are [0, batch_cache)
  int capacity;    // keys a sequence can hold: seqlen_cache, or max_pages · page_size
  int seqlen_new;  // keys appended by this call

  FLASHATTN_HD static int clamp(int x, int lo, int hi) { return x < lo ? lo : (x > hi ? hi : x); }

  // Keys already in the cache before the append, clamped to [0, capacity − seqlen_new].
  __device__ __forceinline__ int cached(int b) const {
    const int room = capacity - seqlen_new;
    return cache_seqlens == nullptr ? room : clamp(cache_seqlens[b], 0, room);
  }
  // The first cache row of sequence b's keys (left padding before it), clamped to [0, cached(b)].
  __device__ __forceinline__ int first_key(int b) const {
    return cache_leftpad == nullptr ? 0 : clamp(cache_leftpad[b], 0, cached(b));
  }
  // Keys sequence b attends to after the append, rows [first_key(b), cached(b) + seqlen_new): ≤ capacity.
  __device__ __forceinline__ int keys(int b) const { return cached(b) - first_key(b) + seqlen_new; }
  // Contiguous caches: the cache row sequence b lives in, clamped to [0, batch_cache).
  __device__ __forceinline__ int cache_row(int b) const {
    return cache_batch_idx == nullptr ? b : clamp(cache_batch_idx[b], 0, batch_cache - 1);
  }

  // Sequence b's keys of kv head h in `side`: key t at cache row first_key(b) + t (the attention's
  // addressing; the append's is rows(), from row 0).
  template <bool kPaged>
  __device__ __forceinline__ SequenceRows<kPaged> key_rows(const CacheSide& side, int b, int h) const {
    SequenceRows<kPaged> r = rows<kPaged>(side, b, h);
    if constexpr (!kPaged) r.base += int64_t{first_key(b)} * side.row_stride;
    return r;
  }

  // Sequence b's cache rows of kv head h in `side`, from row 0.
  template <bool kPaged>
  __device__ __forceinline__ SequenceRows<kPaged> rows(const CacheSide& side, int b, int h) const {
    SequenceRows<kPaged> r;
    r.row_stride = side.row_stride;
    if constexpr (kPaged) {
      r.base = int64_t{h} * side.head_stride;
      r.pages = block_table + b * block_table_batch_stride;
      r.page_size = page_size;
      r.last_page = num_pages - 1;
      r.page_stride = side.batch_stride;
    } else {
      r.base = int64_t{cache_row(b)} * side.batch_stride + int64_t{h} * side.head_stride;
    }
    return r;
  }
};

// The attention kernel's arguments. Query rows are packed per kv head: packed row r of kv head h_kv
// is query i = r / group_size of query head h_kv·group_size + r % group_size, so the rows of one
// tile share every K/V byte they read (group_size·seqlen_q rows per kv head).
struct AttendParams {
  const void* q;  // q, or its rotated copy in the workspace
  int64_t q_batch_stride, q_row_stride, q_head_stride;
  CacheSide k, v;
  CacheIndex index;

  void* out;  // num_splits == 1: the output; else null (partials go to the workspace)
  int64_t o_batch_stride, o_row_stride, o_head_stride;
  float* lse;  // num_splits == 1 and requested, else null
  int64_t lse_batch_stride, lse_head_stride;
  float* partial_out;  // num_splits > 1: [num_splits][batch·heads_q·seqlen_q][hdim_v] fp32
  float* partial_lse;  // num_splits > 1: [num_splits][batch·heads_q·seqlen_q]

  int batch, heads_kv, group_size, seqlen_q;
  int packed_rows;   // group_size · seqlen_q
  int num_m_blocks;  // ceil(packed_rows / block_m)
  int num_splits;
  int hdim_qk, hdim_v;
  int window_left, window_right;  // clamped (mask.cuh); < 0 unbounded
  ScoreTransform scores;
};

// Packed row r of kv head h_kv: query i = r / group_size of query head h_kv·group_size + r % group_size.
struct PackedRow {
  int query, head;
};
FLASHATTN_HD PackedRow unpack_row(int r, int h_kv, int group_size) {
  return {r / group_size, h_kv * group_size + r % group_size};
}

// Key blocks [begin, end) of split `split` among `num_splits` over a sequence's visible blocks
// [first, last): equal shares of at least kMinBlocksPerSplit, in order, so the splits cover every
// block exactly once and those past the end are empty (begin ≥ end).
inline constexpr int kMinBlocksPerSplit = 2;
struct BlockRange {
  int begin, end;
};
FLASHATTN_HD BlockRange split_blocks(int first, int last, int num_splits, int split) {
  const int blocks = last > first ? last - first : 0;
  int share = (blocks + num_splits - 1) / num_splits;
  share = share > kMinBlocksPerSplit ? share : kMinBlocksPerSplit;
  const int begin = first + split * share;
  return {begin, begin + share < last ? begin + share : last};
}

// Partial row index of (b, query head h, query i): rows are ordered like lse's [batch][heads_q][seqlen_q].
FLASHATTN_HD int64_t partial_row(int b, int h, int i, int heads_q, int seqlen_q) {
  return (int64_t{b} * heads_q + h) * seqlen_q + i;
}

}  // namespace flashattn::cuda::decode
