// setmaxnreg.{inc,dec}.sync.aligned.u32 (sm_90a only): a warpgroup changes the number of registers
// per thread it holds, so that a producer warpgroup that only issues TMA gives registers to the
// consumer warpgroups that hold the accumulators (FlashAttention-3: 24 / 240 with two consumers).
//
// Contract: every thread of the warpgroup executes the same call, converged. kRegs is a multiple
// of 8 in [24, 256]. setmaxnreg_dec<kRegs>() releases registers down to kRegs per thread (at most
// the current count); setmaxnreg_inc<kRegs>() waits until the SM's pool has enough and raises the
// count to kRegs (at least the current count); the contents of the registers kept are preserved.
// It takes effect only in a kernel compiled with a per-thread register cap at entry
// (__launch_bounds__(threads, 1) or -maxrregcount), and the sum over the CTA's warpgroups must fit
// the register file; ptxas warns (and ignores the instruction) otherwise.
#pragma once

#include "cuda/ptx/arch.cuh"

namespace flashattn::ptx {

template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: a multiple of 8 in [24, 256]");
#if FLASHATTN_PTX_SM90A
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#else
  FLASHATTN_PTX_UNSUPPORTED("setmaxnreg needs sm_90a");
#endif
}

template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: a multiple of 8 in [24, 256]");
#if FLASHATTN_PTX_SM90A
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#else
  FLASHATTN_PTX_UNSUPPORTED("setmaxnreg needs sm_90a");
#endif
}

}  // namespace flashattn::ptx
