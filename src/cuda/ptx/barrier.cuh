// bar.sync / bar.arrive with an id (named barriers, sm_70+): the 16 hardware barriers of a CTA,
// each counting threads in whole warps; __syncthreads() is barrier 0 with every thread. They let
// two or three warpgroups hand work to each other (ping-pong of the consumer warpgroups, a
// producer that must not stop) without stopping the whole CTA.
//
// Contract (id in 1..15, not 0: that one is __syncthreads'; threads a multiple of 32, the same in
// every call of one phase; every thread of a participating warp executes the call, converged):
//   named_barrier_sync(id, threads): waits until `threads` threads have arrived at barrier id
//       (through sync or arrive), this one included; then the barrier is free for the next phase.
//   named_barrier_arrive(id, threads): counts this thread's arrival without waiting.
// Memory: writes a thread made before its arrive or sync are visible to the threads that return
// from the sync of that phase (bar.* orders shared and global memory among the participants).
#pragma once

#include <cstdint>

#include "cuda/ptx/arch.cuh"

namespace flashattn::ptx {

__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace flashattn::ptx
