// A consumer warpgroup of the sm90 forward: 64 query rows of the tile, O in registers across every
// key block. Per block, the algorithm's step (S = Q·K_nᵀ, score transform, mask, online softmax,
// O += P·V_n) with two overlaps (FlashAttention-3's):
//
//   - Intra-warpgroup: S(i) is issued before P(i−1)·V_{i−1}, and the softmax of S(i) runs while that
//     product is still in flight; only the rescale of O by exp(m_old − m_new) waits for it:
//
//       S(0) = Q·K_0ᵀ; wait; softmax → P(0)
//       for i ≥ 1:  issue S(i) = Q·K_iᵀ; issue O += P(i−1)·V_{i−1}
//                   wait S(i) → release K_i; softmax(S(i)) → m, ℓ, rescale r
//                   wait O    → release V_{i−1}; O *= r; P(i) = S(i) packed
//       O += P(n−1)·V_{n−1}; 1/ℓ and LSE meanwhile; wait; release V_{n−1}
//
//   - Ping-pong between the consumer warpgroups: a turn barrier per warpgroup makes them take turns
//     issuing that pair of products, so one warpgroup's exp2 (MUFU) runs under the others' matmuls.
//     Consumer 0 opens its own first turn; each one, after issuing, opens the next one's turn. The
//     last consumer does not open a turn after the last pair (no round follows), so no barrier is
//     left half arrived.
//
// The wgmma accumulator of one warp has the m16n8 C layout of mma.sync (ptx/wgmma.cuh), so the
// fragment-level score transform, mask and online softmax of the sm80 kernels (sm80/hooks.cuh,
// sm80/softmax.cuh, namespace flashattn::cuda) apply unchanged, on the accumulator viewed as
// [1][N / 8][4]; and P goes from the S accumulator to the A operand of P·V with no shuffle.
#pragma once

#include "cuda/ptx/barrier.cuh"
#include "cuda/ptx/fence.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/wgmma.cuh"
#include "cuda/sm80/hooks.cuh"
#include "cuda/sm80/softmax.cuh"
#include "cuda/sm90/fwd_tile.cuh"
#include "cuda/sm90/swizzled_tile.cuh"

namespace flashattn::cuda::sm90 {

// The accumulator of a wgmma of N columns (N/2 floats) seen as mma C tiles [1][N/8][4].
template <int R>
__device__ __forceinline__ float (&as_c_tiles(float (&d)[R]))[1][R / 4][4] {
  return *reinterpret_cast<float(*)[1][R / 4][4]>(&d);
}

// What one consumer warpgroup carries through the key loop.
template <class Traits>
struct ConsumerState {
  float o[Traits::kD / 2];                 // O accumulator, rows 16·warp + {g, g + 8}
  float s[Traits::kBlockN / 2];            // S of the current block, then its probabilities
  uint32_t p[Traits::kBlockN / 16][4];     // P of the previous block: the A fragments of P·V
  OnlineSoftmax<1> softmax;
  float inv[1][2], lse[1][2];              // 1/ℓ and the LSE of the two rows (Consumer::kRowScalesUnderLastProduct)

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int i = 0; i < Traits::kD / 2; ++i) o[i] = 0.f;
    softmax.init();
  }
};

template <class Traits>
struct Consumer {
  using Tag = typename Traits::Tag;
  static constexpr ptx::Swizzle kSw = ptx::Swizzle::b128;
  // The softmax's row max and sum as four interleaved chains (OnlineSoftmax::exponentiate) from
  // D = 128 up, where one chain's latency is exposed (D = 256 has no ping-pong to hide it); one chain
  // at D = 64, which is issue-bound: there the combining instructions cost more than the latency
  // they hide (measured: docs/kernels-sm90-forward.md).
  static constexpr int kSoftmaxChains = Traits::kD >= 128 ? 4 : 1;
  // 1/ℓ and the LSE computed under the tile's last P·V (FlashAttention-3's order) from D = 128 up,
  // else in the epilogue (OnlineSoftmax::finalize). Measured on the H200 against the epilogue's
  // finalize, same process: D = 128 +0.2–0.5 %, D = 256 ±0.5 %, D = 64 −0.5 to −1.4 % (its key loop
  // too: the three consumers' 160 registers), so D = 64 keeps finalize.
  static constexpr bool kRowScalesUnderLastProduct = Traits::kD >= 128;

  const FwdSmem<Traits>& sm;
  const FwdTile& t;
  ScoreTransform scores;
  int wg;    // consumer index 0 .. kConsumers − 1
  int row0;  // this warp's first row within the block
  int lane;

