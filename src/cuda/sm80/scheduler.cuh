// Which work a thread block does: grid index → (batch, head, query block) for the forward, →
// (batch, kv head, key block) and the order of its (query head, query block) steps for the backward.
#pragma once

#include <cstdint>

#include "cuda/common/host_device.cuh"
#include "cuda/common/seqlen.cuh"
#include "cuda/sm80/bwd_params.cuh"
#include "cuda/sm80/fwd_params.cuh"

namespace flashattn::cuda::sm80 {

// Which (query block, head, batch) a forward thread block computes. The grid is 1-D, query blocks
// fastest (neighbouring blocks share K and V in L2) and in reverse order, so that under a causal
// mask the longest blocks start first.
struct FwdBlockIndex {
  int m_block, head, batch;
};

__device__ __forceinline__ FwdBlockIndex fwd_block_index(const FwdKernelParams& p) {
  int id = static_cast<int>(blockIdx.x);
  FwdBlockIndex ix;
  ix.m_block = p.num_m_blocks - 1 - id % p.num_m_blocks;
  id /= p.num_m_blocks;
  ix.head = id % p.heads_q;
  ix.batch = id / p.heads_q;
  return ix;
}

// The order of the backward's key blocks in the grid: ascending (the longest causal ones first) or,
// in deterministic mode with a right-bounded mask, descending (bwd_dq.cuh says why). An int-sized
// enum: as a bool argument the kernel's PTX changed (branch polarity).
enum class KeyBlockOrder : int { ascending, descending };

__device__ __forceinline__ KeyBlockOrder key_block_order(const BwdKernelParams& p) {
  return p.deterministic && p.window_right >= 0 ? KeyBlockOrder::descending : KeyBlockOrder::ascending;
}

// Which key block (n_block, kv head h_kv, sequence b) a backward grid block owns. Two grid orders
// (p.key_blocks_outer, chosen by the plan; kLongestFirst = BwdTile::longest_first, without which
// only the first is compiled):
//  - heads outer: grid_block = n + num_n_blocks · (kv head + heads_kv · b), key blocks fastest, so
//    the blocks reading one head's Q and dO run together;
//  - key blocks outer: grid_block = (kv head + heads_kv · b) + heads_kv · batch · n, every
//    sequence's and head's key block 0 first. Under a causal mask key block n walks fewer query
//    blocks as n grows, so this hands out the longest blocks first across the whole grid (longest
//    processing time first), where heads outer starts each head's longest blocks only when the
//    previous heads' blocks free their SMs, and the grid ends on long blocks of its last heads.
// n_block = n, or last − n in descending order.
struct BwdBlockIndex {
  int n_block, h_kv, b;
};

template <bool kLongestFirst>
FLASHATTN_HD BwdBlockIndex bwd_block_index(const BwdKernelParams& p, int grid_block, KeyBlockOrder order) {
  BwdBlockIndex ix;
  if (kLongestFirst && p.key_blocks_outer) {
    const int heads_seqs = p.heads_kv * p.batch;
    const int n = grid_block / heads_seqs, head_seq = grid_block - n * heads_seqs;
    ix.n_block = order == KeyBlockOrder::descending ? p.num_n_blocks - 1 - n : n;
    ix.h_kv = head_seq % p.heads_kv;
    ix.b = head_seq / p.heads_kv;
    return ix;
  }
  // Heads outer, written as before the other order existed: tiles without it keep their PTX.
  int bid = grid_block;
  ix.n_block = order == KeyBlockOrder::descending ? p.num_n_blocks - 1 - bid % p.num_n_blocks : bid % p.num_n_blocks;
  bid /= p.num_n_blocks;
  ix.h_kv = bid % p.heads_kv;
  ix.b = bid / p.heads_kv;
  return ix;
}

// One backward loop step: query head hq, the query block at row m0, the workspace row of its first
// row (hq·R + ws_row0 + m0: LSE and D rows, the dq_accum tile at ws_row·D, the deterministic counter
// at ws_row / block_m) and the global addresses of its Q and dO tiles.
struct BwdStep {
  int hq, m0;
  int64_t ws_row;
  const uint16_t* q;
  const uint16_t* dout;
};

// The steps of one key block of sequence b, query blocks fastest: for each query head of the GQA
// group, the query blocks [m_start, m_stop) that see the key block. at() builds a step from scratch,
// after() the next one by additions: ncu had shown two integer divisions and ~100 uniform
// instructions of index and 64-bit address arithmetic per step when every step was decoded from its
// number.
template <int kBM>
struct BwdStepOrder {
  const BwdKernelParams& p;
  int b;
  const SeqLens& seq;
  int64_t ws_row0;  // ws_row_start(b)
  int m_start, m_stop;

  __device__ __forceinline__ BwdStep at(int hq, int m0) const {
    BwdStep s;
    s.hq = hq;
    s.m0 = m0;
    s.ws_row = hq * p.ws_rows + ws_row0 + m0;
    s.q = static_cast<const uint16_t*>(p.q) +
          gmem_offset(b, seq.q_offset + m0, hq, p.q_batch_stride, p.q_row_stride, p.q_head_stride);
    s.dout = static_cast<const uint16_t*>(p.dout) +
             gmem_offset(b, seq.q_offset + m0, hq, p.do_batch_stride, p.do_row_stride, p.do_head_stride);
    return s;
  }
  // The next query block of the same head, or the first of the next head of the group.
  __device__ __forceinline__ BwdStep after(BwdStep s) const {
    if (s.m0 + kBM >= m_stop) return at(s.hq + 1, m_start);
    s.m0 += kBM;
    s.ws_row += kBM;
    s.q += kBM * p.q_row_stride;
    s.dout += kBM * p.do_row_stride;
    return s;
  }
  // The workspace row of the step before s (for its deterministic-mode counter), from s alone.
  __device__ __forceinline__ int64_t ws_row_before(const BwdStep& s) const {
    return s.m0 == m_start ? s.ws_row - p.ws_rows + (m_stop - m_start) - kBM : s.ws_row - kBM;
  }
};

}  // namespace flashattn::cuda::sm80
