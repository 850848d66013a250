// fence.proxy.async.shared::cta (sm_90): shared memory is reached through two proxies — the generic
// one (ordinary ld/st.shared, ldmatrix, stmatrix) and the async one (the copy engine's TMA loads and
// stores, wgmma's shared-memory operands) — and a barrier alone orders only the generic proxy.
//
// Contract: fence_proxy_async_shared_cta() orders this thread's earlier shared-memory accesses in
// one proxy before its later ones in the other. Uses:
//   - ordinary stores, then a wgmma or a TMA store reads the data: each writing thread fences, then
//     a barrier (named or __syncthreads), then the wgmma / the TMA store is issued;
//   - ordinary reads of a buffer that TMA will overwrite next: fence before handing the buffer back
//     (the mbarrier arrive that releases a ring stage orders the generic reads already);
//   - an mbarrier initialized by ordinary code before TMA signals it, in a single CTA (the CUDA
//     programming guide's TMA example); fence_mbarrier_init() (mbarrier.cuh) covers clusters.
#pragma once

#include "cuda/ptx/arch.cuh"

namespace flashattn::ptx {

__device__ __forceinline__ void fence_proxy_async_shared_cta() {
#if FLASHATTN_PTX_SM90
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#else
  FLASHATTN_PTX_UNSUPPORTED("fence.proxy.async needs sm_90");
#endif
}

}  // namespace flashattn::ptx
