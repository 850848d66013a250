// Tiles of the CPU backend: tile sizes, where one (sequence, head) lives in a strided tensor, and the
// loaders / stores that move rows between storage (f32, f16, bf16) and contiguous float tiles.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/params.hpp"
#include "cpu/convert.hpp"
#include "cpu/tile_math.hpp"

namespace flashattn::cpu {

constexpr int64_t num_blocks(int64_t n, int64_t block) { return (n + block - 1) / block; }

// Per-thread scratch: one allocation for all threads (made before the parallel region, so a failed
// allocation is an exception the API turns into a Status), each thread's part 64-byte aligned and
// zeroed; a thread carves its tiles out of its part with a Carver.
class ThreadScratch {
 public:
  static constexpr int64_t kAlignFloats = 16;  // 64 bytes: one cache line, one 512-bit vector

  ThreadScratch(int threads, int64_t floats_per_thread)
      : per_thread_(round_up(floats_per_thread)), storage_(static_cast<size_t>(threads * per_thread_ + kAlignFloats)) {}

  float* of_thread(int thread) {
    float* base = storage_.data();
    base += (kAlignFloats - reinterpret_cast<uintptr_t>(base) / sizeof(float) % kAlignFloats) % kAlignFloats;
    return base + thread * per_thread_;
  }

  // Hands out consecutive aligned pieces of one thread's part. A Carver over nullptr hands out
  // nothing and only counts, so one carve() function gives both the layout and its size.
  class Carver {
   public:
    explicit Carver(float* base) : base_(base) {}
    float* take(int64_t floats) {
      float* p = base_ ? base_ + used_ : nullptr;
      used_ += round_up(floats);
      return p;
    }
    // bf16 elements, and 32-bit words (bf16 pairs), from the same float storage.
    uint16_t* take_bf16(int64_t n) { return reinterpret_cast<uint16_t*>(take((n + 1) / 2)); }
    uint32_t* take_words(int64_t n) { return reinterpret_cast<uint32_t*>(take(n)); }
    int64_t used() const { return used_; }

   private:
    float* base_;
    int64_t used_ = 0;
  };

  static int64_t round_up(int64_t floats) { return (floats + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }

  // The floats a thread's tile set takes: Tiles::carve(carver, args...) over a counting Carver.
  template <class Tiles, class... Args>
  static int64_t floats_of(const Args&... args) {
    Carver counter(nullptr);
    Tiles::carve(counter, args...);
    return counter.used();
  }

 private:
  int64_t per_thread_;
  std::vector<float> storage_;
};

// One batch entry: where its rows start in the (packed or padded) tensors and how many it has.
// Padded batches start at row 0 of their batch slice; varlen ones at cu_seqlens[b] of the pack.
struct Sequence {
  int64_t row_offset_q = 0, row_offset_k = 0;
  int64_t len_q = 0, len_k = 0;
};

inline Sequence sequence_of(const FwdParams& p, int64_t b) {
  if (!p.is_varlen()) return {0, 0, p.seqlen_q, p.seqlen_k};
  return {p.cu_seqlens_q[b], p.cu_seqlens_k[b], int64_t{p.cu_seqlens_q[b + 1]} - p.cu_seqlens_q[b],
          int64_t{p.cu_seqlens_k[b + 1]} - p.cu_seqlens_k[b]};
}

// The rows of one (batch, head) of a [.., rows, heads, d] tensor: element (row, col) is at
// data[first + row * row_stride + col] (params.hpp's formula with b, h and the row offset folded
// into `first`, in 64 bits).
template <class Ptr>
struct HeadRows {
  Ptr data;
  DType dtype;
  int64_t first;
  int64_t row_stride;

