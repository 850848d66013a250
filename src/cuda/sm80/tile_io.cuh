// Tile movement between global and shared memory, done by a whole thread block:
//   load_async_or_zero: global → shared through cp.async (16-byte chunks, bypassing L1), chunks in
//     rows past `rows_valid` or columns past `cols_valid` zeroed by shared stores instead — the
//     predicated loads for the sequence end and for head dims below the instance's;
//   load_rows_async_or_zero: the same from rows found one by one (paged K/V);
//   store: shared → global with 16-byte vector stores, same predicates (nothing written).
// Thread `tid` handles chunks tid, tid + kThreads, ... of the tile in row-major chunk order, so each
// warp reads or writes whole consecutive 16-byte runs of a row: coalesced.
// Contract: the global base, the row stride·2 bytes and 16-byte chunks are 16-byte aligned (the
// host checks pointers and strides); cols_valid is a multiple of 8.
#pragma once

#include <cstdint>

#include "cuda/sm80/smem_tile.cuh"
#include "cuda/ptx/cp_async.cuh"

namespace flashattn::cuda {

template <class Tile, int kThreads>
struct TileIO {
  static constexpr int kChunks = Tile::kRows * Tile::kChunksPerRow;
  static_assert(kChunks % kThreads == 0, "every thread moves the same number of chunks");
  static constexpr int kChunksPerThread = kChunks / kThreads;

  // When kThreads is a multiple of the chunks per row (and of 8 rows), a thread always moves the
  // same chunk column, kRowStep rows apart, at the same swizzle: one pointer, stepped.
  static constexpr bool kFixedColumn =
      kThreads % Tile::kChunksPerRow == 0 && (kThreads / Tile::kChunksPerRow) % 8 == 0;
  static constexpr int kRowStep = kFixedColumn ? kThreads / Tile::kChunksPerRow : 0;

  // `gmem`: element (0, 0) of the tile (16-bit elements). A chunk outside the valid rows/columns
  // issues no copy at all and is zeroed by an ordinary 16-byte shared store instead (no
  // out-of-tensor address is ever formed, and no per-chunk pointer select, which would cost a
  // register pair per chunk). The zero stores are ordered with the copies by the same wait +
  // __syncthreads().
  __device__ __forceinline__ static void load_async_or_zero(uint32_t smem, const void* gmem, int64_t row_stride,
                                                            int rows_valid, int cols_valid, int tid) {
    const char* base = static_cast<const char*>(gmem);
    if constexpr (kFixedColumn) {
      // One per-thread pointer plus a warp-uniform step: the compiler keeps i·step in uniform
      // registers instead of a 64-bit register pair per chunk.
      const int row0 = tid / Tile::kChunksPerRow, col_chunk = tid % Tile::kChunksPerRow;
      const bool col_valid = col_chunk * kChunkElems < cols_valid;
      const char* src = base + (static_cast<int64_t>(row0) * row_stride + col_chunk * kChunkElems) * 2;
      const int64_t step = static_cast<int64_t>(kRowStep) * row_stride * 2;
      const uint32_t dst = smem + Tile::chunk_offset(row0, col_chunk);
      if (rows_valid >= Tile::kRows && cols_valid >= Tile::kCols) {  // a full tile: no predicates
#pragma unroll
        for (int i = 0; i < kChunksPerThread; ++i) {
          ptx::cp_async_16(dst + i * kRowStep * Tile::kChunksPerRow * kChunkBytes, src + i * step);
        }
        return;
      }
#pragma unroll
      for (int i = 0; i < kChunksPerThread; ++i) {
        const uint32_t d = dst + i * kRowStep * Tile::kChunksPerRow * kChunkBytes;
        if (col_valid && row0 + i * kRowStep < rows_valid) {
          ptx::cp_async_16(d, src + i * step);
        } else {
          store_zero_16(d);
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < kChunksPerThread; ++i) {
        const int row = (tid + i * kThreads) / Tile::kChunksPerRow;
        const int col_chunk = (tid + i * kThreads) % Tile::kChunksPerRow;
        const uint32_t d = smem + Tile::chunk_offset(row, col_chunk);
        if (row < rows_valid && col_chunk * kChunkElems < cols_valid) {
          ptx::cp_async_16(d, base + (static_cast<int64_t>(row) * row_stride + col_chunk * kChunkElems) * 2);
        } else {
          store_zero_16(d);
        }
      }
    }
  }

  // The same tile from rows that are not one stride apart (pages): `row_offset(row)` gives row
  // `row`'s element offset from `gmem`, asked only for valid rows. The kChunksPerRow threads that
  // load the same rows (at their chunk columns) share the lookups when they are lanes of one warp:
  // each asks for one of their kChunksPerThread rows and passes it on by shuffle (measured on the
  // H200, paged prefill with pages of 16 keys: every thread finding every one of its rows ran at
  // 0.72 × the packed call, whatever the page size below a block). Tiles whose rows a thread does
  // not walk at one column (D = 96, 192) look a row up per chunk.
  template <class RowOffset>
  __device__ __forceinline__ static void load_rows_async_or_zero(uint32_t smem, const void* gmem,
                                                                 const RowOffset& row_offset, int rows_valid,
                                                                 int cols_valid, int tid) {
    constexpr int kPerRow = Tile::kChunksPerRow;
    const char* base = static_cast<const char*>(gmem);
    if constexpr (!kFixedColumn) {  // rows of 12 or 24 chunks (D = 96, 192): a lookup per chunk
#pragma unroll
      for (int i = 0; i < kChunksPerThread; ++i) {
        const int row = (tid + i * kThreads) / kPerRow, col_chunk = (tid + i * kThreads) % kPerRow;
        const uint32_t d = smem + Tile::chunk_offset(row, col_chunk);
        if (row < rows_valid && col_chunk * kChunkElems < cols_valid) {
          ptx::cp_async_16(d, base + row_offset(row) * 2 + col_chunk * kChunkBytes);
        } else {
          store_zero_16(d);
        }
      }
      return;
    }
    const int row0 = tid / kPerRow, col_chunk = tid % kPerRow;
    const bool col_valid = col_chunk * kChunkElems < cols_valid;
    const uint32_t dst = smem + Tile::chunk_offset(row0, col_chunk);
    const auto copy = [&](int i, int64_t offset) {
      const int row = row0 + i * kRowStep;
      const uint32_t d = dst + i * kRowStep * kPerRow * kChunkBytes;
      if (col_valid && row < rows_valid) {
        ptx::cp_async_16(d, base + offset * 2 + col_chunk * kChunkBytes);
      } else {
        store_zero_16(d);
      }
    };
    if constexpr (32 % kPerRow == 0) {
      constexpr int kPerLane = (kChunksPerThread + kPerRow - 1) / kPerRow;
      int64_t mine[kPerLane];
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        const int i = col_chunk + j * kPerRow, row = row0 + i * kRowStep;
        mine[j] = i < kChunksPerThread && row < rows_valid ? row_offset(row) : 0;
      }
      const int group = (tid % 32) / kPerRow * kPerRow;  // the lane of this row group's column 0
#pragma unroll
      for (int i = 0; i < kChunksPerThread; ++i) copy(i, __shfl_sync(0xffffffffu, mine[i / kPerRow], group + i % kPerRow));
    } else {
#pragma unroll
      for (int i = 0; i < kChunksPerThread; ++i) {
        const int row = row0 + i * kRowStep;
        copy(i, col_valid && row < rows_valid ? row_offset(row) : 0);
      }
    }
  }

