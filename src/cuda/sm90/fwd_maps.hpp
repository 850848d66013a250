// The tensor-map specs of the sm90 forward (plain C++, shared by the plan and the launch): Q, K and V
// as rank-4 views {d, rows, heads, batch} (innermost first), box {64 columns, a block of rows, 1, 1}
// in the 128B swizzle; varlen batches as the packed tensors {d, total rows, heads, 1}; paged K/V as
// the pools {d, page_size, heads_kv, num_pages}. The plan checks them (check_tile_map: alignment
// and strides TMA accepts, else not_supported so that "auto" keeps sm80); the launch encodes them.
#pragma once

#include "backend/params.hpp"
#include "cuda/sm90/fwd_shape.hpp"
#include "cuda/sm90/tensor_map.hpp"

namespace flashattn::cuda::sm90 {

struct FwdMapSpecs {
  TileMapSpec q, k, v;
};

// A stride TMA accepts for a dimension of one index (never stepped, but encoded all the same).
inline int64_t tma_stride(int64_t extent, int64_t stride) { return extent > 1 ? stride : 8; }

inline TileMapSpec fwd_map_spec(const void* data, int64_t d, int64_t rows, int64_t heads, int64_t batch,
                                int64_t row_stride, int64_t head_stride, int64_t batch_stride, int box_rows) {
  TileMapSpec s;
  s.data = data;
  s.rank = 4;
  s.dims[0] = d;
  s.dims[1] = rows > 0 ? rows : 1;  // an empty tensor is never loaded; TMA wants extents ≥ 1
  s.dims[2] = heads;
  s.dims[3] = batch;
  s.strides[0] = 1;
  s.strides[1] = tma_stride(rows, row_stride);
  s.strides[2] = tma_stride(heads, head_stride);
  s.strides[3] = tma_stride(batch, batch_stride);
  s.box[0] = kSwizzleCols;
  s.box[1] = box_rows;
  s.box[2] = 1;
  s.box[3] = 1;
  s.swizzle = ptx::Swizzle::b128;
  return s;
}

// Rows of the tensors as TMA sees them: padded batches, the sequence lengths (a box past them is
// zero-filled); varlen, the packed rows (total_q / total_k, one "batch": batch strides are 0);
// paged K/V, the rows of one page, the pages being the "batch" (num_pages, the page stride).
inline int64_t fwd_map_rows_q(const FwdParams& p) { return p.is_varlen() ? p.total_q : p.seqlen_q; }
inline int64_t fwd_map_rows_k(const FwdParams& p) {
  return p.is_paged() ? p.page_size : p.is_varlen() ? p.total_k : p.seqlen_k;
}
inline int64_t fwd_map_batch(const FwdParams& p) { return p.is_varlen() ? 1 : p.batch; }
inline int64_t fwd_map_batch_k(const FwdParams& p) { return p.is_paged() ? p.num_pages : fwd_map_batch(p); }

// Paged K/V: the rows one box moves, a page's rows within a key block (or the block, when a page
// holds whole blocks); fwd_producer.cuh's load_paged_rows places the boxes.
inline int fwd_paged_box_rows(const FwdParams& p, const FwdShape& shape) {
  return p.page_size < shape.block_n ? static_cast<int>(p.page_size) : shape.block_n;
}

// Whether the paged kernel takes pages of this size: whole boxes of the K/V block, a multiple of 16
// rows that divides block_n, or a multiple of block_n. (Boxes need only multiples of 8, a swizzle
// atom, but every box is one TMA load: at 8-key pages, with one thread issuing them all, the H200's
// paged prefill ran at 0.66 × the sm80 family's; docs/kvcache.md.)
inline bool fwd_paged_fits(int64_t page_size, const FwdShape& shape) {
  return page_size >= shape.block_n ? page_size % shape.block_n == 0
                                    : page_size % 16 == 0 && shape.block_n % page_size == 0;
}

// Whether K and V are ever loaded (else their maps are neither checked nor encoded, and the kernel
// sees seqlen_k = 0).
inline bool fwd_has_keys(const FwdParams& p) {
  return p.seqlen_k > 0 && fwd_map_rows_k(p) > 0 && fwd_map_batch_k(p) > 0;
}

// Varlen: the kernel's TMA row coordinate (cu_seqlens[b] + a block's first row) is a signed 32-bit
// integer; the plan refuses packed tensors with more rows than this.
inline constexpr int64_t kMaxPackedRows = (int64_t{1} << 31) - 1;

inline FwdMapSpecs fwd_map_specs(const FwdParams& p, const FwdShape& shape) {
  const int64_t rows_q = fwd_map_rows_q(p), rows_k = fwd_map_rows_k(p), batch = fwd_map_batch(p);
  const int64_t batch_k = fwd_map_batch_k(p);
  const int box_k = p.is_paged() ? fwd_paged_box_rows(p, shape) : shape.block_n;
  return {fwd_map_spec(p.q, p.hdim_qk, rows_q, p.heads_q, batch, p.q_row_stride, p.q_head_stride, p.q_batch_stride,
                       shape.block_m()),
          fwd_map_spec(p.k, p.hdim_qk, rows_k, p.heads_kv, batch_k, p.k_row_stride, p.k_head_stride, p.k_batch_stride,
                       box_k),
          fwd_map_spec(p.v, p.hdim_v, rows_k, p.heads_kv, batch_k, p.v_row_stride, p.v_head_stride, p.v_batch_stride,
                       box_k)};
}

}  // namespace flashattn::cuda::sm90
