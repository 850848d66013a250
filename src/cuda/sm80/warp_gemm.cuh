// Warp-level tensor-core GEMMs on swizzled shared-memory tiles (smem_tile.cuh), built from the
// ldmatrix and mma.m16n8k16 wrappers of src/cuda/ptx. One warp computes a (16·kMTiles) × (8·kNTiles)
// fp32 accumulator tile in the C-fragment layout of ptx/mma.cuh:
//   acc[mi][ni][c] = C[16·mi + 8·(c / 2) + g][8·ni + 2t + (c % 2)],   g = lane / 4, t = lane % 4.
//
//   gemm_ss  C += A·Bᵀ   A: rows of a row-major tile ([m][k], e.g. Q), B: rows of a row-major tile
//                        ([n][k], e.g. K), both fetched with ldmatrix (non-transposed).
//   gemm_rs  C += A·B    A: already in registers as mma A fragments (e.g. P straight from the
//                        softmax), B: a row-major [k][n] tile (e.g. V) fetched with ldmatrix.trans.
//
// ldmatrix.x4 address pattern (lane l gives one row address; matrix i = l / 8, ptx/ldmatrix.cuh):
//   A 16×16 at (row0, k0):  row row0 + l % 16, chunk k0/8 + l / 16
//       → r = {A[g][2t..], A[g+8][2t..], A[g][2t+8..], A[g+8][2t+8..]}: exactly the A fragment.
//   B two n-tiles at (n0, k0), B stored as rows n: row n0 + l % 8 + 8·(l / 16), chunk k0/8 + (l / 8) % 2
//       → r[0], r[1] = {B[n0+g][k0+2t..], B[n0+g][k0+8+2t..]}: the B fragment of n-tile n0,
//         r[2], r[3]: the B fragment of n-tile n0 + 8.
//   B (.trans) two n-tiles at (k0, n0), B stored as rows k: row k0 + l % 16, chunk n0/8 + l / 16
//       → r[0], r[1] = {B[k0+2t..][n0+g], B[k0+8+2t..][n0+g]}: n-tile n0; r[2], r[3]: n-tile n0 + 8.
#pragma once

#include <cstdint>

#include "cuda/sm80/smem_tile.cuh"
#include "cuda/ptx/ldmatrix.cuh"
#include "cuda/ptx/math.cuh"
#include "cuda/ptx/mma.cuh"

namespace flashattn::cuda {

// One lane's ldmatrix row addresses into a swizzled tile, for a fixed lane pattern (row_lane,
// chunk_lane ∈ {0, 1}) and every offset (row_delta, chunk_delta) a GEMM steps through, with
// row_delta % 8 == 0 and chunk_delta even. The swizzle only XORs the low bits of the chunk index
// (below kLowMask + 1) with the row's swizzle, which row_delta does not change; so the address is
// one of kVariants per-lane bases (one per value of chunk_delta's low bits) plus a compile-time
// offset. Writing it this way keeps the compiler from materializing (and spilling) a separate
// register address per k-step.
template <class Tile>
struct LdsmAddr {
  static constexpr int kLowMask = Tile::kChunksPerRow % 8 == 0 ? 7 : 3;  // chunk bits the swizzle touches
  static constexpr int kVariants = (kLowMask + 1) / 2;
  uint32_t base[kVariants];

