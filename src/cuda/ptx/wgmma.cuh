// wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}.{f16,bf16} (sm_90a only), its ordering
// instructions wgmma.fence / commit_group / wait_group, and the shared-memory matrix descriptors it
// reads its operands through: D (64×N, fp32) = A (64×16) · B (16×N) + D, one instruction per warpgroup
// (4 consecutive warps, the first one's index a multiple of 4; all 128 threads issue it, converged).
// N is any multiple of 8 in [8, 256].
//
// Register fragments (PTX ISA, "Matrix Fragments for wgmma.mma_async.m64nNk16"), with w = the warp's
// index in the warpgroup (0..3), g = lane / 4, t = lane % 4. Warp w owns rows 16w .. 16w + 15, laid
// out exactly as one mma.m16n8k16 (ptx/mma.cuh) lays out its 16 rows:
//   D (N/2 floats):  d[4j + 0], d[4j + 1] = D[16w + g    ][8j + 2t, 8j + 2t + 1]      j = 0 .. N/8 − 1
//                    d[4j + 2], d[4j + 3] = D[16w + g + 8][8j + 2t, 8j + 2t + 1]
//   A in registers (RS form; 4 × .b32 of two 16-bit values, the lower k in the low half):
//                    a[0] = A[16w + g][2t, 2t + 1]      a[1] = A[16w + g + 8][2t, 2t + 1]
//                    a[2] = A[16w + g][2t + 8, 2t + 9]  a[3] = A[16w + g + 8][2t + 8, 2t + 9]
// So columns 16k .. 16k + 15 of an accumulator, packed pairwise, are the A fragment of k-step k of a
// following product: a[i] = pack2(d[8k + 2i], d[8k + 2i + 1]) (ptx/math.cuh). P = softmax(S) feeds
// O += P·V from registers without a shuffle (16-bit inputs; fp8 would need one).
//
// Shared-memory operands (B always; A in the SS form) are read through 64-bit matrix descriptors
// (PTX ISA, "Matrix Descriptor Format"):
//   bits  0..13  start address >> 4 (shared window address, 16-byte aligned)
//   bits 16..29  leading-dimension byte offset (LBO) >> 4
//   bits 32..45  stride-dimension byte offset (SBO) >> 4
//   bits 49..51  base offset: always 0 here (each swizzled tile starts on its 8·S-byte pattern)
//   bits 62..63  swizzle: 0 none, 1 128B, 2 64B, 3 32B
// The tiles of this library are written by TMA with a swizzle of S bytes (ptx/swizzle.hpp): rows of
// S bytes = S/2 elements, and a dimension longer than that split into chunks of S/2 elements, each
// chunk a full tile of rows after the previous one. For such tiles (PTX ISA, "Canonical Layouts"):
//   K-major (stored [m or n][k], k contiguous: Q and K in S = Q·Kᵀ; trans flag 0):
//     SBO = 8·S (from 8 rows of m/n to the next 8); LBO unused for swizzled K-major (set to 16).
//     k-step i (16 elements = 32 bytes) starts 32·(i % (S/32)) bytes into the rows of chunk
//     i / (S/32): the swizzle is a function of the absolute address, so a start inside the row
//     reads the right (swizzled) chunks.
//   MN-major (stored [k][m or n], m/n contiguous: V in O = P·V; trans flag 1):
//     LBO = bytes from one chunk of S/2 columns of m/n to the next (= rows_k · S here);
//     SBO = 8·S (from 8 rows of k to the next 8). k-step i starts 16·i rows = 16·i·S bytes in.
// A descriptor that disagrees with the tile (swizzle, LBO, SBO) is not an error: wgmma reads the
// wrong elements. The tests of tests/cuda/test_ptx_sm90.cu show that such a mistake fails them.
//
// Ordering (wgmma runs asynchronously to the issuing threads):
//   wgmma_fence()          before the first wgmma, and again before one that reads accumulators or A
//                          registers written by ordinary instructions (rescale, pack2) since then.
//   wgmma_commit()         closes the wgmmas issued since the last commit into one group.
//   wgmma_wait<N>()        returns once at most N groups are pending: the accumulators of the others
//                          may then be read and their shared-memory operands overwritten.
//   wgmma_fence_operand(d) pins d in program order: the compiler does not know wgmma is asynchronous
//                          and would otherwise be free to move ordinary reads/writes of d across the
//                          asm statements (use it after wgmma_wait, and before the batch).
// Shared memory that ordinary stores wrote needs fence_proxy_async_shared_cta() (ptx/fence.cuh) in
// each writing thread, then a barrier, before wgmma reads it; TMA-written tiles do not.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/common/host_device.cuh"
#include "cuda/ptx/arch.cuh"
#include "cuda/ptx/mma.cuh"
#include "cuda/ptx/swizzle.hpp"

