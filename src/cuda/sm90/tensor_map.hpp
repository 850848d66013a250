// Host side of TMA (ptx/tma.cuh): the tensor map of a tiled view of a tensor of 16-bit elements,
// encoded by the driver's cuTensorMapEncodeTiled. The library does not link libcuda: the function
// is looked up once per process through the runtime (cudaGetDriverEntryPointByVersion).
//
// Contract of TileMapSpec (all extents and strides in elements, dimension 0 the innermost):
//   data        global address, 16-byte aligned;
//   rank        2..5 (the ranks tma_load / tma_store take);
//   dims[i]     extent of dimension i, 1 .. 2^32;
//   strides[i]  distance between consecutive indices of dimension i: strides[0] = 1 (the
//               innermost dimension is contiguous), the others multiples of 8 elements (16 bytes),
//               positive, below 2^40 bytes; any order (a strided view of a larger tensor is fine);
//   box[i]      the tile one tma_load / tma_store moves, 1 .. 256 per dimension, box[0] a multiple
//               of 8 elements (16 bytes); with a swizzle, box[0] · 2 bytes at most the swizzle span
//               (64 elements for 128B);
//   swizzle     the shared-memory layout of the box (ptx/swizzle.hpp), the same the wgmma
//               descriptors of the tile must name.
// Elements of a box outside dims are zero-filled on loads and not written on stores. The map
// itself (128 bytes, 64-byte aligned) is passed to kernels by value as a __grid_constant__ parameter.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/ptx/swizzle.hpp"
#include "flashattn/flashattn.hpp"

namespace flashattn::cuda::sm90 {

inline constexpr int kTileMapMaxRank = 5;

struct TileMapSpec {
  const void* data = nullptr;
  int rank = 0;
  int64_t dims[kTileMapMaxRank] = {};
  int64_t strides[kTileMapMaxRank] = {};
  int box[kTileMapMaxRank] = {};
  ptx::Swizzle swizzle = ptx::Swizzle::b128;
};

// ok when `spec` describes a tensor TMA can tile (the rules above). not_supported naming `who`
// when the tensor's layout is outside them (alignment, a stride) — the caller falls back to a path
// without TMA; invalid_argument for a malformed spec (dtype not f16/bf16, rank, box). Needs no GPU
// and no driver.
Status check_tile_map(DType dtype, const TileMapSpec& spec, const char* who);

// check_tile_map, then *map encoded by the driver; a map this thread encoded recently for the same
// (dtype, spec) — the address included — is reused without either (16 are kept). cuda_error naming
// `who` when the driver entry point is missing (a driver older than CUDA 12) or the driver rejects
// the map (with its CUresult).
Status make_tile_map(CUtensorMap* map, DType dtype, const TileMapSpec& spec, const char* who);

}  // namespace flashattn::cuda::sm90
