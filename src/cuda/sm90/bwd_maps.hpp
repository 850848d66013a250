// The tensor-map specs of the sm90 backward (plain C++, shared by the plan and the launch): Q, K, V
// and dO as the forward's rank-4 views {d, rows, heads, batch} (fwd_maps.hpp), boxes of a step's
// query rows and of a CTA's keys (bwd_block_m, bwd_block_n). The plan checks them (check_tile_map),
// the launch encodes them.
#pragma once

#include "backend/params.hpp"
#include "cuda/sm90/bwd_launch.hpp"
#include "cuda/sm90/fwd_maps.hpp"

namespace flashattn::cuda::sm90 {

struct BwdMapSpecs {
  TileMapSpec q, k, v, dout;
};

// Padded batches: {d, seqlen, heads, batch}; varlen: the packed tensors {d, total rows, heads, 1}
// (fwd_maps.hpp's rows and batch of a call). Q and dO boxes of block_m rows, K and V boxes of block_n
// keys.
inline BwdMapSpecs bwd_map_specs(const BwdParams& p, int block_m, int block_n) {
  const int64_t rows_q = fwd_map_rows_q(p), rows_k = fwd_map_rows_k(p), batch = fwd_map_batch(p);
  return {fwd_map_spec(p.q, p.hdim_qk, rows_q, p.heads_q, batch, p.q_row_stride, p.q_head_stride, p.q_batch_stride,
                       block_m),
          fwd_map_spec(p.k, p.hdim_qk, rows_k, p.heads_kv, batch, p.k_row_stride, p.k_head_stride, p.k_batch_stride,
                       block_n),
          fwd_map_spec(p.v, p.hdim_v, rows_k, p.heads_kv, batch, p.v_row_stride, p.v_head_stride, p.v_batch_stride,
                       block_n),
          fwd_map_spec(p.dout, p.hdim_v, rows_q, p.heads_q, batch, p.do_row_stride, p.do_head_stride,
                       p.do_batch_stride, block_m)};
}

// Which maps a call's kernel ever loads through: K and V only if some sequence has keys (else every
// CTA returns at once), Q and dO only if, besides, some has query rows (a key block with none walks
// no step). An empty tensor may have no data pointer, and TMA takes no zero-sized dimension, so the
// maps of the others are neither checked nor encoded (the kernel gets zeroed maps it never reads);
// dK and dV are still written, zeros where no query sees a key.
inline bool bwd_loads_keys(const BwdParams& p) { return fwd_has_keys(p) && p.heads_kv > 0; }
inline bool bwd_loads_queries(const BwdParams& p) {
  return bwd_loads_keys(p) && fwd_map_rows_q(p) > 0 && p.heads_q > 0;
}

}  // namespace flashattn::cuda::sm90
