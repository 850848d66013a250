// cp.async.cg.shared.global (sm_80+): asynchronous 16-byte global → shared copies that bypass L1,
// grouped by commit_group and waited on by wait_group.
//
// Contract: cp_async_16 copies 16 bytes, both addresses 16-byte aligned; cp_async_4 (cp.async.ca,
// through L1: small gathers such as block-table entries) copies 4 bytes, both addresses 4-byte aligned. `src_bytes` < 16 zero-fills
// the rest of the destination (src_bytes = 0 reads nothing and writes 16 zero bytes: the
// predicated-off load used for rows past the sequence end and columns past the head dim).
// wait_group<N> returns when at most N of this thread's committed groups are still in flight; a
// __syncthreads() afterwards makes every thread's copies visible to the block.
// cp_async_mbarrier_arrive_noinc: instead of a group, the mbarrier at `bar` (shared::cta) receives one
// arrival once every cp.async this thread issued before it has landed, the copies then visible to
// the threads that wait for the barrier's phase; noinc: that arrival is one of the count the barrier
// was initialized with (one per copying thread), not an extra one.
#pragma once

#include <cstdint>

#include "cuda/ptx/arch.cuh"

namespace flashattn::ptx {

__device__ __forceinline__ void cp_async_16(uint32_t smem_dst, const void* gmem_src, uint32_t src_bytes = 16) {
#if FLASHATTN_PTX_SM80
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_dst), "l"(gmem_src), "r"(src_bytes));
#else
  FLASHATTN_PTX_UNSUPPORTED("cp.async needs sm_80");
#endif
}

__device__ __forceinline__ void cp_async_4(uint32_t smem_dst, const void* gmem_src) {
#if FLASHATTN_PTX_SM80
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_dst), "l"(gmem_src));
#else
  FLASHATTN_PTX_UNSUPPORTED("cp.async needs sm_80");
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#if FLASHATTN_PTX_SM80
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if FLASHATTN_PTX_SM80
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(uint32_t bar) {
#if FLASHATTN_PTX_SM80
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
#else
  FLASHATTN_PTX_UNSUPPORTED("cp.async needs sm_80");
#endif
}

}  // namespace flashattn::ptx
