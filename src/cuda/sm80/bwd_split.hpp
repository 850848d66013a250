// Which blocks of the sm80 backward's grid run as parts (bwd_params.cuh's split; bwd_plan.cu's
// split_for) and the grid's order (key_blocks_outer): host code, planned once per call from the
// shapes and the GPU.
#pragma once

#include "backend/params.hpp"
#include "cuda/sm80/bwd_params.cuh"
#include "cuda/sm80/bwd_tile.cuh"

namespace flashattn::cuda::sm80 {

// Blocks [0, first) run whole; blocks [first, first + tail) each run as `parts` parts (tail = 0 and
// parts = 1 when nothing is split), or where span > 0, as spans of `span` of their steps laid end to
// end, each block walking block_steps (bwd_params.cuh). first + tail is the grid's block count.
struct BwdSplit {
  int first = 0, parts = 1, tail = 0;
  int span = 0, block_steps = 0;

  static BwdSplit whole(int64_t blocks) { return {static_cast<int>(blocks), 1, 0}; }
};

BwdSplit split_for(const BwdParams& p, const BwdTile& tile, int num_sms);

// A span split's segments, longest first (bwd_params.cuh's TailOrder), into order.segment; returns
// their count, the split kernel's grid.
int tail_order(const BwdKernelParams& p, TailOrder& order);

// Whether the first split.first blocks run in cluster pairs that sum dQ over two key blocks
// (BwdTile::pair_dq, bwd_pair.cuh): tiles that have it, where the paired kernel runs from its sm_90
// PTX (sm90_ptx: check_bwd_main_image's answer; clusters need it), without soft cap, varlen or
// deterministic mode, where the pairs line up (an even number of key blocks per head and of whole
// blocks).
bool pair_dq_applies(const BwdParams& p, const BwdTile& tile, bool sm90_ptx, const BwdSplit& split);

// Whether the grid runs key blocks outer (scheduler.cuh's bwd_block_index) on a GPU whose memory
// moves memory_bandwidth bytes/s (0: unknown): under a mask with edges, where measured faster.
bool key_blocks_outer(const BwdParams& p, const BwdTile& tile, double memory_bandwidth);

// The steps (query blocks of block_m rows, times the group's query heads) a backward grid of key
// blocks of block_n keys walks: in all (every kv head and sequence, varlen counted at the longest
// lengths) and in its longest block, under the call's mask (Mask::m_block_count, the kernels' own
// count). The sm90 backward's plan reads the same counts (sm90::bwd_chains).
struct BwdChainSteps {
  int64_t steps = 0, longest = 0;
};
BwdChainSteps chain_steps(const BwdParams& p, int block_n, int block_m);

}  // namespace flashattn::cuda::sm80
