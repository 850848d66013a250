// Shared-memory tiles of the sm90 kernels (forward and backward): rows of 64 16-bit columns (128
// bytes, one 128B-swizzle row) in chunks of 64 columns, each tile on a swizzle atom (fwd_shape.hpp's
// constants). What both directions do with such a tile: step along K in a K-major operand, and zero
// whole rows a TMA box brought in from past a sequence.
#pragma once

#include <cstdint>

#include "cuda/sm90/fwd_shape.hpp"

namespace flashattn::cuda::sm90 {

// K-step ks (16 columns) of a K-major tile: chunk ks / 4, 32·(ks % 4) bytes into its rows (the
// swizzle is a function of the absolute address, so the descriptor's start moves by these bytes).
__device__ __forceinline__ uint32_t k_step_bytes(int ks, uint32_t chunk_bytes) {
  return (ks / 4) * chunk_bytes + 32 * (ks % 4);
}

// Rows [first, rows) of each of the kChunks chunks (kChunkBytes apart) of `tile` set to zero by
// threads tid = 0 .. kThreads − 1, 16 bytes a store. Whole 128-byte rows, so the swizzle (a
// permutation within a row) does not matter. The caller then fences (fence.proxy.async: generic
// stores before wgmma's reads) and holds a barrier.
template <int kChunks, uint32_t kChunkBytes, int kThreads>
__device__ __forceinline__ void zero_tile_rows(unsigned char* tile, int rows, int first, int tid) {
  constexpr int kUnitsPerRow = kSwizzleRowBytes / 16;
  const int units = (rows - first) * kUnitsPerRow;
  for (int u = tid; u < kChunks * units; u += kThreads) {
    const int c = u / units, r = first + (u % units) / kUnitsPerRow, w = u % kUnitsPerRow;
    *reinterpret_cast<uint4*>(tile + c * kChunkBytes + r * kSwizzleRowBytes + 16 * w) = make_uint4(0, 0, 0, 0);
  }
}

}  // namespace flashattn::cuda::sm90
