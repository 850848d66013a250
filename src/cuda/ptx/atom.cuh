// atom.add with acquire-release semantics at gpu scope (sm_70+): a counter bumped by one thread of
// each of several blocks, where the block that sees the last count goes on to read what the others
// wrote.
//
// Contract: atom_add_acq_rel_s32(p, x) adds x to *p and returns the value before. Release: every
// write this thread made or observed before it (e.g. its block's writes through a preceding
// bar.sync) is visible to a thread that acquires *p afterwards. Acquire: the writes released by
// the earlier adds to *p are visible to this thread afterwards, and to the rest of its block after
// a following bar.sync. p 4-byte aligned.
#pragma once

#include <cstdint>

#include "cuda/ptx/arch.cuh"

namespace flashattn::ptx {

__device__ __forceinline__ int32_t atom_add_acq_rel_s32(int32_t* p, int32_t x) {
  int32_t old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;\n" : "=r"(old) : "l"(p), "r"(x) : "memory");
  return old;
}

}  // namespace flashattn::ptx
