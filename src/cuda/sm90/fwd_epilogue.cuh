// The epilogue of a consumer warpgroup of the sm90 forward: O / ℓ straight from the accumulator
// fragments to global memory (32-bit stores of column pairs; a quad writes 16 contiguous bytes of a
// row, two consecutive stores a whole 32-byte sector), and LSE = m·scale + log ℓ (natural) per row.
// Fully masked rows (ℓ = 0): out 0, lse +inf. Only rows < seqlen_q and columns < hdim_v are written,
// so a varlen tile never writes into the next sequence.
//
// Why no staging through shared memory: the persistent CTA loads the next tile's Q as soon as this
// tile's last Q·Kᵀ is done, so Q's buffer is busy during the epilogue, and the K/V ring leaves no
// room for an O tile at D = 128 (176-key blocks) and D = 256.
#pragma once

#include "cuda/ptx/mma.cuh"
#include "cuda/sm90/fwd_consumer.cuh"

namespace flashattn::cuda::sm90 {

template <class Traits>
struct Epilogue {
  const FwdTile& t;
  const FwdKernelParams& p;
  int row0, lane;  // this warp's first row in the block, lane

  __device__ __forceinline__ void store_rows(const float (&o)[Traits::kD / 2]) const {
    using Tag = typename Traits::Tag;
    const int g = lane / 4, tq = lane % 4;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = t.m0 + row0 + 8 * half + g;
      if (row >= t.seq.seqlen_q) continue;
      uint16_t* out_row = static_cast<uint16_t*>(p.out) + gmem_offset(t.batch, t.seq.q_offset + row, t.head,
                                                                      p.o_batch_stride, p.o_row_stride, p.o_head_stride);
#pragma unroll
      for (int j = 0; j < Traits::kD / 8; ++j) {
        const int col = 8 * j + 2 * tq;
        const uint32_t pair = ptx::pack2<Tag>(o[4 * j + 2 * half], o[4 * j + 2 * half + 1]);
        if (col + 1 < p.hdim_v) {
          *reinterpret_cast<uint32_t*>(out_row + col) = pair;
        } else if (col < p.hdim_v) {
          out_row[col] = static_cast<uint16_t>(pair & 0xFFFFu);
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
    store_rows(c.o);
    store_lse(lse);
  }
};

}  // namespace flashattn::cuda::sm90