  __device__ __forceinline__ LdsmAddr(uint32_t tile, int row_lane, int chunk_lane) {
#pragma unroll
    for (int j = 0; j < kVariants; ++j) base[j] = tile + Tile::chunk_offset(row_lane, 2 * j + chunk_lane);
  }
  // Address of (row_lane + row_delta, chunk_lane + chunk_delta), plus `extra` bytes (a stage).
  __device__ __forceinline__ uint32_t at(int row_delta, int chunk_delta, uint32_t extra = 0) const {
    return base[(chunk_delta & kLowMask) / 2] + extra +
           static_cast<uint32_t>(row_delta * Tile::kRowBytes) + Tile::chunk_offset(0, chunk_delta & ~kLowMask);
  }
};

// The three lane patterns (header comment); row0 must be a multiple of 8.
template <class Tile>
__device__ __forceinline__ LdsmAddr<Tile> ldsm_a_addr(uint32_t tile, int row0, int lane) {
  return LdsmAddr<Tile>(tile, row0 + lane % 16, lane / 16);
}
template <class Tile>
__device__ __forceinline__ LdsmAddr<Tile> ldsm_b_addr(uint32_t tile, int row0, int lane) {
  return LdsmAddr<Tile>(tile, row0 + lane % 8 + 8 * (lane / 16), (lane / 8) % 2);
}
template <class Tile>
__device__ __forceinline__ LdsmAddr<Tile> ldsm_bt_addr(uint32_t tile, int row0, int lane) {
  return LdsmAddr<Tile>(tile, row0 + lane % 16, lane / 16);
}

// Two n-tiles of one k-step: c0 += a·B[.., n0 ..], c1 += a·B[.., n0 + 8 ..], where b is the
// ldmatrix.x4 (or .x4.trans) fetch of both: b[0], b[1] the first n-tile's B fragment, b[2], b[3] the
// second's. Every warp GEMM here fetches B this way.
template <class Tag>
__device__ __forceinline__ void mma_n_pair(float (&c0)[4], float (&c1)[4], const uint32_t (&a)[4],
                                           const uint32_t (&b)[4]) {
  const uint32_t b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
  ptx::mma_m16n8k16<Tag>(c0, a, b_lo);
  ptx::mma_m16n8k16<Tag>(c1, a, b_hi);
}

// One k-step of a warp GEMM: acc[mi][ni] += a[mi]·B for every n-tile, with fetch_b(np, b) loading
// the B fragments of n-tiles 2np and 2np + 1 into b (one ldmatrix.x4, plain or .trans).
template <class Tag, int kMTiles, int kNTiles, class FetchB>
__device__ __forceinline__ void mma_k_step(float (&acc)[kMTiles][kNTiles][4], const uint32_t (&a)[kMTiles][4],
                                           const FetchB& fetch_b) {
  static_assert(kNTiles % 2 == 0, "B is fetched two n-tiles per ldmatrix.x4");
#pragma unroll
  for (int np = 0; np < kNTiles / 2; ++np) {
    uint32_t b[4];
    fetch_b(np, b);
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) mma_n_pair<Tag>(acc[mi][2 * np], acc[mi][2 * np + 1], a[mi], b);
  }
}

// C[mi][ni] += A[16mi ..][0 .. K) · B[8ni ..][0 .. K)ᵀ for K = 16·kKSteps; `a` from ldsm_a_addr,
// `b` from ldsm_b_addr (+ b_extra bytes).
template <class Tag, class ATile, class BTile, int kMTiles, int kNTiles, int kKSteps>
__device__ __forceinline__ void gemm_ss(float (&acc)[kMTiles][kNTiles][4], const LdsmAddr<ATile>& a_addr,
                                        const LdsmAddr<BTile>& b_addr, uint32_t b_extra) {
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
    uint32_t a[kMTiles][4];
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) ptx::ldmatrix_x4(a[mi], a_addr.at(16 * mi, 2 * kk));
    mma_k_step<Tag>(acc, a, [&](int np, uint32_t(&b)[4]) { ptx::ldmatrix_x4(b, b_addr.at(16 * np, 2 * kk, b_extra)); });
  }
}