namespace flashattn::ptx {

// Which dimension of a shared-memory operand is contiguous: K (the instruction's trans flag 0) or
// M/N (trans flag 1, 16-bit types only).
enum class Major : int { K = 0, MN = 1 };

// The descriptor's 2-bit swizzle code for a mode.
FLASHATTN_HD constexpr uint64_t wgmma_swizzle_code(Swizzle s) {
  return s == Swizzle::b128 ? 1 : s == Swizzle::b64 ? 2 : s == Swizzle::b32 ? 3 : 0;
}

// The descriptor of an operand at shared address `smem_addr` with the given swizzle and byte
// offsets (see the contract above). Only bits 4..17 of each value are kept, as the hardware does.
FLASHATTN_HD constexpr uint64_t make_wgmma_desc(uint32_t smem_addr, Swizzle swizzle, uint32_t lbo_bytes,
                                                uint32_t sbo_bytes) {
  auto encode = [](uint32_t x) { return static_cast<uint64_t>((x & 0x3FFFF) >> 4); };
  return encode(smem_addr) | (encode(lbo_bytes) << 16) | (encode(sbo_bytes) << 32) |
         (wgmma_swizzle_code(swizzle) << 62);
}

// A K-major tile written by TMA with swizzle s (s != none): rows of S bytes, 8-row groups 8·S apart.
FLASHATTN_HD constexpr uint64_t wgmma_desc_k_major(uint32_t smem_addr, Swizzle s) {
  return make_wgmma_desc(smem_addr, s, 16, 8 * static_cast<uint32_t>(s));
}

// An MN-major tile written by TMA with swizzle s (s != none): chunks of S/2 columns of m/n,
// `chunk_bytes` apart, each rows_k rows of S bytes.
FLASHATTN_HD constexpr uint64_t wgmma_desc_mn_major(uint32_t smem_addr, Swizzle s, uint32_t chunk_bytes) {
  return make_wgmma_desc(smem_addr, s, chunk_bytes, 8 * static_cast<uint32_t>(s));
}

// The same descriptor with its start address `bytes` further on (a k-step): one add, as long as
// the address stays below 256 KB (it does: shared memory is 228 KB).
FLASHATTN_HD constexpr uint64_t wgmma_desc_advance(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }

__device__ __forceinline__ void wgmma_fence() {
#if FLASHATTN_PTX_SM90A
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
  FLASHATTN_PTX_UNSUPPORTED("wgmma needs sm_90a");
#endif
}

__device__ __forceinline__ void wgmma_commit() {
#if FLASHATTN_PTX_SM90A
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
  FLASHATTN_PTX_UNSUPPORTED("wgmma needs sm_90a");
#endif
}

template <int N>
__device__ __forceinline__ void wgmma_wait() {
  static_assert(N >= 0 && N <= 7, "wgmma.wait_group takes 0..7");
#if FLASHATTN_PTX_SM90A
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#else
  FLASHATTN_PTX_UNSUPPORTED("wgmma needs sm_90a");
#endif
}

template <int R>
__device__ __forceinline__ void wgmma_fence_operand(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// ---- the asm operand lists -----------------------------------------------------------------------
// Inline asm takes its text only as a string literal, no parameter pack in its operand list, and
// (nvcc) no symbolic operand names; so the preprocessor writes, for each N, the accumulator list
// twice — as "%0, %1, ..." in the text and as "+f"(d[0]), "+f"(d[1]), ... in the operands — and
// hands the numbers of the operands after them (the A operand, B's descriptor, scale-d, trans
// flags) to the instruction's macro. FA_WGMMA_ACC_<N>(X, S) is X(0) S() X(1) ... X(N/2 − 1);
// FA_WGMMA_NEXT_<N>(F, args...) is F(args..., N/2, N/2 + 1, ..., N/2 + 6).
#define FA_WGMMA_ACC_8(X, S) X(0) S() X(1) S() X(2) S() X(3)
#define FA_WGMMA_ACC_16(X, S) FA_WGMMA_ACC_8(X, S) S() X(4) S() X(5) S() X(6) S() X(7)
#define FA_WGMMA_ACC_24(X, S) FA_WGMMA_ACC_16(X, S) S() X(8) S() X(9) S() X(10) S() X(11)
#define FA_WGMMA_ACC_32(X, S) FA_WGMMA_ACC_24(X, S) S() X(12) S() X(13) S() X(14) S() X(15)
#define FA_WGMMA_ACC_40(X, S) FA_WGMMA_ACC_32(X, S) S() X(16) S() X(17) S() X(18) S() X(19)
#define FA_WGMMA_ACC_48(X, S) FA_WGMMA_ACC_40(X, S) S() X(20) S() X(21) S() X(22) S() X(23)
#define FA_WGMMA_ACC_56(X, S) FA_WGMMA_ACC_48(X, S) S() X(24) S() X(25) S() X(26) S() X(27)
#define FA_WGMMA_ACC_64(X, S) FA_WGMMA_ACC_56(X, S) S() X(28) S() X(29) S() X(30) S() X(31)
#define FA_WGMMA_ACC_72(X, S) FA_WGMMA_ACC_64(X, S) S() X(32) S() X(33) S() X(34) S() X(35)
#define FA_WGMMA_ACC_80(X, S) FA_WGMMA_ACC_72(X, S) S() X(36) S() X(37) S() X(38) S() X(39)
#define FA_WGMMA_ACC_88(X, S) FA_WGMMA_ACC_80(X, S) S() X(40) S() X(41) S() X(42) S() X(43)
#define FA_WGMMA_ACC_96(X, S) FA_WGMMA_ACC_88(X, S) S() X(44) S() X(45) S() X(46) S() X(47)
#define FA_WGMMA_ACC_104(X, S) FA_WGMMA_ACC_96(X, S) S() X(48) S() X(49) S() X(50) S() X(51)
#define FA_WGMMA_ACC_112(X, S) FA_WGMMA_ACC_104(X, S) S() X(52) S() X(53) S() X(54) S() X(55)
#define FA_WGMMA_ACC_120(X, S) FA_WGMMA_ACC_112(X, S) S() X(56) S() X(57) S() X(58) S() X(59)
#define FA_WGMMA_ACC_128(X, S) FA_WGMMA_ACC_120(X, S) S() X(60) S() X(61) S() X(62) S() X(63)
#define FA_WGMMA_ACC_136(X, S) FA_WGMMA_ACC_128(X, S) S() X(64) S() X(65) S() X(66) S() X(67)
#define FA_WGMMA_ACC_144(X, S) FA_WGMMA_ACC_136(X, S) S() X(68) S() X(69) S() X(70) S() X(71)
#define FA_WGMMA_ACC_152(X, S) FA_WGMMA_ACC_144(X, S) S() X(72) S() X(73) S() X(74) S() X(75)
#define FA_WGMMA_ACC_160(X, S) FA_WGMMA_ACC_152(X, S) S() X(76) S() X(77) S() X(78) S() X(79)
#define FA_WGMMA_ACC_168(X, S) FA_WGMMA_ACC_160(X, S) S() X(80) S() X(81) S() X(82) S() X(83)
#define FA_WGMMA_ACC_176(X, S) FA_WGMMA_ACC_168(X, S) S() X(84) S() X(85) S() X(86) S() X(87)
#define FA_WGMMA_ACC_184(X, S) FA_WGMMA_ACC_176(X, S) S() X(88) S() X(89) S() X(90) S() X(91)
#define FA_WGMMA_ACC_192(X, S) FA_WGMMA_ACC_184(X, S) S() X(92) S() X(93) S() X(94) S() X(95)
#define FA_WGMMA_ACC_200(X, S) FA_WGMMA_ACC_192(X, S) S() X(96) S() X(97) S() X(98) S() X(99)
#define FA_WGMMA_ACC_208(X, S) FA_WGMMA_ACC_200(X, S) S() X(100) S() X(101) S() X(102) S() X(103)
#define FA_WGMMA_ACC_216(X, S) FA_WGMMA_ACC_208(X, S) S() X(104) S() X(105) S() X(106) S() X(107)
#define FA_WGMMA_ACC_224(X, S) FA_WGMMA_ACC_216(X, S) S() X(108) S() X(109) S() X(110) S() X(111)
#define FA_WGMMA_ACC_232(X, S) FA_WGMMA_ACC_224(X, S) S() X(112) S() X(113) S() X(114) S() X(115)
#define FA_WGMMA_ACC_240(X, S) FA_WGMMA_ACC_232(X, S) S() X(116) S() X(117) S() X(118) S() X(119)
#define FA_WGMMA_ACC_248(X, S) FA_WGMMA_ACC_240(X, S) S() X(120) S() X(121) S() X(122) S() X(123)
#define FA_WGMMA_ACC_256(X, S) FA_WGMMA_ACC_248(X, S) S() X(124) S() X(125) S() X(126) S() X(127)

#define FA_WGMMA_NEXT_8(F, ...) F(__VA_ARGS__, 4, 5, 6, 7, 8, 9, 10)
#define FA_WGMMA_NEXT_16(F, ...) F(__VA_ARGS__, 8, 9, 10, 11, 12, 13, 14)
#define FA_WGMMA_NEXT_24(F, ...) F(__VA_ARGS__, 12, 13, 14, 15, 16, 17, 18)
#define FA_WGMMA_NEXT_32(F, ...) F(__VA_ARGS__, 16, 17, 18, 19, 20, 21, 22)
#define FA_WGMMA_NEXT_40(F, ...) F(__VA_ARGS__, 20, 21, 22, 23, 24, 25, 26)
#define FA_WGMMA_NEXT_48(F, ...) F(__VA_ARGS__, 24, 25, 26, 27, 28, 29, 30)
#define FA_WGMMA_NEXT_56(F, ...) F(__VA_ARGS__, 28, 29, 30, 31, 32, 33, 34)
#define FA_WGMMA_NEXT_64(F, ...) F(__VA_ARGS__, 32, 33, 34, 35, 36, 37, 38)
#define FA_WGMMA_NEXT_72(F, ...) F(__VA_ARGS__, 36, 37, 38, 39, 40, 41, 42)
#define FA_WGMMA_NEXT_80(F, ...) F(__VA_ARGS__, 40, 41, 42, 43, 44, 45, 46)
#define FA_WGMMA_NEXT_88(F, ...) F(__VA_ARGS__, 44, 45, 46, 47, 48, 49, 50)
#define FA_WGMMA_NEXT_96(F, ...) F(__VA_ARGS__, 48, 49, 50, 51, 52, 53, 54)
#define FA_WGMMA_NEXT_104(F, ...) F(__VA_ARGS__, 52, 53, 54, 55, 56, 57, 58)
#define FA_WGMMA_NEXT_112(F, ...) F(__VA_ARGS__, 56, 57, 58, 59, 60, 61, 62)
#define FA_WGMMA_NEXT_120(F, ...) F(__VA_ARGS__, 60, 61, 62, 63, 64, 65, 66)
#define FA_WGMMA_NEXT_128(F, ...) F(__VA_ARGS__, 64, 65, 66, 67, 68, 69, 70)
#define FA_WGMMA_NEXT_136(F, ...) F(__VA_ARGS__, 68, 69, 70, 71, 72, 73, 74)
#define FA_WGMMA_NEXT_144(F, ...) F(__VA_ARGS__, 72, 73, 74, 75, 76, 77, 78)
#define FA_WGMMA_NEXT_152(F, ...) F(__VA_ARGS__, 76, 77, 78, 79, 80, 81, 82)
#define FA_WGMMA_NEXT_160(F, ...) F(__VA_ARGS__, 80, 81, 82, 83, 84, 85, 86)
#define FA_WGMMA_NEXT_168(F, ...) F(__VA_ARGS__, 84, 85, 86, 87, 88, 89, 90)
#define FA_WGMMA_NEXT_176(F, ...) F(__VA_ARGS__, 88, 89, 90, 91, 92, 93, 94)
#define FA_WGMMA_NEXT_184(F, ...) F(__VA_ARGS__, 92, 93, 94, 95, 96, 97, 98)
#define FA_WGMMA_NEXT_192(F, ...) F(__VA_ARGS__, 96, 97, 98, 99, 100, 101, 102)
#define FA_WGMMA_NEXT_200(F, ...) F(__VA_ARGS__, 100, 101, 102, 103, 104, 105, 106)
#define FA_WGMMA_NEXT_208(F, ...) F(__VA_ARGS__, 104, 105, 106, 107, 108, 109, 110)
#define FA_WGMMA_NEXT_216(F, ...) F(__VA_ARGS__, 108, 109, 110, 111, 112, 113, 114)
#define FA_WGMMA_NEXT_224(F, ...) F(__VA_ARGS__, 112, 113, 114, 115, 116, 117, 118)
#define FA_WGMMA_NEXT_232(F, ...) F(__VA_ARGS__, 116, 117, 118, 119, 120, 121, 122)
#define FA_WGMMA_NEXT_240(F, ...) F(__VA_ARGS__, 120, 121, 122, 123, 124, 125, 126)
#define FA_WGMMA_NEXT_248(F, ...) F(__VA_ARGS__, 124, 125, 126, 127, 128, 129, 130)
#define FA_WGMMA_NEXT_256(F, ...) F(__VA_ARGS__, 128, 129, 130, 131, 132, 133, 134)

#define FA_WGMMA_TEXT(i) "%" #i
#define FA_WGMMA_OPERAND(i) "+f"(d[i])
#define FA_WGMMA_TEXT_SEP() ", "
#define FA_WGMMA_COMMA() ,

// SS: D (+)= A·B, A and B through descriptors. Operands after the accumulators: desc_a, desc_b,
// scale-d (0: D = A·B, else D += A·B), trans-a, trans-b.
#define FA_WGMMA_SS_ASM(N, TYPE, a, b, scale, ta, tb, unused5, unused6)                                       \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #scale ", 0;\n"                                           \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " {"                           \
               FA_WGMMA_ACC_##N(FA_WGMMA_TEXT, FA_WGMMA_TEXT_SEP)                                             \
               "}, %" #a ", %" #b ", p, 1, 1, %" #ta ", %" #tb ";\n}\n"                                       \
               : FA_WGMMA_ACC_##N(FA_WGMMA_OPERAND, FA_WGMMA_COMMA)                                           \
               : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)), "n"(static_cast<int>(kMajorA)), \
                 "n"(static_cast<int>(kMajorB)))

