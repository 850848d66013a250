// mbarrier (sm_90 forms): a 64-bit barrier object in shared memory that counts arrivals and, for the
// copy engine, bytes still to land (the transaction count, "tx"). A phase completes when its
// expected arrivals have all arrived and its tx count is back to 0; the next phase then starts with
// the same arrival count. Waiters name a phase by its parity (phases 0, 1, 2, ... have parities
// 0, 1, 0, ...): the consumer of a ring stage keeps one bit per stage and flips it after each wait.
//
// Contract (bar is the barrier's shared-window address, 8-byte aligned; see ldmatrix.cuh's smem_addr):
//   mbarrier_init(bar, count): one thread, before any other use; count arrivals complete a phase.
//       Then fence_mbarrier_init() (the initialization made visible to the cluster and to the copy
//       engine) followed by __syncthreads() (or a cluster barrier) before any thread or TMA uses it.
//   mbarrier_arrive(bar): this thread's arrival in the current phase, with release semantics at CTA
//       scope (its earlier writes are visible to threads that then wait for the phase).
//   mbarrier_arrive_expect_tx(bar, bytes): adds `bytes` to the phase's expected transaction bytes,
//       then arrives — one atomic step, so issue it before the copies whose completion it
//       expects (TMA's complete_tx subtracts each box's full size, out-of-bounds part included).
//   mbarrier_expect_tx(bar, bytes): adds `bytes` to the phase's expected transaction bytes without
//       arriving (several threads may each expect their own copies' bytes; the phase's arrival must
//       then come after all of them, e.g. behind a __syncwarp).
//   mbarrier_try_wait(bar, parity): `parity` names the current phase (false until it completes)
//       or the one before it (complete: true at once) — so a producer that waits on a fresh
//       "stage is empty" barrier starts with parity 1 and passes. May suspend the thread a while
//       in hardware before returning false. Acquire at CTA scope.
//   mbarrier_wait(bar, parity): loops on mbarrier_try_wait. Afterwards the data of the phase's
//       copies and the writes the arriving threads released are visible to this thread. Built with
//       FLASHATTN_HANG_WATCHDOG (a debugging option, off by default), a wait that outlasts 2 s
//       prints the barrier's shared address, the phase and the waiting block and warp, and traps:
//       a kernel that deadlocks fails its test saying where, instead of hanging it.
#pragma once

#include <cstdint>
#if FLASHATTN_HANG_WATCHDOG
#include <cstdio>

#include "cuda/ptx/globaltimer.cuh"
#endif

#include "cuda/ptx/arch.cuh"

namespace flashattn::ptx {

__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t count) {
#if FLASHATTN_PTX_SM90
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#else
  FLASHATTN_PTX_UNSUPPORTED("the sm_90 mbarrier forms need sm_90");
#endif
}

// fence.mbarrier_init.release.cluster: orders this thread's earlier mbarrier.init before its later
// arrives and before the barrier that hands the mbarrier to other threads (and to TMA).
__device__ __forceinline__ void fence_mbarrier_init() {
#if FLASHATTN_PTX_SM90
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#else
  FLASHATTN_PTX_UNSUPPORTED("fence.mbarrier_init needs sm_90");
#endif
}

__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
#if FLASHATTN_PTX_SM90
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#else
  FLASHATTN_PTX_UNSUPPORTED("the sm_90 mbarrier forms need sm_90");
#endif
}

__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
#if FLASHATTN_PTX_SM90
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#else
  FLASHATTN_PTX_UNSUPPORTED("the sm_90 mbarrier forms need sm_90");
#endif
}

__device__ __forceinline__ void mbarrier_expect_tx(uint32_t bar, uint32_t bytes) {
#if FLASHATTN_PTX_SM90
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#else
  FLASHATTN_PTX_UNSUPPORTED("the sm_90 mbarrier forms need sm_90");
#endif
}

__device__ __forceinline__ bool mbarrier_try_wait(uint32_t bar, uint32_t parity) {
#if FLASHATTN_PTX_SM90
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
#else
  FLASHATTN_PTX_UNSUPPORTED("the sm_90 mbarrier forms need sm_90");
  return true;
#endif
}

#if FLASHATTN_HANG_WATCHDOG
inline constexpr uint64_t kHangNs = 2'000'000'000ull;

// static: one copy per translation unit (a header's non-inline function would link twice).
static __device__ __noinline__ void report_hang(uint32_t bar, uint32_t parity) {
  if (threadIdx.x % 32 == 0) {
    printf("flashattn: mbarrier wait hung: block (%d, %d, %d), warp %d, barrier at shared 0x%x, parity %u\n",
           static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.z),
           static_cast<int>(threadIdx.x / 32), bar, parity);
  }
  __trap();
}
#endif

__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
#if FLASHATTN_HANG_WATCHDOG
  const uint64_t start = globaltimer_ns();
  while (!mbarrier_try_wait(bar, parity)) {
    if (globaltimer_ns() - start > kHangNs) report_hang(bar, parity);
  }
#else
  while (!mbarrier_try_wait(bar, parity)) {
  }
#endif
}

}  // namespace flashattn::ptx
