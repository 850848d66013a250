// The sm80 backward's preprocess and postprocess kernels, memory-bound, one thread block per
// (query block of block_m rows, query head, sequence):
//   preprocess:  D = rowsum(dO ∘ O) (fp32) and LSE·log2e into the workspace, padding rows of the
//                tile set to D = 0, LSE = +inf (so the main kernel's P is 0 there); the tile's
//                dq_accum rows and its deterministic-mode counter zeroed, and a share of the
//                split tail's sums and counters (one launch fewer than a memset of their own).
//   postprocess: dq = dq_accum · softmax_scale, converted to the output dtype, strided store
//                (dq_accum in the sm80 main kernel's fragment order, or row-major: the sm90 one's).
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/scores.cuh"
#include "cuda/common/seqlen.cuh"
#include "cuda/ptx/math.cuh"
#include "cuda/sm80/bwd_launch.hpp"
#include "cuda/sm80/bwd_tile.cuh"

namespace flashattn::cuda::sm80 {
namespace {

constexpr int kPrepostThreads = 128;

// 16-bit element → float.
template <class Tag>
__device__ __forceinline__ float to_float(uint32_t bits16) {
  if constexpr (std::is_same_v<Tag, ptx::BF16>) {
    return __uint_as_float(bits16 << 16);
  } else {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits16)));
  }
}

// Σ a[i]·b[i] over the 8 16-bit elements of two 16-byte vectors, in fp32.
template <class Tag>
__device__ __forceinline__ float dot8(const uint4& a, const uint4& b) {
  const uint32_t av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    s = fmaf(to_float<Tag>(av[i] & 0xffffu), to_float<Tag>(bv[i] & 0xffffu), s);
    s = fmaf(to_float<Tag>(av[i] >> 16), to_float<Tag>(bv[i] >> 16), s);
  }
  return s;
}

struct QueryTile {
  int b, hq, m0;
  SeqLens seq;
  int64_t ws_row;  // workspace row of the tile's first row, within head hq's [R] block
};

// blockIdx.x = m_block + num_m_blocks · (query head + heads_q · b).
__device__ __forceinline__ QueryTile query_tile(const BwdKernelParams& p) {
  QueryTile q;
  int bid = blockIdx.x;
  const int m_block = bid % p.num_m_blocks;
  bid /= p.num_m_blocks;
  q.hq = bid % p.heads_q;
  q.b = bid / p.heads_q;
  q.m0 = m_block * p.block_m;
  q.seq = seq_lens(q.b, p.cu_seqlens_q, p.cu_seqlens_k, p.seqlen_q, p.seqlen_k);
  q.ws_row = q.hq * p.ws_rows + ws_row_start(q.b, q.seq.q_offset, p.cu_seqlens_q != nullptr, p.seqlen_q, p.block_m) +
             q.m0;
  return q;
}

