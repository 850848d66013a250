// griddepcontrol (sm_90+): programmatic dependent launch between two kernels of one stream. The
// secondary kernel is launched with cudaLaunchAttributeProgrammaticStreamSerialization; it may
// then start before the primary has finished.
//
// Contract:
//   griddep_launch_dependents(): this thread block lets the dependent grid launch; the dependent
//       launches once every block of this grid has called it or exited (repeats are no-ops). It
//       says nothing about this grid's memory: the dependent must not read what this grid writes
//       before griddep_wait().
//   griddep_wait(): waits until every prerequisite grid has completed and its memory operations
//       are visible to this thread; returns at once when the grid was launched without a
//       prerequisite (a plain launch).
// Before sm_90 both compile to nothing: the host launches these kernels with plain stream order
// there (it checks the kernel's PTX version), so there is nothing to wait for.
#pragma once

#include "cuda/ptx/arch.cuh"

namespace flashattn::ptx {

__device__ __forceinline__ void griddep_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void griddep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

}  // namespace flashattn::ptx
