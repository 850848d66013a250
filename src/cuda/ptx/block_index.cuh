// mov.u32 from %ctaid.x, as volatile asm: the block's index read again where it is used, so that
// the compiler does not keep the kernel's first read of blockIdx.x in a register until then (what
// the sm80 backward's dQ conversion after its main loop needs: no register held across the loop).
//
// Contract: block_index_x() == blockIdx.x.
#pragma once

#include "cuda/ptx/arch.cuh"

namespace flashattn::ptx {

__device__ __forceinline__ int block_index_x() {
  unsigned x;
  asm volatile("mov.u32 %0, %%ctaid.x;\n" : "=r"(x));
  return static_cast<int>(x);
}

}  // namespace flashattn::ptx
