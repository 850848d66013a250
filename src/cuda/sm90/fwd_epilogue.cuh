// The epilogue of a consumer warpgroup of the sm90 forward: O / ℓ, staged through shared memory so
// that global memory sees whole 16-byte pieces of rows, and LSE = m·scale + log ℓ (natural) per row.
// Fully masked rows (ℓ = 0): out 0, lse +inf.
//
// Staging: the warpgroup's O goes into its own 64 rows of the Q tile, in Q's layout (64-column chunks
// of 128-byte rows, 128B swizzle: 16-byte unit u of row r at unit u ^ (r % 8)); its last Q·Kᵀ has
// completed, and no other warpgroup reads those rows. The swizzle also makes the fragment stores
// conflict-free: the 8 rows a warp writes at once land in 8 different 16-byte units. Then the
// warpgroup copies rows < seqlen_q, columns < hdim_v, to global memory: a varlen box never writes
// into the next sequence.
#pragma once

#include "cuda/ptx/barrier.cuh"
#include "cuda/ptx/mma.cuh"
#include "cuda/sm90/fwd_consumer.cuh"

namespace flashattn::cuda::sm90 {

template <class Traits>
struct Epilogue {
  const FwdSmem<Traits>& sm;
  const FwdTile& t;
  const FwdKernelParams& p;
  int wg, row0, lane, tid_wg;  // consumer index, this warp's first row in the block, lane, thread in the warpgroup

  // Byte offset of 16-byte unit u (8 columns) of block row r in the Q tile.
  __device__ __forceinline__ static uint32_t unit_offset(int r, int u) {
    return (u / 8) * Traits::kQChunkBytes + r * kSwizzleRowBytes + 16 * ((u % 8) ^ (r % 8));
  }

  __device__ __forceinline__ void stage_fragments(const float (&o)[Traits::kD / 2]) const {
    using Tag = typename Traits::Tag;
    const int g = lane / 4, tq = lane % 4;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = row0 + 8 * half + g;
#pragma unroll
      for (int j = 0; j < Traits::kD / 8; ++j) {
        *reinterpret_cast<uint32_t*>(sm.base + unit_offset(r, j) + 4 * tq) =
            ptx::pack2<Tag>(o[4 * j + 2 * half], o[4 * j + 2 * half + 1]);
      }
    }
  }

  __device__ __forceinline__ void copy_rows_out() const {
    constexpr int kUnits = Traits::kD / 8;  // 16-byte units per row
    const int first = wg * kWarpgroupRows;
    for (int idx = tid_wg; idx < kWarpgroupRows * kUnits; idx += kWarpgroupThreads) {
      const int r = first + idx / kUnits, u = idx % kUnits;
      const int row = t.m0 + r, col = 8 * u;
      if (row >= t.seq.seqlen_q || col >= p.hdim_v) continue;
      const uint4 piece = *reinterpret_cast<const uint4*>(sm.base + unit_offset(r, u));
      uint16_t* dst = static_cast<uint16_t*>(p.out) + gmem_offset(t.batch, t.seq.q_offset + row, t.head,
                                                                  p.o_batch_stride, p.o_row_stride, p.o_head_stride) +
                      col;
      if (col + 8 <= p.hdim_v) {
        *reinterpret_cast<uint4*>(dst) = piece;
      } else {
        const uint32_t words[4] = {piece.x, piece.y, piece.z, piece.w};
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          if (k < p.hdim_v - col) dst[k] = static_cast<uint16_t>(words[k / 2] >> (16 * (k % 2)));
        }
      }
    }
  }

  __device__ __forceinline__ void store_lse(const float (&lse)[1][2]) const {
    if (p.lse == nullptr || lane % 4 != 0) return;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = t.m0 + row0 + 8 * half + lane / 4;
      if (row < t.seq.seqlen_q) {
        p.lse[int64_t(t.batch) * p.lse_batch_stride + int64_t(t.head) * p.lse_head_stride + t.seq.q_offset + row] =
            lse[0][half];
      }
    }
  }

  __device__ __forceinline__ void store(ConsumerState<Traits>& c, float exp_mult) const {
    float lse[1][2];
    c.softmax.finalize(as_c_tiles(c.o), exp_mult, lse);
    stage_fragments(c.o);
    ptx::named_barrier_sync(kStoreBarrier + wg, kWarpgroupThreads);
    copy_rows_out();
    store_lse(lse);
  }
};

}  // namespace flashattn::cuda::sm90
