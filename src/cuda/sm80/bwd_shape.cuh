// The sm80 backward's compile-time shape of one instance: the tile (bwd_tile.cuh), the warp tiles of
// each product and the shared-memory carve-up.
#pragma once

#include "cuda/sm80/bwd_tile.cuh"
#include "cuda/sm80/smem_tile.cuh"

namespace flashattn::cuda::sm80 {

// Everything compile-time about one instance: the tile, the warp tiles of each product, and the
// shared-memory carve-up.
template <int kHeadDim, bool kBigSmem>
struct BwdShape {
  static constexpr BwdTile kTile = bwd_tile(kHeadDim, kBigSmem);
  static constexpr int kD = kHeadDim, kBM = kTile.block_m, kBN = kTile.block_n, kStages = kTile.stages;
  using TileQ = SmemTile<kBM, kD>;   // Q, dO
  using TileK = SmemTile<kBN, kD>;   // K, V; dK, dV in the epilogue
  using TileP = SmemTile<kBM, kBN>;  // P, dS

  // S, dP [kBM × kBN]: warp (wm, wn) = (warp % kWmS, warp / kWmS) owns a kTmS × kTnS tile.
  static constexpr int kWmS = kTile.warps_m_sdp, kWnS = kBwdWarps / kWmS;
  static constexpr int kTmS = kBM / kWmS, kTnS = kBN / kWnS;
  static constexpr int kMtS = kTmS / 16, kNtS = kTnS / 8;
  // dK, dV [kBN × kD]: warp (wn, wd) = (warp % kWnKV, warp / kWnKV).
  static constexpr int kWnKV = kTile.warps_n_dkv, kWdKV = kBwdWarps / kWnKV;
  static constexpr int kTnKV = kBN / kWnKV, kTdKV = kD / kWdKV;
  static constexpr int kMtKV = kTnKV / 16, kNtKV = kTdKV / 8;
  // dQ [kBM × kD]: warp (wm, wd) = (warp % kWmQ, warp / kWmQ).
  static constexpr int kWmQ = kTile.warps_m_dq, kWdQ = kBwdWarps / kWmQ;
  static constexpr int kTmQ = kBM / kWmQ, kTdQ = kD / kWdQ;
  static constexpr int kMtQ = kTmQ / 16, kNtQ = kTdQ / 8;
  // Paired (kTile.pair_dq): a CTA adds dQ for kD / 2 columns; each dQ warp tile above is cut into two
  // column halves, one per warp: warp (wm, wd, half) = (warp % kWmQ, warp / kWmQ % (kWdQ / 2), warp /
  // (kBwdWarps / 2)) owns rows wm·kTmQ .., columns (kWdQ / 2 · rank + wd)·kTdQ + half·kTdQ / 2 ..
  static constexpr int kTdQPair = kTdQ / 2, kNtQPair = kTdQPair / 8;
  // The other key block's K, this CTA's half of the columns (a whole K tile where unpaired: the type
  // exists, unused, and half of some head dims is no whole swizzle period).
  using TileKHalf = SmemTile<kBN, kTile.pair_dq ? kD / 2 : kD>;

  static_assert(kTile.head_dim == kHeadDim, "no tile for this head dim");
  static_assert(kBM % kWmS == 0 && kBN % kWnS == 0 && kTmS % 16 == 0 && kTnS % 16 == 0, "S warp tile");
  static_assert(kBN % kWnKV == 0 && kD % kWdKV == 0 && kTnKV % 16 == 0 && kTdKV % 16 == 0, "dK/dV warp tile");
  static_assert(kBM % kWmQ == 0 && kD % kWdQ == 0 && kTmQ % 16 == 0 && kTdQ % 16 == 0, "dQ warp tile");
  static_assert(kBM % 4 == 0 && kBM / 2 <= kBwdThreads, "LSE/D rows load as 16-byte chunks, one per thread");

  // Shared memory, in bytes from the (128-byte aligned) base.
  static constexpr int kRowBytes = kBM * 4;
  static constexpr int kOffK = 0;
  static constexpr int kOffV = kOffK + TileK::kBytes;
  static constexpr int kOffQ = kOffV + TileK::kBytes;
  static constexpr int kOffDo = kOffQ + kStages * TileQ::kBytes;
  static constexpr int kOffP = kOffDo + kStages * TileQ::kBytes;
  static constexpr int kOffDs = kOffP + TileP::kBytes;
  static constexpr int kOffLse = kOffDs + TileP::kBytes;
  static constexpr int kOffDsum = kOffLse + kStages * kRowBytes;
  static constexpr int kOffKPair = kOffDsum + kStages * kRowBytes;
  static constexpr int kOffPairBar = kOffKPair + (kTile.pair_dq ? TileKHalf::kBytes : 0);
  static constexpr int kSmemBytes = kOffPairBar + (kTile.pair_dq ? 16 : 0);
  static_assert(kSmemBytes == kTile.smem_bytes(), "bwd_tile's smem_bytes and the carve-up disagree");
};

// Origins of a warp's tiles in the three kinds of product: S and dP (query rows × keys of the block),
// dK and dV (keys × head dim), dQ (query rows × head dim). Filled in the kernel (bwd_block_part): built
// by a function, the PTX changed (its integer arithmetic was simplified before inlining).
struct BwdWarpTiles {
  int s_row0, s_col0, kv_row0, kv_col0, q_row0, q_col0;
};

}  // namespace flashattn::cuda::sm80
