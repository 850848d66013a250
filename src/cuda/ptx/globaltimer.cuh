// %globaltimer (sm_30+): a 64-bit nanosecond clock shared by the GPU's SMs.
//
// Contract: globaltimer_ns() returns the current time in nanoseconds; comparable across threads and
// SMs of one GPU, monotone; its resolution is coarse (microseconds on some GPUs), so it only bounds
// long waits (a spin that must not hang forever), it does not time short code.
#pragma once

#include <cstdint>

namespace flashattn::ptx {

__device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}

}  // namespace flashattn::ptx
