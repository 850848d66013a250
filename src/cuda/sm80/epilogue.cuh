// The sm80 forward epilogue: O and LSE stores, O through shared memory for coalesced stores. (The
// backward's dK, dV epilogue: bwd_epilogue.cuh.)
#pragma once

#include <cstdint>

#include "cuda/common/seqlen.cuh"
#include "cuda/sm80/fwd_params.cuh"
#include "cuda/sm80/tile_io.cuh"
#include "cuda/sm80/warp_gemm.cuh"

namespace flashattn::cuda::sm80 {

// Forward, after OnlineSoftmax::finalize (acc = O / ℓ, lse per row): O → 16-bit → shared memory (reusing Q's bytes) → 16-byte global stores of rows
// [m0, m0 + kBlockM) of (batch, head); the LSE (natural log) of each row when requested.
template <class Traits, int kMTiles, int kDTiles>
__device__ __forceinline__ void fwd_epilogue(const FwdKernelParams& p, unsigned char* smem,
                                             const float (&acc)[kMTiles][kDTiles][4], const float (&lse)[kMTiles][2],
                                             int batch, int head, const SeqLens& seq, int m0, int warp_row0, int lane,
                                             int tid) {
  using Tag = typename Traits::Tag;
  using QTile = typename Traits::QTile;
  // The O tile reuses Q's bytes: this warp writes only its own rows, which only it has read.
  __syncwarp();
  unsigned char* s_o = smem + Traits::kQOffset;
  store_accumulator<Tag, QTile>(s_o, acc, warp_row0, 0, lane);
  __syncthreads();
  char* o_tile = static_cast<char*>(p.out) +
                 (gmem_offset(batch, seq.q_offset + m0, head, p.o_batch_stride, p.o_row_stride, p.o_head_stride)) *
                     kElemBytes;
  TileIO<QTile, Traits::kThreads>::store(o_tile, p.o_row_stride, seq.seqlen_q - m0, p.hdim_v, s_o, tid);

  if (p.lse != nullptr && lane % 4 == 0) {
    float* lse_rows = p.lse + batch * p.lse_batch_stride + head * p.lse_head_stride + seq.q_offset + m0;
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = warp_row0 + 16 * mi + 8 * half + lane / 4;
        if (m0 + row < seq.seqlen_q) lse_rows[row] = lse[mi][half];
      }
    }
  }
}

}  // namespace flashattn::cuda::sm80
