// cp.async.bulk.tensor (sm_90): the copy engine (TMA) moves a box of a tensor between global and
// shared memory, issued by one thread. The tensor is described by a CUtensorMap built on the host
// (src/cuda/sm90/tensor_map.hpp) and passed as a `const __grid_constant__ CUtensorMap` kernel
// parameter; `map` below is that parameter's address.
//
// Contract (coordinates in elements, c0 the innermost dimension; shared addresses from smem_addr()):
//   tma_load(dst, map, bar, c0, c1[, c2[, c3[, c4]]]): copies the box whose first element is at
//       (c0, c1, ...) into shared memory at dst (128-byte aligned; a swizzled box at a multiple of
//       its pattern, 8·S bytes), in the map's swizzle (ptx/swizzle.hpp). Coordinates may be
//       negative or reach past the end: those elements are filled with zeros. On completion the
//       box's full byte size (out-of-bounds part included) is subtracted from the tx count of the
//       mbarrier at bar (mbarrier.cuh), which must have been told to expect it.
//       The shared-memory destination is a shared::cluster address; a CTA's own address is one.
//   tma_store(map, src, c0, c1[, c2[, c3[, c4]]]): copies a box from shared memory at src back to the
//       tensor; elements outside the tensor are not written. Shared memory written by ordinary
//       stores needs fence_proxy_async_shared_cta() (fence.cuh) in each writer, then a barrier,
//       before the store is issued.
//   tma_store_commit(): closes this thread's stores issued since the last commit into one group.
//   tma_store_wait_read<N>(): returns once at most N groups still read their shared memory (the
//       buffer may then be reused); tma_store_wait<N>(): once at most N groups are still writing
//       (their data is then in global memory).
//   tma_prefetch_descriptor(map): fetches the tensor map into the descriptor cache ahead of its
//       first use (one thread, once per CTA).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/ptx/arch.cuh"

namespace flashattn::ptx {

// The generic address of the map (a __grid_constant__ parameter), as the instructions take it.
__device__ __forceinline__ uint64_t tma_map_addr(const CUtensorMap* map) { return reinterpret_cast<uint64_t>(map); }

__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap* map, uint32_t bar, int32_t c0, int32_t c1) {
#if FLASHATTN_PTX_SM90
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];\n"
      :
      : "r"(dst), "l"(tma_map_addr(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
#else
  FLASHATTN_PTX_UNSUPPORTED("cp.async.bulk.tensor needs sm_90");
#endif
}

__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap* map, uint32_t bar, int32_t c0, int32_t c1,
                                         int32_t c2) {
#if FLASHATTN_PTX_SM90
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];\n"
      :
      : "r"(dst), "l"(tma_map_addr(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#else
  FLASHATTN_PTX_UNSUPPORTED("cp.async.bulk.tensor needs sm_90");
#endif
}

__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap* map, uint32_t bar, int32_t c0, int32_t c1,
                                         int32_t c2, int32_t c3) {
#if FLASHATTN_PTX_SM90
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];\n"
      :
      : "r"(dst), "l"(tma_map_addr(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
#else
  FLASHATTN_PTX_UNSUPPORTED("cp.async.bulk.tensor needs sm_90");
#endif
}

__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap* map, uint32_t bar, int32_t c0, int32_t c1,
                                         int32_t c2, int32_t c3, int32_t c4) {
#if FLASHATTN_PTX_SM90
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6, %7}], [%2];\n"
      :
      : "r"(dst), "l"(tma_map_addr(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
#else
  FLASHATTN_PTX_UNSUPPORTED("cp.async.bulk.tensor needs sm_90");
#endif
}

__device__ __forceinline__ void tma_store(const CUtensorMap* map, uint32_t src, int32_t c0, int32_t c1) {
#if FLASHATTN_PTX_SM90
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%2, %3}], [%1];\n"
               :
               : "l"(tma_map_addr(map)), "r"(src), "r"(c0), "r"(c1)
               : "memory");
#else
  FLASHATTN_PTX_UNSUPPORTED("cp.async.bulk.tensor needs sm_90");
#endif
}

__device__ __forceinline__ void tma_store(const CUtensorMap* map, uint32_t src, int32_t c0, int32_t c1, int32_t c2) {
#if FLASHATTN_PTX_SM90
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n"
               :
               : "l"(tma_map_addr(map)), "r"(src), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
#else
  FLASHATTN_PTX_UNSUPPORTED("cp.async.bulk.tensor needs sm_90");
#endif
}

__device__ __forceinline__ void tma_store(const CUtensorMap* map, uint32_t src, int32_t c0, int32_t c1, int32_t c2,
                                          int32_t c3) {
#if FLASHATTN_PTX_SM90
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n"
               :
               : "l"(tma_map_addr(map)), "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
#else
  FLASHATTN_PTX_UNSUPPORTED("cp.async.bulk.tensor needs sm_90");
#endif
}

__device__ __forceinline__ void tma_store(const CUtensorMap* map, uint32_t src, int32_t c0, int32_t c1, int32_t c2,
                                          int32_t c3, int32_t c4) {
#if FLASHATTN_PTX_SM90
  asm volatile("cp.async.bulk.tensor.5d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5, %6}], [%1];\n"
               :
               : "l"(tma_map_addr(map)), "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
               : "memory");
#else
  FLASHATTN_PTX_UNSUPPORTED("cp.async.bulk.tensor needs sm_90");
#endif
}

__device__ __forceinline__ void tma_store_commit() {
#if FLASHATTN_PTX_SM90
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}

template <int N>
__device__ __forceinline__ void tma_store_wait_read() {
#if FLASHATTN_PTX_SM90
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
#endif
}

template <int N>
__device__ __forceinline__ void tma_store_wait() {
#if FLASHATTN_PTX_SM90
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

__device__ __forceinline__ void tma_prefetch_descriptor(const CUtensorMap* map) {
#if FLASHATTN_PTX_SM90
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(tma_map_addr(map)) : "memory");
#endif
}

}  // namespace flashattn::ptx