// The split tail's fp32 dK/dV sums and part counters (contiguous from tail_dkv, 16-byte words), in
// grid-strided shares: every block takes its share before any block may return early.
__device__ __forceinline__ void zero_split_tail(const BwdKernelParams& p) {
  float4* words = reinterpret_cast<float4*>(p.tail_dkv);
  const int64_t stride = int64_t{gridDim.x} * kPrepostThreads;
  for (int64_t i = int64_t{blockIdx.x} * kPrepostThreads + threadIdx.x; i < p.tail_zero_vec4; i += stride) {
    words[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

template <class Tag>
__global__ void __launch_bounds__(kPrepostThreads) bwd_preprocess_kernel(const __grid_constant__ BwdKernelParams p) {
  zero_split_tail(p);
  const QueryTile q = query_tile(p);
  if (q.m0 >= q.seq.seqlen_q) return;
  const int tid = threadIdx.x;

  // D and LSE·log2e: each row's hdim_v / 8 chunks go to a power-of-two group of lanes of one warp,
  // summed with xor-shuffles (every lane of the warp takes part: rows past the tile or the sequence
  // add zeros and store nothing). A thread's rows are taken kRowsInFlight at a time, their loads
  // issued before any is used: one load pair per thread in flight left HBM ~10 % short of its copy
  // bandwidth on these short-lived blocks.
  const int chunks = p.hdim_v / 8;
  int lanes = 1;
  while (lanes < chunks) lanes *= 2;
  const int c = tid % lanes, row_step = kPrepostThreads / lanes;
  constexpr int kRowsInFlight = 4;
  for (int r0 = tid / lanes; r0 < p.block_m; r0 += kRowsInFlight * row_step) {
    uint4 o[kRowsInFlight], d[kRowsInFlight];
    float lse[kRowsInFlight];
#pragma unroll
    for (int i = 0; i < kRowsInFlight; ++i) {
      const int r = r0 + i * row_step, row = q.m0 + r;
      o[i] = d[i] = make_uint4(0u, 0u, 0u, 0u);
      lse[i] = kInfinity;  // a padding row's: P = 0 there
      if (r < p.block_m && row < q.seq.seqlen_q && c < chunks) {
        const int64_t grow = q.seq.q_offset + row;
        if (c == 0) lse[i] = p.lse[q.b * p.lse_batch_stride + q.hq * p.lse_head_stride + grow] * kLog2e;
        o[i] = *reinterpret_cast<const uint4*>(
            static_cast<const uint16_t*>(p.out) +
            gmem_offset(q.b, grow, q.hq, p.o_batch_stride, p.o_row_stride, p.o_head_stride) + c * 8);
        d[i] = *reinterpret_cast<const uint4*>(
            static_cast<const uint16_t*>(p.dout) +
            gmem_offset(q.b, grow, q.hq, p.do_batch_stride, p.do_row_stride, p.do_head_stride) + c * 8);
      }
    }
#pragma unroll
    for (int i = 0; i < kRowsInFlight; ++i) {
      const int r = r0 + i * row_step;
      float acc = dot8<Tag>(o[i], d[i]);  // 0 past the sequence: O and dO loaded as zeros there
      for (int off = lanes / 2; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
      if (c == 0 && r < p.block_m) {
        p.dsum[q.ws_row + r] = acc;
        p.lse_log2[q.ws_row + r] = lse[i];
      }
    }
  }

  // Zero this tile's dq_accum rows (the main kernel adds into them) and its counter.
  float4* zero = reinterpret_cast<float4*>(p.dq_accum + q.ws_row * p.head_dim);
  const int n4 = p.block_m * p.head_dim / 4;
  for (int i = tid; i < n4; i += kPrepostThreads) zero[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  if (tid == 0) p.counters[q.ws_row / p.block_m] = 0;
}

// The postprocess's chunks are taken kChunksInFlight at a time per thread, their loads issued before
// any store (as the preprocess's rows).
constexpr int kChunksInFlight = 4;


// dq = dQ_accum · scale for one query tile, reading the accumulator in the main kernel's order (DqLayout
// of red width kVec): one chunk is columns c .. c + 7 of rows r (and r + 8 when kVec = 4), 8·kRows
// consecutive floats.
template <class Tag, int kVec>
__device__ void store_dq_tile(const DqLayout& layout, const float* src, uint16_t* dst, int64_t row_stride,
                              int block_m, int rows, int chunks, float scale) {
  constexpr int kRows = DqLayout::chunk_rows(kVec);
  const int count = block_m / kRows * chunks;
  for (int i0 = threadIdx.x; i0 < count; i0 += kChunksInFlight * kPrepostThreads) {
    float v[kChunksInFlight][8 * kRows];
    int row[kChunksInFlight], col[kChunksInFlight];  // each chunk's place, found once
#pragma unroll
    for (int k = 0; k < kChunksInFlight; ++k) {
      const int i = i0 + k * kPrepostThreads, j = i / chunks;
      row[k] = kRows == 1 ? j : j / 8 * 16 + j % 8;
      col[k] = (i % chunks) * 8;
      if (i >= count || row[k] >= rows) continue;
      const float4* chunk = reinterpret_cast<const float4*>(src + layout.index(row[k], col[k]));
#pragma unroll
      for (int t = 0; t < 2 * kRows; ++t) reinterpret_cast<float4*>(v[k])[t] = chunk[t];
    }
#pragma unroll
    for (int k = 0; k < kChunksInFlight; ++k) {
      const int r = row[k], c = col[k];
      if (i0 + k * kPrepostThreads >= count || r >= rows) continue;
#pragma unroll
      for (int h = 0; h < kRows; ++h) {
        if (h == 1 && r + 8 >= rows) break;
        uint32_t packed[4];
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          packed[t] = ptx::pack2<Tag>(v[k][DqLayout::chunk_offset(kVec, h, t, 0)] * scale,
                                      v[k][DqLayout::chunk_offset(kVec, h, t, 1)] * scale);
        }
        *reinterpret_cast<uint4*>(dst + (r + 8 * h) * row_stride + c) =
            make_uint4(packed[0], packed[1], packed[2], packed[3]);
      }
    }
  }
}

// The same for a row-major accumulator tile ([block_m][head_dim]).
template <class Tag>
__device__ void store_dq_rows(const float* src, uint16_t* dst, int64_t row_stride, int head_dim, int rows,
                              int chunks, float scale) {
  const int count = rows * chunks;
  for (int i0 = threadIdx.x; i0 < count; i0 += kChunksInFlight * kPrepostThreads) {
    float4 a[kChunksInFlight], b[kChunksInFlight];
    int row[kChunksInFlight], col[kChunksInFlight];  // each chunk's place, found once
#pragma unroll
    for (int k = 0; k < kChunksInFlight; ++k) {
      const int i = i0 + k * kPrepostThreads;
      row[k] = i / chunks;
      col[k] = (i % chunks) * 8;
      if (i >= count) continue;
      const float4* chunk = reinterpret_cast<const float4*>(src + row[k] * head_dim + col[k]);
      a[k] = chunk[0];
      b[k] = chunk[1];
    }
#pragma unroll
    for (int k = 0; k < kChunksInFlight; ++k) {
      const int r = row[k], c = col[k];
      if (i0 + k * kPrepostThreads >= count) continue;
      *reinterpret_cast<uint4*>(dst + r * row_stride + c) =
          make_uint4(ptx::pack2<Tag>(a[k].x * scale, a[k].y * scale), ptx::pack2<Tag>(a[k].z * scale, a[k].w * scale),
                     ptx::pack2<Tag>(b[k].x * scale, b[k].y * scale), ptx::pack2<Tag>(b[k].z * scale, b[k].w * scale));
    }
  }
}

template <class Tag>
__global__ void __launch_bounds__(kPrepostThreads) bwd_postprocess_kernel(const __grid_constant__ BwdKernelParams p) {
  const QueryTile q = query_tile(p);
  if (q.m0 >= q.seq.seqlen_q) return;
  const int rows = min(p.block_m, q.seq.seqlen_q - q.m0);
  const float* src = p.dq_accum + q.ws_row * p.head_dim;
  uint16_t* dst = static_cast<uint16_t*>(p.dq) +
                  gmem_offset(q.b, q.seq.q_offset + q.m0, q.hq, p.dq_batch_stride, p.dq_row_stride, p.dq_head_stride);
  const BwdTile tile = bwd_tile(p.head_dim, false);  // the main kernel's dQ order (bwd_tile.cuh)
  if (p.dq_row_major) {
    store_dq_rows<Tag>(src, dst, p.dq_row_stride, p.head_dim, rows, p.hdim_qk / 8, p.scale);
  } else if (dq_red_width(tile) == 4) {
    store_dq_tile<Tag, 4>(DqLayout(tile, 4), src, dst, p.dq_row_stride, p.block_m, rows, p.hdim_qk / 8, p.scale);
  } else {
    store_dq_tile<Tag, 2>(DqLayout(tile, 2), src, dst, p.dq_row_stride, p.block_m, rows, p.hdim_qk / 8, p.scale);
  }
}

template <template <class> class Kernel>
Status launch_prepost(const BwdKernelParams& p, DType dtype, cudaStream_t stream, const char* what) {
  const int64_t blocks = int64_t{p.num_m_blocks} * p.heads_q * p.batch;
  if (blocks == 0) return Status::success();
  if (dtype == DType::bf16) {
    Kernel<ptx::BF16>::launch(blocks, p, stream);
  } else {
    Kernel<ptx::F16>::launch(blocks, p, stream);
  }
  return bwd_cuda_status(cudaGetLastError(), what);
}

template <class Tag>
struct Preprocess {
  static void launch(int64_t blocks, const BwdKernelParams& p, cudaStream_t stream) {
    bwd_preprocess_kernel<Tag><<<static_cast<unsigned>(blocks), kPrepostThreads, 0, stream>>>(p);
  }
};

template <class Tag>
struct Postprocess {
  static void launch(int64_t blocks, const BwdKernelParams& p, cudaStream_t stream) {
    bwd_postprocess_kernel<Tag><<<static_cast<unsigned>(blocks), kPrepostThreads, 0, stream>>>(p);
  }
};

}  // namespace

Status launch_bwd_preprocess(const BwdKernelParams& p, DType dtype, cudaStream_t stream) {
  return launch_prepost<Preprocess>(p, dtype, stream, "preprocess kernel launch");
}

Status launch_bwd_postprocess(const BwdKernelParams& p, DType dtype, cudaStream_t stream) {
  return launch_prepost<Postprocess>(p, dtype, stream, "postprocess kernel launch");
}

}  // namespace flashattn::cuda::sm80
