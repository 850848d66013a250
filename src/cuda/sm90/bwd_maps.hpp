// The tensor-map specs of the sm90 backward (plain C++, shared by the plan and the launch): Q, K, V
// and dO as the forward's rank-4 views {d, rows, heads, batch} (fwd_maps.hpp), boxes of a step's 64
// query rows and of a CTA's 128 keys. The plan checks them (check_tile_map), the launch encodes them.
#pragma once

#include "backend/params.hpp"
#include "cuda/sm90/bwd_launch.hpp"
#include "cuda/sm90/fwd_maps.hpp"

namespace flashattn::cuda::sm90 {

struct BwdMapSpecs {
  TileMapSpec q, k, v, dout;
};

inline BwdMapSpecs bwd_map_specs(const BwdParams& p) {
  return {fwd_map_spec(p.q, p.hdim_qk, p.seqlen_q, p.heads_q, p.batch, p.q_row_stride, p.q_head_stride,
                       p.q_batch_stride, kBwdBlockM),
          fwd_map_spec(p.k, p.hdim_qk, p.seqlen_k, p.heads_kv, p.batch, p.k_row_stride, p.k_head_stride,
                       p.k_batch_stride, kBwdBlockN),
          fwd_map_spec(p.v, p.hdim_v, p.seqlen_k, p.heads_kv, p.batch, p.v_row_stride, p.v_head_stride,
                       p.v_batch_stride, kBwdBlockN),
          fwd_map_spec(p.dout, p.hdim_v, p.seqlen_q, p.heads_q, p.batch, p.do_row_stride, p.do_head_stride,
                       p.do_batch_stride, kBwdBlockM)};
}

}  // namespace flashattn::cuda::sm90
