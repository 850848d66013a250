// red.global.add (sm_70+; the .v2/.v4.f32 forms sm_90+): fire-and-forget atomic reductions into global
// memory, performed at L2. No value comes back, so the issuing thread does not wait for them.
//
// Contract:
//   red_add_f32(p, x):          *p += x (relaxed, gpu scope); p 4-byte aligned.
//   red_add_v2_f32(p, x0, x1):  p[0] += x0, p[1] += x1 as one vector reduction; p 8-byte aligned.
//                               Before sm_90 (no vector red) it issues two scalar reds instead.
//   red_add_v4_f32(p, x0..x3):  p[i] += xi, i = 0..3, as one vector reduction; p 16-byte aligned.
//                               Before sm_90: four scalar reds.
//   red_release_add_s32(p, x):  *p += x with release semantics at gpu scope: every write this
//                               thread made (or observed, e.g. through a preceding bar.sync)
//                               before it is visible to a thread that acquires *p afterwards.
// Each element's reductions commute only up to floating-point rounding: the order in which reds
// from different threads reach L2 decides the bits (see the deterministic mode of the backward).
#pragma once

#include <cstdint>

#include "cuda/ptx/arch.cuh"

namespace flashattn::ptx {

__device__ __forceinline__ void red_add_f32(float* p, float x) {
  asm volatile("red.relaxed.gpu.global.add.f32 [%0], %1;\n" ::"l"(p), "f"(x) : "memory");
}

__device__ __forceinline__ void red_add_v2_f32(float* p, float x0, float x1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.relaxed.gpu.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(x0), "f"(x1) : "memory");
#else
  red_add_f32(p, x0);
  red_add_f32(p + 1, x1);
#endif
}

__device__ __forceinline__ void red_add_v4_f32(float* p, float x0, float x1, float x2, float x3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.relaxed.gpu.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(x0), "f"(x1), "f"(x2),
               "f"(x3)
               : "memory");
#else
  red_add_v2_f32(p, x0, x1);
  red_add_v2_f32(p + 2, x2, x3);
#endif
}

__device__ __forceinline__ void red_release_add_s32(int32_t* p, int32_t x) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(x) : "memory");
}

}  // namespace flashattn::ptx