  int64_t at(int64_t row) const { return first + row * row_stride; }
  // Rows [row0, row0 + n) lie at one stride (always, here): a product can read them in place.
  bool uniform(int64_t /*row0*/, int64_t /*n*/) const { return true; }
};
using InRows = HeadRows<const void*>;
using OutRows = HeadRows<void*>;

// The offset is summed in unsigned (wrapping) arithmetic: the views of an empty sequence may start
// one past the last row of a dimension whose stride is arbitrary (extent 1, never used), where the
// signed sum could overflow; such a start is never read, and every offset that is read fits.
template <class Ptr>
HeadRows<Ptr> head_rows(Ptr data, DType dtype, int64_t batch_stride, int64_t row_stride, int64_t head_stride,
                        int64_t b, int64_t row_offset, int64_t h) {
  const uint64_t first = static_cast<uint64_t>(b) * static_cast<uint64_t>(batch_stride) +
                         static_cast<uint64_t>(row_offset) * static_cast<uint64_t>(row_stride) +
                         static_cast<uint64_t>(h) * static_cast<uint64_t>(head_stride);
  return {data, dtype, static_cast<int64_t>(first), row_stride};
}

// The query rows (or out rows) of a GQA group's `group` query heads of a [.., rows, heads, d]
// tensor, packed query by query so that one tile holds them all (attend_decode.hpp): packed row r
// is row r / group of head first head + r % group, at data[first + (r / group) * row_stride +
// (r % group) * head_stride]. Rows at one stride only when the group is one head.
template <class Ptr>
struct GroupRows {
  Ptr data;
  DType dtype;
  int64_t first;
  int64_t row_stride, head_stride, group;

  int64_t at(int64_t r) const { return first + r / group * row_stride + r % group * head_stride; }
  bool uniform(int64_t /*r0*/, int64_t n) const { return n <= 1 || group == 1; }
};

// Where a task's LSE values go: row r's at data[r / group + (r % group) * head_stride] (the layout
// [heads, rows] of one sequence: a head's own rows with group 1, a packed GQA group's otherwise).
struct LseRows {
  float* data = nullptr;  // null: not written
  int64_t head_stride = 0, group = 1;

  float* at(int64_t r) const { return data + r / group + r % group * head_stride; }
  // values[i] as rows row0 + i's, i < n (nothing when not written).
  void store(int64_t row0, int64_t n, const float* values) const {
    if (data == nullptr) return;
    for (int64_t i = 0; i < n; ++i) *at(row0 + i) = values[i];
  }
};

// The keys (or values) of one (sequence, kv head) of a paged KV cache: key t is row t % page_size
// of page pages[t / page_size] (params.hpp's addressing; the pages were checked by validation).
struct PagedRows {
  const void* data;
  DType dtype;
  const int32_t* pages;  // the sequence's block_table row
  int64_t page_size, page_stride, row_stride, head_offset;