// RS: D (+)= A·B, A from registers. Operands after the accumulators: a[0..3], desc_b, scale-d, trans-b.
#define FA_WGMMA_RS_ASM(N, TYPE, a0, a1, a2, a3, b, scale, tb)                                                 \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #scale ", 0;\n"                                           \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " {"                           \
               FA_WGMMA_ACC_##N(FA_WGMMA_TEXT, FA_WGMMA_TEXT_SEP)                                             \
               "}, {%" #a0 ", %" #a1 ", %" #a2 ", %" #a3 "}, %" #b ", p, 1, 1, %" #tb ";\n}\n"                \
               : FA_WGMMA_ACC_##N(FA_WGMMA_OPERAND, FA_WGMMA_COMMA)                                           \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)), \
                 "n"(static_cast<int>(kMajorB)))

// One `if constexpr` arm per N, each with the asm of both input types.
#define FA_WGMMA_CASE(FORM, N)                             \
  if constexpr (kN == N) {                                 \
    if constexpr (std::is_same_v<Tag, BF16>) {             \
      FA_WGMMA_NEXT_##N(FA_WGMMA_##FORM##_ASM, N, "bf16"); \
    } else {                                               \
      FA_WGMMA_NEXT_##N(FA_WGMMA_##FORM##_ASM, N, "f16");  \
    }                                                      \
  }
