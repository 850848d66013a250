// Device-side parameters of the sm80 backward (built once on the host from the validated
// BwdParams) and the layout of its workspace.
//
// Workspace (fp32 / int32, each sub-buffer 256-byte aligned), for R padded query rows:
//   dq_accum  [heads_q][R][head_dim]   dQ accumulated by red.global.add (head_dim: the instance's);
//                                      within each block_m-row tile, fragment order (DqLayout),
//                                      or row-major where dq_row_major (the sm90 backward)
//   lse_log2  [heads_q][R]             LSE·log2(e); +inf on padding rows, so P = 0 there
//   dsum      [heads_q][R]             D = rowsum(dO ∘ O); 0 on padding rows
//   counters  [heads_q][R / block_m]   deterministic mode: how many key blocks have added into
//                                      each query block's dQ so far
//   tail_dkv  [split_tail][2][block_n][head_dim]  split tail (below): the parts' dK·scale and dV sums
//   tail_done [split_tail]             split tail: parts finished, per split key block
// Split: blocks [split_first, split_first + split_tail) run as parts over consecutive ranges of
// their loop steps; the parts add dK, dV into tail_dkv and the last part to finish writes them. The
// plan (bwd_plan.cu) splits either the grid's last, partial wave (no mask: blocks mod SMs =
// split_tail) or, under a mask, every block (split_first = 0) when the longest block is longer than
// an SM's share of all steps (MQA at batch 1). Two ways to cut: split_parts equal parts per block,
// or (split_span > 0, the last wave only, where every block walks split_block_steps steps) the split
// blocks' steps laid end to end and cut into spans of split_span steps, one per thread block, each
// one or two segments (TailSegment below) — every SM then gets the same number of steps however
// the tail divides. Blocks [0, split_first) run whole (the main kernel's grid), the parts are a
// second kernel's grid, launched as a programmatic dependent of the first (bwd_kernel.cuh) when
// there is one. Both tail buffers are zeroed by the preprocess kernel, which runs before the main
// kernel.
// Sequence b's query rows start at ws_row_start(b), a multiple of block_m, and own
// ceil(seqlen_q(b) / block_m) · block_m rows, so every query tile is whole and 16-byte aligned:
//   padded batch: ws_row_start(b) = b · ceil(seqlen_q / block_m) · block_m,  R = that · batch
//   varlen:       ws_row_start(b) = ⌊(cu_seqlens_q[b] + b · block_m) / block_m⌋ · block_m,
//                 R = round_up(total_q + batch · block_m, block_m)
// (varlen tiles never overlap: ws_row_start(b + 1) ≥ ws_row_start(b) + ceil(len_b / block_m)·block_m).
#pragma once

#include <cstdint>

#include "cuda/common/host_device.cuh"
#include "cuda/common/scores.cuh"

namespace flashattn::cuda::sm80 {

struct BwdKernelParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* out = nullptr;
  const void* dout = nullptr;
  const float* lse = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;

  int64_t q_batch_stride = 0, q_row_stride = 0, q_head_stride = 0;
  int64_t k_batch_stride = 0, k_row_stride = 0, k_head_stride = 0;
  int64_t v_batch_stride = 0, v_row_stride = 0, v_head_stride = 0;
  int64_t o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;
  int64_t do_batch_stride = 0, do_row_stride = 0, do_head_stride = 0;
  int64_t dq_batch_stride = 0, dq_row_stride = 0, dq_head_stride = 0;
  int64_t dk_batch_stride = 0, dk_row_stride = 0, dk_head_stride = 0;
  int64_t dv_batch_stride = 0, dv_row_stride = 0, dv_head_stride = 0;
  int64_t lse_batch_stride = 0, lse_head_stride = 0;

  const int32_t* cu_seqlens_q = nullptr;  // varlen: both set
  const int32_t* cu_seqlens_k = nullptr;
  int batch = 0;
  int seqlen_q = 0, seqlen_k = 0;  // varlen: the maxima
  int heads_q = 0, heads_kv = 0, group = 1;
  int hdim_qk = 0, hdim_v = 0;
  int window_left = -1, window_right = -1;  // clamp_window()ed; < 0 unbounded

  float scale = 1.f;       // softmax_scale: dK and dQ are scaled by it at the end
  ScoreTransform scores;   // S → log2-domain scores, as the forward (common/scores.cuh)
  ScoreSlope score_slope;  // where score_slope_varies(scores): dS's factor per score
  bool deterministic = false;
  bool key_blocks_outer = false;  // the grid's order (scheduler.cuh's bwd_block_index; sm90/bwd_tile.cuh's bwd_key_block)
  int order_pairs = 0;            // sm90, key_blocks_outer: (kv head, sequence) pairs per group of that order