  __device__ __forceinline__ static void store_zero_16(uint32_t smem) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(smem), "r"(0));
  }

  __device__ __forceinline__ static void store(void* gmem, int64_t row_stride, int rows_valid, int cols_valid,
                                               const unsigned char* smem, int tid) {
    char* base = static_cast<char*>(gmem);
    if constexpr (kThreads % Tile::kChunksPerRow == 0) {
      // A thread always stores the same chunk column, kStep rows apart: one global pointer, stepped
      // by a warp-uniform amount, instead of a 64-bit row·stride product per chunk (the forward's
      // D = 256 epilogue spent ~14 instructions per chunk on that). The shared-memory side needs the
      // row's swizzle, which is constant unless kStep is not a multiple of 8.
      constexpr int kStep = kThreads / Tile::kChunksPerRow;
      const int row0 = tid / Tile::kChunksPerRow, col_chunk = tid % Tile::kChunksPerRow;
      if (col_chunk * kChunkElems >= cols_valid) return;
      char* dst = base + (static_cast<int64_t>(row0) * row_stride + col_chunk * kChunkElems) * 2;
      int64_t step = static_cast<int64_t>(kStep) * row_stride * 2;
      // The empty asm (pointer and step fixed here) and the stepped pointer are for ptxas: written
      // as base + i·step without the asm, the forward's D = 128 kernel spilled 60/76 B instead of
      // 40/48 B (sm_90a, nvcc 13.0; outside the main loop).
      asm volatile("" : "+l"(dst), "+l"(step));
#pragma unroll
      for (int i = 0; i < kChunksPerThread; ++i, dst += step) {
        const int row = row0 + i * kStep;
        if (row < rows_valid) {
          *reinterpret_cast<uint4*>(dst) =
              *reinterpret_cast<const uint4*>(smem + Tile::chunk_offset(row, col_chunk));
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < kChunksPerThread; ++i) {
        const int chunk = tid + i * kThreads;
        const int row = chunk / Tile::kChunksPerRow, col_chunk = chunk % Tile::kChunksPerRow;
        if (row < rows_valid && col_chunk * kChunkElems < cols_valid) {
          const uint4 v = *reinterpret_cast<const uint4*>(smem + Tile::chunk_offset(row, col_chunk));
          *reinterpret_cast<uint4*>(base + (static_cast<int64_t>(row) * row_stride + col_chunk * kChunkElems) * 2) = v;
        }
      }
    }
  }
};

}  // namespace flashattn::cuda
