// The tensor-map specs of the sm90 forward (plain C++, shared by the plan and the launch): Q, K and V
// as rank-4 views {d, rows, heads, batch} (innermost first), box {64 columns, a block of rows, 1, 1}
// in the 128B swizzle. The plan checks them (check_tile_map: alignment and strides TMA accepts,
// else not_supported so that "auto" keeps sm80); the launch encodes them.
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

// Padded batches only (the plan refuses varlen).
inline FwdMapSpecs fwd_map_specs(const FwdParams& p, const FwdShape& shape) {
  return {fwd_map_spec(p.q, p.hdim_qk, p.seqlen_q, p.heads_q, p.batch, p.q_row_stride, p.q_head_stride,
                       p.q_batch_stride, shape.block_m),
          fwd_map_spec(p.k, p.hdim_qk, p.seqlen_k, p.heads_kv, p.batch, p.k_row_stride, p.k_head_stride,
                       p.k_batch_stride, shape.block_n),
          fwd_map_spec(p.v, p.hdim_v, p.seqlen_k, p.heads_kv, p.batch, p.v_row_stride, p.v_head_stride,
                       p.v_batch_stride, shape.block_n)};
}

}  // namespace flashattn::cuda::sm90
