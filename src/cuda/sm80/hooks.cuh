// The hooks where attention variants change the sm80 kernels, on mma C fragments (ptx/mma.cuh):
// the score hook (after S = Q·Kᵀ: the score transform of common/scores.cuh, then the mask) and the
// probability hook (after the softmax, or after the backward recomputes P; later dropout). Forward
// and backward share them.
#pragma once

#include "cuda/common/host_device.cuh"
#include "cuda/common/mask.cuh"
#include "cuda/common/scores.cuh"

namespace flashattn::cuda {

// Sets the invisible entries of an mma m16n8k16 accumulator tile to kMaskedScore.
//   s[mi][ni][c] is the C fragment (ptx/mma.cuh) of rows row0 + 16·mi + 8·(c / 2) + g and keys
//   col0 + 8·ni + 2t + (c % 2), with g = lane / 4, t = lane % 4; row0/col0 are positions within
//   the sequence. Rows ≥ seqlen_q are masked like any other (their result is never stored).
// kLeftEdge false: for a mask without a left edge (mask.left < 0: causal, or a window open to the
// left), where every key from 0 is in on that side: one compare per entry, of the right edge.
template <bool kLeftEdge = true, int kMTiles, int kNTiles>
FLASHATTN_HD void mask_accumulator(float (&s)[kMTiles][kNTiles][4], const Mask& mask, int row0, int col0,
                                   int lane) {
  const int g = lane / 4, t = lane % 4;
FLASHATTN_UNROLL
  for (int mi = 0; mi < kMTiles; ++mi) {
FLASHATTN_UNROLL
    for (int half = 0; half < 2; ++half) {
      const int row = row0 + 16 * mi + 8 * half + g;
      const int begin = kLeftEdge ? mask.key_begin(row) : 0, end = mask.key_end(row);
FLASHATTN_UNROLL
      for (int ni = 0; ni < kNTiles; ++ni) {
FLASHATTN_UNROLL
        for (int e = 0; e < 2; ++e) {
          const int col = col0 + 8 * ni + 2 * t + e;
          if ((kLeftEdge && col < begin) || col >= end) s[mi][ni][2 * half + e] = kMaskedScore;
        }
      }
    }
  }
}

// The score hook: a warp's S tile, rows m0 + row0 + .., keys n_block·kTileN + col0 + .. of the (query
// tile at m0, key block n_block) pair, between S = Q·Kᵀ and the softmax. The mask costs only on tile
// pairs that straddle a mask edge or the sequence end. It takes the key block's index, not its first
// key: the key block's first key n_block·kTileN is then computed where the mask needs it (passed in,
// it was computed before the call and the forward's PTX changed at D = 64 and 192). kSlopeVaries:
// as transform_scores'.
template <int kTileM, int kTileN, bool kSlopeVaries = true, int kMTiles, int kNTiles>
__device__ __forceinline__ void score_hook(float (&s)[kMTiles][kNTiles][4], const ScoreTransform& scores,
                                           const Mask& mask, int m0, int n_block, int row0, int col0, int lane) {
  transform_scores<kSlopeVaries>(s, scores);
  if (mask.tile_needs_mask(m0, kTileM, n_block * kTileN, kTileN)) {
    mask_accumulator(s, mask, m0 + row0, n_block * kTileN + col0, lane);
  }
}

// The probability hook on one column pair (p0, p1) of query row `row`, keys key, key + 1: identity
// today. Dropout goes here; it needs the positions for its random stream.
__device__ __forceinline__ void probability_hook(float& /*p0*/, float& /*p1*/, int /*row*/, int /*key*/) {}

// The probability hook on a warp's P tile (C fragments; rows row0 + .., keys col0 + ..).
template <int kMTiles, int kNTiles>
__device__ __forceinline__ void probability_hook(float (&p)[kMTiles][kNTiles][4], int row0, int col0, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int ni = 0; ni < kNTiles; ++ni) {
        probability_hook(p[mi][ni][2 * half], p[mi][ni][2 * half + 1], row0 + 16 * mi + 8 * half + g,
                         col0 + 8 * ni + 2 * t);
      }
    }
  }
}

}  // namespace flashattn::cuda