#define FA_WGMMA_ALL_N(FORM)                                                                          \
  FA_WGMMA_CASE(FORM, 8) FA_WGMMA_CASE(FORM, 16) FA_WGMMA_CASE(FORM, 24) FA_WGMMA_CASE(FORM, 32)      \
  FA_WGMMA_CASE(FORM, 40) FA_WGMMA_CASE(FORM, 48) FA_WGMMA_CASE(FORM, 56) FA_WGMMA_CASE(FORM, 64)     \
  FA_WGMMA_CASE(FORM, 72) FA_WGMMA_CASE(FORM, 80) FA_WGMMA_CASE(FORM, 88) FA_WGMMA_CASE(FORM, 96)     \
  FA_WGMMA_CASE(FORM, 104) FA_WGMMA_CASE(FORM, 112) FA_WGMMA_CASE(FORM, 120) FA_WGMMA_CASE(FORM, 128) \
  FA_WGMMA_CASE(FORM, 136) FA_WGMMA_CASE(FORM, 144) FA_WGMMA_CASE(FORM, 152) FA_WGMMA_CASE(FORM, 160) \
  FA_WGMMA_CASE(FORM, 168) FA_WGMMA_CASE(FORM, 176) FA_WGMMA_CASE(FORM, 184) FA_WGMMA_CASE(FORM, 192) \
  FA_WGMMA_CASE(FORM, 200) FA_WGMMA_CASE(FORM, 208) FA_WGMMA_CASE(FORM, 216) FA_WGMMA_CASE(FORM, 224) \
  FA_WGMMA_CASE(FORM, 232) FA_WGMMA_CASE(FORM, 240) FA_WGMMA_CASE(FORM, 248) FA_WGMMA_CASE(FORM, 256)

