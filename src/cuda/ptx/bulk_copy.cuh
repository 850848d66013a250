// cp.async.bulk (sm_90), global → shared: the copy engine moves a contiguous run of bytes, issued by
// one thread, with no tensor map (the row vectors beside the tiles that TMA boxes bring).
//
// Contract: bulk_load(dst, src, bytes, bar) copies `bytes` bytes from global memory at src into
// shared memory at dst (a shared-window address, smem_addr(); as for tma_load a CTA's own address
// is a shared::cluster one). dst and src 16-byte aligned, bytes a positive multiple of 16. On
// completion `bytes` is subtracted from the tx count of the mbarrier at bar (mbarrier.cuh), which
// must have been told to expect it (in the same mbarrier_arrive_expect_tx as the boxes it travels
// with). The source must not be written while the copy may run (the backward's workspace rows,
// written by the kernel before).
#pragma once

#include <cstdint>

#include "cuda/ptx/arch.cuh"

namespace flashattn::ptx {

__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
#if FLASHATTN_PTX_SM90
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(dst), "l"(src), "r"(bytes), "r"(bar)
               : "memory");
#else
  FLASHATTN_PTX_UNSUPPORTED("cp.async.bulk needs sm_90");
#endif
}

}  // namespace flashattn::ptx
