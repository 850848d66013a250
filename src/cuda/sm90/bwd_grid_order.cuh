// The sm90 backward's grid order: which key block of which (kv head, sequence) pair blockIdx.x
// computes. On the host too (FLASHATTN_HD): the plan's tests check that it covers the grid once.
#pragma once

#include "cuda/common/host_device.cuh"

namespace flashattn::cuda::sm90 {

struct BwdGridCell {
  int n_block;  // the key block, before deterministic mode's reversal (bwd_tile.cuh's bwd_key_block)
  int pair;     // kv head + heads_kv · sequence
};

// Without a mask: blockIdx = key block + num_n_blocks · pair, the CTAs of one pair together (they
// read the same Q and dO and add into the same dQ, which L2 then holds). Under a mask
// (key_blocks_outer) the pairs go in groups of order_pairs, and within a group the key block is
// outermost: the longest blocks start first (causal: the first key blocks walk the most steps) while
// the CTAs running at once share the Q, dO and dQ of a few pairs, not of all (the plan's
// bwd_order_pairs; order_pairs = pairs is sm80's order, every pair's first key block first).
FLASHATTN_HD BwdGridCell bwd_grid_cell(int bid, bool key_blocks_outer, int order_pairs, int num_n_blocks,
                                       int pairs) {
  if (!key_blocks_outer) return {bid % num_n_blocks, bid / num_n_blocks};
  const int group_ctas = order_pairs * num_n_blocks;
  const int group = bid / group_ctas;
  const int first_pair = group * order_pairs;
  const int in_group = order_pairs < pairs - first_pair ? order_pairs : pairs - first_pair;  // the last may be short
  const int r = bid - group * group_ctas;
  const int n_block = r / in_group;
  return {n_block, first_pair + (r - n_block * in_group)};
}

// A key block in parts (the kParts kernels; blockIdx.y = part): part j walks `count` query heads of
// the group from its `first`, part_heads each and one more for the first `extra` parts (the plan sets
// part_heads = group / parts, extra = group % parts, so the parts cover the group once).
struct BwdPartHeads {
  int first, count;
};
FLASHATTN_HD BwdPartHeads bwd_part_heads(int part, int part_heads, int extra) {
  return {part * part_heads + (part < extra ? part : extra), part_heads + (part < extra ? 1 : 0)};
}

}  // namespace flashattn::cuda::sm90
