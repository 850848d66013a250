// ld.acquire.gpu.global.b32 (sm_70+): a load with acquire semantics at gpu scope.
//
// Contract: ld_acquire_s32(p) returns *p; writes that another thread released (red.release /
// st.release / fence + store) before the value it reads are visible to this thread afterwards,
// and to the rest of its block after a following bar.sync. p 4-byte aligned. Used to spin on a
// counter in global memory.
#pragma once

#include <cstdint>

#include "cuda/ptx/arch.cuh"

namespace flashattn::ptx {

__device__ __forceinline__ int32_t ld_acquire_s32(const int32_t* p) {
  int32_t v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

}  // namespace flashattn::ptx
