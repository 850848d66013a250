// Special-function and conversion instructions the softmax uses.
//   ex2.approx.ftz.f32: 2^x, ~2 ulp; ex2(−inf) = +0, which is what masked scores rely on.
//   cvt.rn.{bf16x2,f16x2}.f32: two floats → one packed register, round to nearest even; the first
//   operand goes to the HIGH half, so pack(lo, hi) passes (hi, lo) — matching mma fragments, whose
//   lower column index sits in the low half.
#pragma once

#include <cstdint>

#include "cuda/ptx/arch.cuh"
#include "cuda/ptx/mma.cuh"

namespace flashattn::ptx {

__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

template <class Tag>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t r;
  if constexpr (std::is_same_v<Tag, BF16>) {
#if FLASHATTN_PTX_SM80
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
#else
    FLASHATTN_PTX_UNSUPPORTED("cvt.rn.bf16x2.f32 needs sm_80");
    r = 0;
#endif
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
}

}  // namespace flashattn::ptx
