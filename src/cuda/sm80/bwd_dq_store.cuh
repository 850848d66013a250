// dq = dQ_accum · softmax_scale of one query tile, converted to the output dtype and stored with
// the output's row stride, by the kThreads threads of a block: the postprocess kernel's work, and
// the main kernel's where it converts the tiles it finished (bwd_dq.cuh, dq_in_main). The
// accumulator is read from L2 (ld.global.cg): other blocks' reds wrote it there.
#pragma once

#include <cstdint>

#include "cuda/ptx/math.cuh"
#include "cuda/sm80/bwd_tile.cuh"

namespace flashattn::cuda::sm80 {

// The accumulator in the main kernel's order (DqLayout of red width kVec): one chunk is columns
// c .. c + 7 of rows r (and r + 8 when kVec = 4), 8·kRows consecutive floats. rows: the tile's rows
// in the sequence; chunks: hdim_qk / 8.
template <class Tag, int kVec, int kThreads>
__device__ void store_dq_tile(const DqLayout& layout, const float* src, uint16_t* dst, int64_t row_stride,
                              int block_m, int rows, int chunks, float scale) {
  constexpr int kRows = DqLayout::chunk_rows(kVec);
  for (int i = threadIdx.x; i < block_m / kRows * chunks; i += kThreads) {
    const int j = i / chunks, c = (i % chunks) * 8;
    const int r = kRows == 1 ? j : j / 8 * 16 + j % 8;
    if (r >= rows) continue;
    float v[8 * kRows];
    const float4* chunk = reinterpret_cast<const float4*>(src + layout.index(r, c));
#pragma unroll
    for (int k = 0; k < 2 * kRows; ++k) reinterpret_cast<float4*>(v)[k] = __ldcg(chunk + k);
#pragma unroll
    for (int h = 0; h < kRows; ++h) {
      if (h == 1 && r + 8 >= rows) break;
      uint32_t packed[4];
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        packed[t] = ptx::pack2<Tag>(v[DqLayout::chunk_offset(kVec, h, t, 0)] * scale,
                                    v[DqLayout::chunk_offset(kVec, h, t, 1)] * scale);
      }
      *reinterpret_cast<uint4*>(dst + (r + 8 * h) * row_stride + c) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
    }
  }
}

// The same for a row-major accumulator tile ([block_m][head_dim]: the sm90 backward's).
template <class Tag, int kThreads>
__device__ void store_dq_rows(const float* src, uint16_t* dst, int64_t row_stride, int head_dim, int rows,
                              int chunks, float scale) {
  for (int i = threadIdx.x; i < rows * chunks; i += kThreads) {
    const int r = i / chunks, c = (i % chunks) * 8;
    const float4* chunk = reinterpret_cast<const float4*>(src + r * head_dim + c);
    const float4 a = __ldcg(chunk), b = __ldcg(chunk + 1);
    *reinterpret_cast<uint4*>(dst + r * row_stride + c) =
        make_uint4(ptx::pack2<Tag>(a.x * scale, a.y * scale), ptx::pack2<Tag>(a.z * scale, a.w * scale),
                   ptx::pack2<Tag>(b.x * scale, b.y * scale), ptx::pack2<Tag>(b.z * scale, b.w * scale));
  }
}

// dq = 0 on `rows` rows of `chunks` 16-byte chunks: a query tile no key block visits.
template <int kThreads>
__device__ void zero_dq_rows(uint16_t* dst, int64_t row_stride, int rows, int chunks) {
  for (int i = threadIdx.x; i < rows * chunks; i += kThreads) {
    *reinterpret_cast<uint4*>(dst + (i / chunks) * row_stride + (i % chunks) * 8) = make_uint4(0, 0, 0, 0);
  }
}

}  // namespace flashattn::cuda::sm80
