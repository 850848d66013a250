// Which work a thread block does: grid index → (batch, head, query block) for the forward, →
// (batch, kv head, key block) and the order of its (query head, query block) steps for the backward.
#pragma once

#include <cstdint>

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

}  // namespace flashattn::cuda::sm80