  // Workspace (see the top of this file).
  float* dq_accum = nullptr;
  float* lse_log2 = nullptr;
  float* dsum = nullptr;
  int32_t* counters = nullptr;
  int64_t ws_rows = 0;     // R
  int head_dim = 0;        // the instance: dq_accum's row length
  int block_m = 0;         // the tile's, for the pre/postprocess kernels
  int num_m_blocks = 0;    // ceil(seqlen_q / block_m), of the longest sequence
  int num_n_blocks = 0;    // ceil(seqlen_k / block_n), likewise
  int split_first = 0;     // blocks before it run whole; = the block count when nothing is split
  int split_tail = 0;      // blocks from it on, split; 0 when nothing is split
  int split_parts = 1;     // parts per split block (split_span = 0)
  float* tail_dkv = nullptr;
  int32_t* tail_done = nullptr;
  int64_t tail_zero_vec4 = 0;  // 16-byte words from tail_dkv through tail_done: the preprocess zeroes them
  bool dq_row_major = false;   // dq_accum tiles in plain row order (the sm90 backward's) instead of DqLayout
  // The sm90 backward's key blocks in parts (split_parts of them, blockIdx.y; the sums in tail_dkv):
  // every part walks part_heads query heads of the group, the first part_heads_extra one more.
  int part_heads = 0, part_heads_extra = 0;
  // The split's other cut (see the top of this file): > 0, steps per thread block of the split
  // kernel, whose blocks walk split_block_steps steps each.
  int split_span = 0, split_block_steps = 0;
  // The first split_first blocks run in cluster pairs that sum dQ over two key blocks (bwd_pair.cuh;
  // the plan's pair_dq_applies).
  bool pair_dq = false;
};

// Which of a key block's loop steps a thread block runs: part `part` of `parts` equal ranges of
// them, or where end >= 0 the steps [begin, end), one of `parts` segments of a span split. The main
// kernel's {} (part 0 of 1) folds to all of them.
struct BwdStepRange {
  int part = 0, parts = 1, begin = 0, end = -1;

  FLASHATTN_HD int first(int64_t steps) const { return end < 0 ? static_cast<int>(steps * part / parts) : begin; }
  FLASHATTN_HD int stop(int64_t steps) const { return end < 0 ? static_cast<int>(steps * (part + 1) / parts) : end; }
};

// A span split cuts the split blocks' steps, laid end to end (split_block_steps each), into spans of
// split_span steps (the last one shorter), one per SM, and each span into one segment per key block
// it touches: one or two (split_span <= split_block_steps). Segment `half` (0 or 1) of span j: its
// grid block, its steps of that block, and how many segments (of this and the neighbouring spans)
// that block has in all: the count its last part waits for.
struct TailSegment {
  int grid_block = 0;
  BwdStepRange range;
};
FLASHATTN_HD TailSegment tail_segment(const BwdKernelParams& p, int j, int half) {
  const int64_t steps = p.split_block_steps, span = p.split_span, all = int64_t{p.split_tail} * steps;
  const int64_t at = int64_t{j} * span, stop = at + span < all ? at + span : all;
  const int64_t block = at / steps + half, block_begin = block * steps, block_end = block_begin + steps;
  TailSegment s;
  s.grid_block = p.split_first + static_cast<int>(block);
  s.range.parts = static_cast<int>((block_end - 1) / span - block_begin / span + 1);
  s.range.begin = static_cast<int>((at > block_begin ? at : block_begin) - block_begin);
  s.range.end = static_cast<int>((stop < block_end ? stop : block_end) - block_begin);
  return s;
}

// The span split's segments in the order the split kernel's blocks take them, span · 2 + half,
// longest first (bwd_plan.cu's tail_order): the hardware starts those blocks in index order on the
// SMs as they free up, so the SMs whose first segments were short get the long second segments and
// every SM ends near one span's length (list scheduling, longest first). A second kernel parameter
// of the split kernel only.
constexpr int kMaxTailSegments = 512;  // two per span, one span per SM: up to 256 SMs
struct TailOrder {
  uint16_t segment[kMaxTailSegments];
};

// First workspace row of sequence b (see the top of this file). q_offset = cu_seqlens_q[b] (varlen).
FLASHATTN_HD int64_t ws_row_start(int b, int64_t q_offset, bool varlen, int seqlen_q, int block_m) {
  if (varlen) return (q_offset + int64_t{b} * block_m) / block_m * block_m;
  return int64_t{b} * ((seqlen_q + block_m - 1) / block_m) * block_m;
}

FLASHATTN_HD int64_t ws_rows(int batch, int64_t total_q, bool varlen, int seqlen_q, int block_m) {
  if (varlen) return (total_q + int64_t{batch} * block_m + block_m - 1) / block_m * block_m;
  return ws_row_start(batch, 0, false, seqlen_q, block_m);
}

}  // namespace flashattn::cuda::sm80
