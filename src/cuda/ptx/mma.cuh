// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32 (sm_80+): D = A·B + C.
//
// Fragment layout contract (PTX ISA, "Matrix Fragments for mma.m16n8k16"), per warp, with
// g = lane / 4 (group) and t = lane % 4 (thread in group). Each .b32 register holds two 16-bit
// elements, the lower column (or k) index in the low half.
//   A (16×16, row-major, 4 regs):  a[0] = A[g    ][2t, 2t+1]   a[1] = A[g + 8][2t, 2t+1]
//                                  a[2] = A[g    ][2t+8, +9]   a[3] = A[g + 8][2t+8, +9]
//   B (16×8, "col": k-major, 2 regs): b[0] = B[2t, 2t+1][g]   b[1] = B[2t+8, 2t+9][g]
//   C, D (16×8 fp32, 4 regs):      c[0], c[1] = C[g    ][2t, 2t+1]
//                                  c[2], c[3] = C[g + 8][2t, 2t+1]
// So a row of C is spread over the 4 threads of a group: row reductions use two xor-shuffles
// (lanes ^1, ^2). And C's layout equals A's for a 16×8 half of the k = 16 dimension, which is what
// lets P (an accumulator) feed the next mma as an A operand straight from registers.
#pragma once

#include <cstdint>

#include "cuda/ptx/arch.cuh"

namespace flashattn::ptx {

struct F16 {};   // tag: fp16 operands
struct BF16 {};  // tag: bf16 operands

template <class Tag>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                             const float (&c)[4]) {
#if FLASHATTN_PTX_SM80
  if constexpr (std::is_same_v<Tag, BF16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
          "f"(c[3]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
          "f"(c[3]));
  }
#else
  FLASHATTN_PTX_UNSUPPORTED("mma.sync.m16n8k16 needs sm_80");
#endif
}

// Accumulating form: d += A·B.
template <class Tag>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  mma_m16n8k16<Tag>(d, a, b, d);
}

}  // namespace flashattn::ptx
