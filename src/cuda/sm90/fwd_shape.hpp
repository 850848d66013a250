// The sm90 forward's tile shape per head-dim instance: one table, read by the host (plan, tensor
// maps, grid, shared memory, threads) and by the kernel (fwd_kernel.cuh), so the two cannot disagree.
//
// A CTA is one producer warpgroup (one thread issues every TMA load) and `consumers` warpgroups of
// 64 query rows each (wgmma's M), so block_m = 64·consumers. Shared memory holds Q (block_m × D)
// and a ring of `stages` K tiles and as many V tiles (block_n × D), all 16-bit, in the TMA 128B
// swizzle: chunks of 64 columns (128 bytes per row), each chunk the tile's rows one after the other.
// The epilogue stages each warpgroup's O in its own rows of Q (its last Q·Kᵀ is done by then).
#pragma once

#include <cstddef>

namespace flashattn::cuda::sm90 {

inline constexpr int kWarpgroupThreads = 128;
inline constexpr int kWarpgroupRows = 64;        // wgmma's M: the rows one consumer warpgroup owns
inline constexpr int kSwizzleCols = 64;          // 16-bit columns in one 128B-swizzle row (a chunk)
inline constexpr int kSwizzleRowBytes = 128;
inline constexpr int kSwizzleAtomBytes = 1024;   // 8 rows of 128 B: swizzled tiles start on it

struct FwdShape {
  int head_dim;   // D: the instance's (padded) head dim for Q·Kᵀ and P·V, a multiple of 64
  int consumers;  // consumer warpgroups (2 or 3)
  int block_n;    // keys per K/V block
  int stages;     // depth of the K/V ring

  constexpr int block_m() const { return consumers * kWarpgroupRows; }
  constexpr int threads() const { return (consumers + 1) * kWarpgroupThreads; }
  constexpr int chunks() const { return head_dim / kSwizzleCols; }
  constexpr std::size_t q_bytes() const { return std::size_t(block_m()) * head_dim * 2; }
  constexpr std::size_t kv_tile_bytes() const { return std::size_t(block_n) * head_dim * 2; }
  // Dynamic shared memory: Q, the K and V stages, and the slack to align the base to the swizzle atom.
  constexpr std::size_t smem_bytes() const {
    return kSwizzleAtomBytes + q_bytes() + 2 * std::size_t(stages) * kv_tile_bytes();
  }
  // Registers per thread after setmaxnreg: the producer gives its share to the consumers, which
  // hold O (D/2 floats), S (block_n/2) and P (block_n/4) per thread. The producer keeps 32 (its tile
  // loop with the scheduler spilled at FlashAttention-3's 24); the consumers take what that leaves
  // of the launch's pool: two consumers 232 (384 threads × 168 at launch − 128 × 32, over 256 threads,
  // a multiple of 8), three 160 (512 × 128 − 128 × 32 over 384).
  constexpr int producer_registers() const { return 32; }
  constexpr int consumer_registers() const { return consumers == 2 ? 232 : 160; }
};

// FlashAttention-3's tiles, measured there. D = 64: three consumers (192 × 128: more math per K/V
// byte and per softmax than 128 × 128); with a mask two (128 × 128) unless the query sequences are
// long (`tall`, fwd_tall_tiles in fwd_launch.hpp): a 192-row tile's ragged last block wastes 12 % of
// the rows at 512 and 1k (measured −9 and −12 % causal on the H200), while from 2k on the taller tile
// wins (+1 % at 2k, +4 % at 4k, +11–12 % at 8k–16k). D = 128: two, 176-key blocks without a mask (fewer rounds
// of the fixed per-block costs: waits, turns, row reductions; S 88 + P 44 + O 64 registers; 208 KB),
// 128 with one (the diagonal block is cut anyway). D = 256: two with 80-key blocks (O's 128 floats
// per thread beside S stay within 240 registers; 225 KB), 64 with a mask (80 spills a word there).
// D = 192 (also hdim_qk 192 with hdim_v 128): 128 × 112 with or without a mask (FlashAttention-3's:
// Q 48 KB + 2 × (42 + 42) KB = 217 KB; O 96 + S 56 + P 28 registers).
constexpr FwdShape fwd_shape(int head_dim, bool masked, bool tall = false) {
  return head_dim <= 64    ? FwdShape{head_dim, masked && !tall ? 2 : 3, 128, 2}
         : head_dim <= 128 ? FwdShape{head_dim, 2, masked ? 128 : 176, 2}
         : head_dim <= 192 ? FwdShape{head_dim, 2, 112, 2}
                           : FwdShape{head_dim, 2, masked ? 64 : 80, 2};
}

// The head dims the sm90 forward has instances for (sm90.cmake compiles those of FLASHATTN_HEADDIMS).
// 96 has none: the 128B-swizzled tiles are made of 64-column chunks, so it rounds up to 128.
constexpr bool is_fwd_head_dim(int d) { return d == 64 || d == 128 || d == 192 || d == 256; }

// The instances with a paged kernel (fwd_tile.cuh's kPaged): not D = 192, whose 112-key blocks take
// pages of 16 and 112 keys only (two more kernels for that); the sm80 family reads its pages.
constexpr bool has_paged_fwd(int d) { return d != 192; }

}  // namespace flashattn::cuda::sm90
