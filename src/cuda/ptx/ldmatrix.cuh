// ldmatrix.sync.aligned.m8n8.{x4,x2}[.trans].shared.b16 (sm_75+): warp-wide loads of 8×8 tiles of
// 16-bit elements from shared memory into mma fragments.
//
// Layout contract: for .x4, lanes 8i .. 8i+7 give the shared addresses of the 8 rows (16 bytes each)
// of matrix i (i = 0..3); for .x2, lanes 0..15 give rows of matrices 0, 1. Afterwards register r[i]
// of lane l holds matrix i's row l/4, columns 2(l%4) and 2(l%4)+1 (low half first) — the same
// (g, 2t) pattern as the mma A/B fragments. With .trans, r[i] holds matrix i's column l/4, rows
// 2(l%4), 2(l%4)+1: this turns a row-major V tile ([key][d]) into the k-major B operand of P·V.
// Addresses are 32-bit shared-window addresses (smem_addr()).
#pragma once

#include <cstdint>

#include "cuda/ptx/arch.cuh"

namespace flashattn::ptx {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}

}  // namespace flashattn::ptx
