// Thread block clusters (sm_90): a CTA's rank in its cluster, the cluster barrier, addresses in a
// peer CTA's shared memory, and asynchronous stores into it that complete the peer's mbarrier.
//
// Contract:
//   cluster_ctarank(): this CTA's rank in its cluster (0 for a launch without clusters).
//   cluster_arrive_relaxed(): this thread's arrival at the cluster barrier, without memory
//       ordering: use it where the peers only need to know that this CTA has passed a point (e.g.
//       its reads of a buffer a peer will overwrite are done: the values are in registers).
//   cluster_arrive(): the same with release semantics at cluster scope.
//   cluster_wait(): waits until every thread of every CTA of the cluster has arrived (acquire at
//       cluster scope). Each thread alternates arrive and wait; all three are .aligned: every
//       thread of the warp executes them together.
//   mapa_shared_cluster(addr, rank): the shared::cluster address of the variable at this CTA's
//       shared-window address `addr` (smem_addr()) in the CTA of rank `rank`.
//   st_async_v4(addr, a, b, c, d, bar): stores 16 bytes at the shared::cluster address `addr` of
//       another CTA of the cluster and, once they have landed, subtracts 16 from the transaction
//       count of the mbarrier at the shared::cluster address `bar` (in that same CTA; the receiver
//       expects the bytes with mbarrier_arrive_expect_tx and waits on the phase). Needs a cluster of
//       at least two CTAs.
#pragma once

#include <cstdint>

#include "cuda/ptx/arch.cuh"

namespace flashattn::ptx {

__device__ __forceinline__ uint32_t cluster_ctarank() {
#if FLASHATTN_PTX_SM90
  uint32_t rank;
  asm("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
#else
  FLASHATTN_PTX_UNSUPPORTED("clusters need sm_90");
  return 0;
#endif
}

__device__ __forceinline__ void cluster_arrive_relaxed() {
#if FLASHATTN_PTX_SM90
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#else
  FLASHATTN_PTX_UNSUPPORTED("barrier.cluster needs sm_90");
#endif
}

__device__ __forceinline__ void cluster_arrive() {
#if FLASHATTN_PTX_SM90
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#else
  FLASHATTN_PTX_UNSUPPORTED("barrier.cluster needs sm_90");
#endif
}

__device__ __forceinline__ void cluster_wait() {
#if FLASHATTN_PTX_SM90
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
  FLASHATTN_PTX_UNSUPPORTED("barrier.cluster needs sm_90");
#endif
}

__device__ __forceinline__ uint32_t mapa_shared_cluster(uint32_t addr, uint32_t rank) {
#if FLASHATTN_PTX_SM90
  uint32_t mapped;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(mapped) : "r"(addr), "r"(rank));
  return mapped;
#else
  FLASHATTN_PTX_UNSUPPORTED("mapa needs sm_90");
  return addr + 0 * rank;
#endif
}

__device__ __forceinline__ void st_async_v4(uint32_t addr, uint32_t a, uint32_t b, uint32_t c, uint32_t d,
                                            uint32_t bar) {
#if FLASHATTN_PTX_SM90
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(
                   addr),
               "r"(a), "r"(b), "r"(c), "r"(d), "r"(bar)
               : "memory");
#else
  FLASHATTN_PTX_UNSUPPORTED("st.async needs sm_90");
#endif
}

}  // namespace flashattn::ptx
