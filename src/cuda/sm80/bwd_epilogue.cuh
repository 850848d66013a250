// The sm80 backward epilogue: dK·scale and dV of a key block, through shared memory (K and V's
// space) for coalesced stores; a split tail's parts first sum theirs in fp32 (bwd_params.cuh).
#pragma once

#include <cstdint>

#include "cuda/common/last_part.cuh"
#include "cuda/common/seqlen.cuh"
#include "cuda/ptx/math.cuh"
#include "cuda/ptx/red.cuh"
#include "cuda/sm80/bwd_params.cuh"
#include "cuda/sm80/bwd_shape.cuh"
#include "cuda/sm80/scheduler.cuh"
#include "cuda/sm80/tile_io.cuh"
#include "cuda/sm80/warp_gemm.cuh"

namespace flashattn::cuda::sm80 {

// Split epilogue (bwd_params.cuh) of one part of split key block `tail`: adds this part's dK·scale
// and dV (the mma accumulators of the dK/dV warp tiles, kMt × kNt C fragments at (row0, col0)) into
// the fp32 sums tail_dkv[tail] ([2][block_n][head_dim], row-major), then counts the part done. The
// part that finishes last (block-uniform answer) reads the sums back as 16-bit values into the K and
// V tiles in shared memory, for the regular stores, and returns true; the others return false and
// are done. kOrderedSums (deterministic mode): each part stores its own sums, tail_dkv[tail][part],
// and the last part adds them in part order, so the bits do not depend on which part finished when.
// Release/acquire: last_part_done; the sums are read from L2 (ld.global.cg: this block never cached
// them). s_last: one int of shared memory nobody else uses now.
template <class Elem, class TileK, int kMt, int kNt, bool kOrderedSums>
__device__ bool reduce_split_part(const BwdKernelParams& p, int tail, int parts, const float (&acc_dk)[kMt][kNt][4],
                                  const float (&acc_dv)[kMt][kNt][4], int row0, int col0, unsigned char* s_k,
                                  unsigned char* s_v, int* s_last) {
  constexpr int kRows = TileK::kRows, kCols = TileK::kCols;
  float* sum_dk = p.tail_dkv + int64_t{tail} * 2 * kRows * kCols;
  if constexpr (kOrderedSums) {  // the split kernel's block j is part j mod parts (bwd_tail_kernel)
    sum_dk = p.tail_dkv + (int64_t{tail} * parts + static_cast<int>(blockIdx.x) % parts) * 2 * kRows * kCols;
  }
  float* sum_dv = sum_dk + kRows * kCols;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mi = 0; mi < kMt; ++mi) {
#pragma unroll
    for (int ni = 0; ni < kNt; ++ni) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int at = (row0 + 16 * mi + 8 * half + g) * kCols + col0 + 8 * ni + 2 * t;
        if constexpr (kOrderedSums) {
          __stcg(reinterpret_cast<float2*>(sum_dk + at),
                 make_float2(acc_dk[mi][ni][2 * half] * p.scale, acc_dk[mi][ni][2 * half + 1] * p.scale));
          __stcg(reinterpret_cast<float2*>(sum_dv + at), make_float2(acc_dv[mi][ni][2 * half], acc_dv[mi][ni][2 * half + 1]));
        } else {
          ptx::red_add_v2_f32(sum_dk + at, acc_dk[mi][ni][2 * half] * p.scale, acc_dk[mi][ni][2 * half + 1] * p.scale);
          ptx::red_add_v2_f32(sum_dv + at, acc_dv[mi][ni][2 * half], acc_dv[mi][ni][2 * half + 1]);
        }
      }
    }
  }
  if (!last_part_done(p.tail_done, tail, parts, s_last)) return false;
  for (int i = threadIdx.x; i < kRows * kCols / 2; i += kBwdThreads) {
    const int r = i / (kCols / 2), c = i % (kCols / 2) * 2;
    float2 k2, v2;
    if constexpr (kOrderedSums) {  // every part's sums, in part order
      k2 = v2 = make_float2(0.f, 0.f);
      const float* first = p.tail_dkv + int64_t{tail} * parts * 2 * kRows * kCols + r * kCols + c;
      for (int q = 0; q < parts; ++q) {
        const float2 dk = __ldcg(reinterpret_cast<const float2*>(first + int64_t{q} * 2 * kRows * kCols));
        const float2 dv = __ldcg(reinterpret_cast<const float2*>(first + int64_t{q} * 2 * kRows * kCols + kRows * kCols));
        k2.x += dk.x, k2.y += dk.y, v2.x += dv.x, v2.y += dv.y;
      }
    } else {
      k2 = __ldcg(reinterpret_cast<const float2*>(sum_dk + r * kCols + c));
      v2 = __ldcg(reinterpret_cast<const float2*>(sum_dv + r * kCols + c));
    }
    *reinterpret_cast<uint32_t*>(s_k + TileK::elem_offset(r, c)) = ptx::pack2<Elem>(k2.x, k2.y);
    *reinterpret_cast<uint32_t*>(s_v + TileK::elem_offset(r, c)) = ptx::pack2<Elem>(v2.x, v2.y);
  }
  return true;
}