// C[mi][ni] += A[mi] · B[0 .. K)[8ni ..] with A given as register fragments a[mi][kk] (16 rows ×
// k columns 16kk .. 16kk + 15) and B the rows [0, 16·kKSteps) of a row-major [k][n] tile, `b` from
// ldsm_bt_addr (+ b_extra bytes).
template <class Tag, class BTile, int kMTiles, int kNTiles, int kKSteps>
__device__ __forceinline__ void gemm_rs(float (&acc)[kMTiles][kNTiles][4], const uint32_t (&a)[kMTiles][kKSteps][4],
                                        const LdsmAddr<BTile>& b_addr, uint32_t b_extra) {
  static_assert(kNTiles % 2 == 0, "B is fetched two n-tiles per ldmatrix.x4.trans");
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
#pragma unroll
    for (int np = 0; np < kNTiles / 2; ++np) {
      uint32_t b[4];
      ptx::ldmatrix_x4_trans(b, b_addr.at(16 * kk, 2 * np, b_extra));
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi) mma_n_pair<Tag>(acc[mi][2 * np], acc[mi][2 * np + 1], a[mi][kk], b);
    }
  }
}

// An fp32 accumulator tile (C layout, 8·kNTiles columns) → 16-bit A fragments for the next mma,
// k-step kk covering columns 16kk .. 16kk + 15: C's layout for n-tiles 2kk and 2kk + 1 is A's.
//   a[kk] = {pack(C_{2kk}[0], [1]), pack(C_{2kk}[2], [3]), pack(C_{2kk+1}[0], [1]), pack(C_{2kk+1}[2], [3])}
template <class Tag, int kMTiles, int kNTiles>
__device__ __forceinline__ void accumulator_to_a_fragments(uint32_t (&a)[kMTiles][kNTiles / 2][4],
                                                           const float (&c)[kMTiles][kNTiles][4]) {
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
    for (int kk = 0; kk < kNTiles / 2; ++kk) {
      a[mi][kk][0] = ptx::pack2<Tag>(c[mi][2 * kk][0], c[mi][2 * kk][1]);
      a[mi][kk][1] = ptx::pack2<Tag>(c[mi][2 * kk][2], c[mi][2 * kk][3]);
      a[mi][kk][2] = ptx::pack2<Tag>(c[mi][2 * kk + 1][0], c[mi][2 * kk + 1][1]);
      a[mi][kk][3] = ptx::pack2<Tag>(c[mi][2 * kk + 1][2], c[mi][2 * kk + 1][3]);
    }
  }
}

// Writes an fp32 accumulator tile times `scale` into a 16-bit smem tile: acc[mi][ni][c] is element
// (row0 + 16mi + 8·(c / 2) + g, col0 + 8ni + 2t + c % 2); each lane stores its column pair as one
// 4-byte word (bank-conflict free, smem_tile.cuh).
// Contract: row0 and col0 are multiples of 8. Then every row this lane touches, row0 + g + 8k, has
// the swizzle of row g (SmemTile::swizzle depends on row % 8 only), so the lane XORs each chunk
// once and reaches its 2·kMTiles rows by compile-time offsets: one address per n-tile, not one per
// store (the epilogue's address arithmetic was ~5 integer instructions per store before).
template <class Tag, class Tile, int kMTiles, int kNTiles>
__device__ __forceinline__ void store_accumulator(unsigned char* tile, const float (&c)[kMTiles][kNTiles][4], int row0,
                                                  int col0, int lane, float scale = 1.f) {
  const int g = lane / 4, t = lane % 4;
  const int swizzle = Tile::swizzle(g);
  const uint32_t lane_row = static_cast<uint32_t>((row0 + g) * Tile::kRowBytes + 4 * t);
#pragma unroll
  for (int ni = 0; ni < kNTiles; ++ni) {
    const uint32_t chunk = lane_row + static_cast<uint32_t>(((col0 / kChunkElems + ni) ^ swizzle) * kChunkBytes);
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        *reinterpret_cast<uint32_t*>(tile + chunk + (16 * mi + 8 * half) * Tile::kRowBytes) =
            ptx::pack2<Tag>(c[mi][ni][2 * half] * scale, c[mi][ni][2 * half + 1] * scale);
      }
    }
  }
}

}  // namespace flashattn::cuda