// D (64×kN) = A·B + (accumulate ? D : 0); A and B in shared memory through desc_a, desc_b (their
// layouts kMajorA, kMajorB); Tag F16 or BF16 (both operands).
template <int kN, class Tag, Major kMajorA = Major::K, Major kMajorB = Major::K>
__device__ __forceinline__ void wgmma_ss(float (&d)[kN / 2], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  static_assert(kN % 8 == 0 && kN >= 8 && kN <= 256, "wgmma_ss: N a multiple of 8 in [8, 256]");
#if FLASHATTN_PTX_SM90A
  FA_WGMMA_ALL_N(SS)
#else
  FLASHATTN_PTX_UNSUPPORTED("wgmma needs sm_90a");
#endif
}

// D (64×kN) = A·B + (accumulate ? D : 0); A from registers (the fragment above), B in shared memory
// through desc_b (layout kMajorB).
template <int kN, class Tag, Major kMajorB = Major::K>
__device__ __forceinline__ void wgmma_rs(float (&d)[kN / 2], const uint32_t (&a)[4], uint64_t desc_b, bool accumulate) {
  static_assert(kN % 8 == 0 && kN >= 8 && kN <= 256, "wgmma_rs: N a multiple of 8 in [8, 256]");
#if FLASHATTN_PTX_SM90A
  FA_WGMMA_ALL_N(RS)
#else
  FLASHATTN_PTX_UNSUPPORTED("wgmma needs sm_90a");
#endif
}

}  // namespace flashattn::ptx