// dK·scale and dV (the warp's dK/dV tiles at (kv_row0, kv_col0)) of the key block at n0 of
// (b, kv head h_kv) to global memory. A split tail's part (parts > 1) of grid block grid_block
// stores only if it finishes the key block's sums last.
template <class Elem, class Sh, bool kOrderedSums>
__device__ __forceinline__ void bwd_epilogue(const BwdKernelParams& p, const BwdBlockIndex& ix, const SeqLens& seq,
                                             int n0, const float (&acc_dk)[Sh::kMtKV][Sh::kNtKV][4],
                                             const float (&acc_dv)[Sh::kMtKV][Sh::kNtKV][4], const BwdWarpTiles& w,
                                             unsigned char* smem, int grid_block, int parts, int lane, int tid) {
  using TileK = typename Sh::TileK;
  __syncthreads();  // every warp is done reading K and V
  if (parts == 1) {
    store_accumulator<Elem, TileK>(smem + Sh::kOffK, acc_dk, w.kv_row0, w.kv_col0, lane, p.scale);
    store_accumulator<Elem, TileK>(smem + Sh::kOffV, acc_dv, w.kv_row0, w.kv_col0, lane, 1.f);
  } else if (!reduce_split_part<Elem, TileK, Sh::kMtKV, Sh::kNtKV, kOrderedSums>(p, grid_block - p.split_first, parts, acc_dk, acc_dv, w.kv_row0,
                                               w.kv_col0, smem + Sh::kOffK, smem + Sh::kOffV,
                                               reinterpret_cast<int*>(smem + Sh::kOffLse))) {
    return;  // another part of this key block finishes it (the LSE rows are not read after the loop)
  }
  __syncthreads();
  uint16_t* dk_dst = static_cast<uint16_t*>(p.dk) + gmem_offset(ix.b, seq.k_offset + n0, ix.h_kv, p.dk_batch_stride,
                                                                p.dk_row_stride, p.dk_head_stride);
  uint16_t* dv_dst = static_cast<uint16_t*>(p.dv) + gmem_offset(ix.b, seq.k_offset + n0, ix.h_kv, p.dv_batch_stride,
                                                                p.dv_row_stride, p.dv_head_stride);
  TileIO<TileK, kBwdThreads>::store(dk_dst, p.dk_row_stride, seq.seqlen_k - n0, p.hdim_qk, smem + Sh::kOffK, tid);
  TileIO<TileK, kBwdThreads>::store(dv_dst, p.dv_row_stride, seq.seqlen_k - n0, p.hdim_v, smem + Sh::kOffV, tid);
}

}  // namespace flashattn::cuda::sm80
