// Shared-memory tile layout: a [kRows × kCols] tile of 16-bit elements, row-major, stored as 16-byte
// chunks (8 elements) whose position in the row is XOR-swizzled by the row index, so that the
// access patterns of the kernels are free of bank conflicts:
//   • ldmatrix (8 rows × 16 bytes of one chunk column per 8×8 matrix),
//   • cp.async 16-byte stores (8 consecutive lanes write 8 consecutive chunks of a row),
//   • the epilogue's 4-byte stores of mma accumulators (8 rows × 4 lanes of one chunk column).
// Shared memory has 32 banks × 4 bytes = 8 chunks per 128-byte line; the swizzle must send the same
// chunk column of 8 consecutive rows to 8 different chunk slots of a line:
//   kChunksPerRow % 8 == 0 (D = 64, 128, 192, 256): slot = chunk ^ (row % 8)
//   kChunksPerRow % 8 == 4 (D = 32, 96): rows are half a line apart in alignment, so the row parity
//       already separates two rows and slot = chunk ^ ((row / 2) % 4) separates the other four.
// Both XORs stay inside the row (they flip only bits below the row's chunk count).
#pragma once

#include <cstdint>

#include "cuda/common/host_device.cuh"

namespace flashattn::cuda {

inline constexpr int kChunkBytes = 16;  // one cp.async / ldmatrix row / 128-bit vector
inline constexpr int kChunkElems = 8;   // 16-bit elements per chunk
inline constexpr int kElemBytes = 2;    // f16 / bf16

template <int kRows_, int kCols_>
struct SmemTile {
  static constexpr int kRows = kRows_;
  static constexpr int kCols = kCols_;
  static constexpr int kChunksPerRow = kCols / kChunkElems;
  static constexpr int kBytes = kRows * kCols * 2;
  static constexpr int kRowBytes = kChunksPerRow * kChunkBytes;
  static_assert(kCols % kChunkElems == 0, "a tile row is a whole number of 16-byte chunks");
  static_assert(kChunksPerRow % 4 == 0, "the swizzle needs 4k chunks per row (head dims that are multiples of 32)");
  static_assert(kRows % 8 == 0, "tiles hold whole 8-row swizzle periods");

  // Depends on row % 8 only: rows r and r + 8k share a swizzle.
  FLASHATTN_HD static constexpr int swizzle(int row) {
    return kChunksPerRow % 8 == 0 ? (row & 7) : ((row >> 1) & 3);
  }
  // Byte offset of chunk `chunk` (columns 8·chunk .. 8·chunk + 7) of row `row`.
  FLASHATTN_HD static constexpr uint32_t chunk_offset(int row, int chunk) {
    return static_cast<uint32_t>((row * kChunksPerRow + (chunk ^ swizzle(row))) * kChunkBytes);
  }
  // Byte offset of element (row, col).
  FLASHATTN_HD static constexpr uint32_t elem_offset(int row, int col) {
    return chunk_offset(row, col / kChunkElems) + static_cast<uint32_t>(col % kChunkElems) * 2;
  }
};

// The same tile as the copy engine (TMA) writes it with the 128-byte swizzle (ptx/swizzle.hpp): in
// column panels of 64 elements, panel after panel ([panel][row][128 bytes]), chunk c of a row at
// c ^ (row % 8) within its panel. One TMA box of 64 columns fills a panel's rows; the pattern is that
// of SmemTile within a panel, so ldmatrix is conflict-free the same way. The tile must start at a
// multiple of 1024 bytes. Same interface as SmemTile (kRowBytes: the row pitch within a panel).
template <int kRows_, int kCols_>
struct PanelSmemTile {
  static constexpr int kRows = kRows_;
  static constexpr int kCols = kCols_;
  static constexpr int kChunksPerRow = kCols / kChunkElems;
  static constexpr int kPanelChunks = 8;  // 128 bytes
  static constexpr int kRowBytes = kPanelChunks * kChunkBytes;
  static constexpr int kPanelBytes = kRows * kRowBytes;
  static constexpr int kBytes = kRows * kCols * 2;
  static_assert(kChunksPerRow % kPanelChunks == 0, "whole 64-column panels");
  static_assert(kRows % 8 == 0, "tiles hold whole 8-row swizzle periods");
  FLASHATTN_HD static constexpr int swizzle(int row) { return row & 7; }
  FLASHATTN_HD static constexpr uint32_t chunk_offset(int row, int chunk) {
    return static_cast<uint32_t>((chunk / kPanelChunks) * kPanelBytes + row * kRowBytes +
                                 ((chunk % kPanelChunks) ^ swizzle(row)) * kChunkBytes);
  }
  FLASHATTN_HD static constexpr uint32_t elem_offset(int row, int col) {
    return chunk_offset(row, col / kChunkElems) + static_cast<uint32_t>(col % kChunkElems) * 2;
  }
};

}  // namespace flashattn::cuda