  // S = Q·K_stageᵀ (this warpgroup's 64 rows × block_n keys), issued, not waited for.
  __device__ __forceinline__ void issue_scores(ConsumerState<Traits>& c, int stage) const {
    const uint64_t desc_q = ptx::wgmma_desc_k_major(sm.q + wg * kWarpgroupRows * kSwizzleRowBytes, kSw);
    const uint64_t desc_k = ptx::wgmma_desc_k_major(sm.k_tile(stage), kSw);
    ptx::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < Traits::kD / 16; ++ks) {
      ptx::wgmma_ss<Traits::kBlockN, Tag>(c.s, ptx::wgmma_desc_advance(desc_q, k_step_bytes(ks, Traits::kQChunkBytes)),
                                          ptx::wgmma_desc_advance(desc_k, k_step_bytes(ks, Traits::kKVChunkBytes)),
                                          ks > 0);
    }
    ptx::wgmma_commit();
  }

  // O += P·V_stage, issued, not waited for. V is the MN-major B operand: k-step kk is 16 key rows
  // further into every chunk.
  __device__ __forceinline__ void issue_values(ConsumerState<Traits>& c, int stage) const {
    const uint64_t desc_v = ptx::wgmma_desc_mn_major(sm.v_tile(stage), kSw, Traits::kKVChunkBytes);
    ptx::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Traits::kBlockN / 16; ++kk) {
      ptx::wgmma_rs<Traits::kD, Tag, ptx::Major::MN>(
          c.o, c.p[kk], ptx::wgmma_desc_advance(desc_v, kk * 16 * kSwizzleRowBytes), true);
    }
    ptx::wgmma_commit();
  }

  // Score transform, mask (only where the tile straddles a mask edge or the sequence end), online
  // softmax: S becomes P in place; `rescale` is what O must still be multiplied by.
  __device__ __forceinline__ void softmax_block(ConsumerState<Traits>& c, int n, float (&rescale)[1][2]) const {
    auto& s_tiles = as_c_tiles(c.s);
    transform_scores(s_tiles, scores);
    if (t.mask.tile_needs_mask(t.m0, Traits::kBlockM, n * Traits::kBlockN, Traits::kBlockN)) {
      // Causal tiles (no left edge) test one edge per entry: the range's two compares were ~130 of
      // the ~2 000 instructions per warp of a short causal tile at D = 64. Not in the tall tile,
      // where the second copy of the mask made ptxas spill 72 bytes.
      if (!Traits::kTall && t.mask.left < 0) {
        mask_accumulator<false>(s_tiles, t.mask, t.m0 + row0, n * Traits::kBlockN, lane);
      } else {
        mask_accumulator(s_tiles, t.mask, t.m0 + row0, n * Traits::kBlockN, lane);
      }
    }
    c.softmax.template exponentiate<kSoftmaxChains>(s_tiles, scores.exp_mult, rescale);
  }

  // P from the S accumulator: columns 16kk .. 16kk + 15 are the A fragment of k-step kk.
  __device__ __forceinline__ static void pack_probabilities(ConsumerState<Traits>& c) {
#pragma unroll
    for (int kk = 0; kk < Traits::kBlockN / 16; ++kk) {
#pragma unroll
      for (int r = 0; r < 4; ++r) c.p[kk][r] = ptx::pack2<Tag>(c.s[8 * kk + 2 * r], c.s[8 * kk + 2 * r + 1]);
    }
  }

  // One arrival per consumer warp: its part of the products that read the stage is complete.
  __device__ __forceinline__ void release(uint32_t empty_bar) const {
    if (lane == 0) ptx::mbarrier_arrive(empty_bar);
  }

  __device__ __forceinline__ void wait_turn() const {
    if constexpr (Traits::kPingPong) ptx::named_barrier_sync(kTurnBarrier + wg, 2 * kWarpgroupThreads);
  }
  __device__ __forceinline__ void pass_turn(bool last_round) const {
    if constexpr (Traits::kPingPong) {
      if (wg + 1 < Traits::kConsumers || !last_round) {
        ptx::named_barrier_arrive(kTurnBarrier + (wg + 1) % Traits::kConsumers, 2 * kWarpgroupThreads);
      }
    }
  }

  // Varlen: V rows kept ≥ seqlen_k of the first block loaded (the only partial one) are zeroed in
  // shared memory before the first P·V, since P = 0 there does not help (0 · NaN = NaN). Whole
  // 128-byte rows of each 64-column chunk, so the swizzle (a permutation within a row) does not
  // matter; every consumer thread takes a share, then fence.proxy.async (generic stores before
  // wgmma's reads) and a barrier of the consumers.
  __device__ __forceinline__ void zero_v_tail(int tid_consumers, int stage) const {
    // swizzled_tile.cuh's zero_tile_rows, written out: called here, the kernels' SASS changed at
    // D = 128 and 256 (2026-12-05; this kernel is measured, so its machine code stays).
    constexpr int kUnitsPerRow = kSwizzleRowBytes / 16;
    const int tail_rows = t.seq.seqlen_k - t.key_block(0) * Traits::kBlockN;
    unsigned char* v_tile = sm.base + Traits::kVOffset + stage * Traits::kKVBytes;
    const int units = (Traits::kBlockN - tail_rows) * kUnitsPerRow;
    for (int u = tid_consumers; u < Traits::kChunks * units; u += Traits::kConsumerThreads) {
      const int ch = u / units, r = tail_rows + (u % units) / kUnitsPerRow, w = u % kUnitsPerRow;
      *reinterpret_cast<uint4*>(v_tile + ch * Traits::kKVChunkBytes + r * kSwizzleRowBytes + 16 * w) =
          make_uint4(0, 0, 0, 0);
    }
    ptx::fence_proxy_async_shared_cta();
    ptx::named_barrier_sync(kVTailBarrier, Traits::kConsumerThreads);
  }

  // The key loop of a tile that loads (t.loads()); leaves O unnormalized and the softmax state in
  // `c` (the epilogue finishes them). Q is released after the tile's last Q·Kᵀ.
  __device__ __forceinline__ void attend(ConsumerState<Traits>& c, const TileCursor& at, int tid_consumers) const {
    const Ring<Traits::kStages> ring{at.loads};
    const int n_blocks = t.n_blocks;
    if (Traits::kPingPong && wg == 0 && n_blocks > 1) {
      ptx::named_barrier_arrive(kTurnBarrier, 2 * kWarpgroupThreads);  // consumer 0 opens round 1
    }

    ptx::mbarrier_wait(sm.q_full(), at.q_tiles & 1);
    ptx::mbarrier_wait(sm.k_full(ring.stage(0)), ring.full_parity(0));
    issue_scores(c, ring.stage(0));
    ptx::wgmma_wait<0>();
    ptx::wgmma_fence_operand(c.s);
    release(sm.k_empty(ring.stage(0)));
    if (n_blocks == 1) release(sm.q_empty());
    float rescale[1][2];
    softmax_block(c, t.key_block(0), rescale);  // O is 0: nothing to rescale
    pack_probabilities(c);
    if (t.zero_v_tail) {
      ptx::mbarrier_wait(sm.v_full(ring.stage(0)), ring.full_parity(0));
      zero_v_tail(tid_consumers, ring.stage(0));
    }

    for (int i = 1; i < n_blocks; ++i) {
      const int prev = i - 1;
      ptx::mbarrier_wait(sm.k_full(ring.stage(i)), ring.full_parity(i));
      wait_turn();
      issue_scores(c, ring.stage(i));
      ptx::mbarrier_wait(sm.v_full(ring.stage(prev)), ring.full_parity(prev));
      issue_values(c, ring.stage(prev));
      pass_turn(i == n_blocks - 1);

      ptx::wgmma_wait<1>();  // S(i) is done (groups complete in order), P·V may still run
      ptx::wgmma_fence_operand(c.s);
      release(sm.k_empty(ring.stage(i)));
      if (i == n_blocks - 1) release(sm.q_empty());
      softmax_block(c, t.key_block(i), rescale);

      ptx::wgmma_wait<0>();
      ptx::wgmma_fence_operand(c.o);
      release(sm.v_empty(ring.stage(prev)));
      OnlineSoftmax<1>::rescale_rows(as_c_tiles(c.o), rescale);
      pack_probabilities(c);
    }

    const int last = n_blocks - 1;
    ptx::mbarrier_wait(sm.v_full(ring.stage(last)), ring.full_parity(last));
    ptx::wgmma_fence_operand(c.o);
    issue_values(c, ring.stage(last));
    if constexpr (kRowScalesUnderLastProduct) c.softmax.row_scales(scores.exp_mult, c.inv, c.lse);
    ptx::wgmma_wait<0>();
    ptx::wgmma_fence_operand(c.o);
    release(sm.v_empty(ring.stage(last)));
  }
};

}  // namespace flashattn::cuda::sm90
