// The epilogue of a consumer warpgroup of the sm90 forward: O / ℓ from the accumulator fragments to
// global memory, and LSE = m·scale + log ℓ (natural) per row. Fully masked rows (ℓ = 0): out 0, lse
// +inf. Only rows < seqlen_q and columns < hdim_v are written, so a varlen tile never writes into the
// next sequence.
//
// 16-byte stores: a quad holds a row's columns as pairs (lane q of the quad: columns 8j + 2q, +1 of
// every 8-column group j); a 4 × 4 transpose of 32-bit words within the quad (two shuffle rounds)
// gives lane q the whole group 4k + q of each four, which it writes as one 16-byte piece, so each
// store instruction fills whole 32-byte sectors (with 4-byte stores of the pairs every sector was
// written in two halves by two instructions).
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

  // w[i] of lane q (within its quad) becomes w[i] of lane i's word q: a 4 × 4 transpose across the
  // quad, in two xor rounds (lanes 2 apart swap 2 × 2 blocks, then lanes 1 apart swap within them).
  __device__ __forceinline__ static void transpose_quad(uint32_t (&w)[4], int q) {
    const bool hi = q & 2;
    uint32_t r0 = __shfl_xor_sync(0xffffffffu, hi ? w[0] : w[2], 2);
    uint32_t r1 = __shfl_xor_sync(0xffffffffu, hi ? w[1] : w[3], 2);
    if (hi) { w[0] = r0; w[1] = r1; } else { w[2] = r0; w[3] = r1; }
    const bool odd = q & 1;
    r0 = __shfl_xor_sync(0xffffffffu, odd ? w[0] : w[1], 1);
    r1 = __shfl_xor_sync(0xffffffffu, odd ? w[2] : w[3], 1);
    if (odd) { w[0] = r0; w[2] = r1; } else { w[1] = r0; w[3] = r1; }
  }

  __device__ __forceinline__ void store_rows(const float (&o)[Traits::kD / 2]) const {
    using Tag = typename Traits::Tag;
    const int g = lane / 4, tq = lane % 4;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = t.m0 + row0 + 8 * half + g;
      const bool row_in = row < t.seq.seqlen_q;  // every lane shuffles; only rows in are written
      uint16_t* out_row = static_cast<uint16_t*>(p.out) + gmem_offset(t.batch, t.seq.q_offset + row, t.head,
                                                                      p.o_batch_stride, p.o_row_stride, p.o_head_stride);
#pragma unroll
      for (int k = 0; k < Traits::kD / 32; ++k) {
        uint32_t w[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int j = 4 * k + i;
          w[i] = ptx::pack2<Tag>(o[4 * j + 2 * half], o[4 * j + 2 * half + 1]);
        }
        transpose_quad(w, tq);
        const int col = 8 * (4 * k + tq);
        // hdim_v is a multiple of 8 (validation), so a lane's 8 columns are all in or all out.
        if (row_in && col < p.hdim_v) *reinterpret_cast<uint4*>(out_row + col) = make_uint4(w[0], w[1], w[2], w[3]);
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

  // O / ℓ and the LSE: from c.inv and c.lse where the key loop computed them
  // (Consumer::kRowScalesUnderLastProduct), else from the softmax state here.
  __device__ __forceinline__ void store(ConsumerState<Traits>& c, float exp_mult) const {
    if constexpr (Consumer<Traits>::kRowScalesUnderLastProduct) {
      OnlineSoftmax<1>::rescale_rows(as_c_tiles(c.o), c.inv);
      store_rows(c.o);
      store_lse(c.lse);
    } else {
      float lse[1][2];
      c.softmax.finalize(as_c_tiles(c.o), exp_mult, lse);
      store_rows(c.o);
      store_lse(lse);
    }
  }
};

}  // namespace flashattn::cuda::sm90