  int64_t at(int64_t t) const { return pages[t / page_size] * page_stride + (t % page_size) * row_stride + head_offset; }
  // Keys [t0, t0 + n) lie at one stride when they are on one page.
  bool uniform(int64_t t0, int64_t n) const { return n <= 1 || t0 / page_size == (t0 + n - 1) / page_size; }
};

// Sequence b's keys (or values) of kv head h in a paged k (or v) of p: `data` with its page, row
// and head strides, the pages from p's block_table (the KV-cache call's and the paged forward's).
inline PagedRows paged_rows(const FwdParams& p, const void* data, int64_t page_stride, int64_t row_stride,
                            int64_t head_stride, int64_t b, int64_t h) {
  return {data, p.dtype, p.block_table + b * p.block_table_batch_stride, p.page_size, page_stride, row_stride,
          h * head_stride};
}

// dst[c] = src[at + c] as float, c < n. The dtype switch sits outside the loop.
inline void load_row(float* __restrict dst, const void* src, DType dtype, int64_t at, int64_t n) {
  switch (dtype) {
    case DType::f16: {
      const uint16_t* s = static_cast<const uint16_t*>(src) + at;
      for (int64_t c = 0; c < n; ++c) dst[c] = f16_to_float(s[c]);
      break;
    }
    case DType::bf16: {
      const uint16_t* s = static_cast<const uint16_t*>(src) + at;
      for (int64_t c = 0; c < n; ++c) dst[c] = bf16_to_float(s[c]);
      break;
    }
    default: {
      const float* s = static_cast<const float*>(src) + at;
      for (int64_t c = 0; c < n; ++c) dst[c] = s[c];
      break;
    }
  }
}

// dst[at + c] = src[c] rounded to the storage dtype (nearest even), c < n.
inline void store_row(void* dst, DType dtype, int64_t at, const float* __restrict src, int64_t n) {
  switch (dtype) {
    case DType::f16: {
      uint16_t* d = static_cast<uint16_t*>(dst) + at;
      for (int64_t c = 0; c < n; ++c) d[c] = float_to_f16(src[c]);
      break;
    }
    case DType::bf16: {
      uint16_t* d = static_cast<uint16_t*>(dst) + at;
      for (int64_t c = 0; c < n; ++c) d[c] = float_to_bf16(src[c]);
      break;
    }
    default: {
      float* d = static_cast<float*>(dst) + at;
      for (int64_t c = 0; c < n; ++c) d[c] = src[c];
      break;
    }
  }
}

// Tile loader: rows [row0, row0 + rows) × columns [0, cols) into tile[r * ld + c]. Rows is any
// row addressing with data, dtype and at(row): HeadRows, PagedRows. bf16 and f16 are widened by
// tile_math's dispatched loops.
template <class Rows>
void load_tile(float* tile, int64_t ld, const Rows& src, int64_t row0, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t at = src.at(row0 + r);
    switch (src.dtype) {
      case DType::bf16: widen_bf16(tile + r * ld, static_cast<const uint16_t*>(src.data) + at, cols); break;
      case DType::f16: widen_f16(tile + r * ld, static_cast<const uint16_t*>(src.data) + at, cols); break;
      default: load_row(tile + r * ld, src.data, src.dtype, at, cols); break;
    }
  }
}

// A hint to the caches to fetch rows [row0, row0 + rows) × columns [0, cols) of src, one request per
// 64-byte line: the rows of one kv head lie a whole cache row (heads · d elements) apart, so at
// the cache's usual 4 KB or more the hardware prefetchers, which stop at page ends, see no stream.
template <class Rows>
void prefetch_rows(const Rows& src, int64_t row0, int64_t rows, int64_t cols) {
  const int64_t bytes = cols * element_size(src.dtype);
  for (int64_t r = 0; r < rows; ++r) {
    const char* row = static_cast<const char*>(src.data) + src.at(row0 + r) * element_size(src.dtype);
    for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(row + b);
  }
}

// A block of rows as a product reads it: row r, column c at data[r * ld + c], float.
struct RowBlock {
  const float* data;
  int64_t ld;
};

// Rows [row0, row0 + rows) × columns [0, cols) as a RowBlock: read in place when they are float at
// one stride (no copy), else loaded (widened, gathered from pages) into `tile` [rows][cols].
template <class Rows>
RowBlock row_block(const Rows& src, int64_t row0, int64_t rows, int64_t cols, float* tile) {
  if (src.dtype == DType::f32 && src.uniform(row0, rows) && (rows == 1 || src.row_stride >= cols))
    return {static_cast<const float*>(src.data) + src.at(row0), rows == 1 ? cols : src.row_stride};
  load_tile(tile, cols, src, row0, rows, cols);
  return {tile, cols};
}

// Rows [row0, row0 + rows) transposed into a tile with kBlockM columns: tile[c * kBlockM + r].
template <class Rows>
void load_tile_transposed(float* __restrict tile, const Rows& src, int64_t row0, int64_t rows, int64_t cols,
                          float* __restrict staging) {
  const RowBlock block = row_block(src, row0, rows, cols, staging);
  transpose_into_tile(tile, block.data, block.ld, rows, cols);
}

// Tile store: tile[r * ld + c] into rows [row0, row0 + rows) × columns [0, cols) of dst.
template <class Rows>
void store_tile(const Rows& dst, int64_t row0, int64_t rows, int64_t cols, const float* tile, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r) store_row(dst.data, dst.dtype, dst.at(row0 + r), tile + r * ld, cols);
}

// The fp32 lse of one (batch, head): lse[row] for the rows of that sequence (params.hpp).
inline float* lse_rows(const FwdParams& p, int64_t b, const Sequence& seq, int64_t h) {
  return p.lse + b * p.lse_batch_stride + h * p.lse_head_stride + seq.row_offset_q;
}

}  // namespace flashattn::cpu
