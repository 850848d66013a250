// What the sm90 backward's kernels share (bwd_kernel.cuh: head dims 64 and 128; bwd_kernel_wide.cuh:
// 256): the shared-memory layout's accessors, the CTA's key block and the steps it walks, the grid
// order, the elementwise part of a step (P, dS, the soft cap's slope), the loads of a step and the
// deterministic mode's dQ turns, the dQ additions and the dK/dV stores. A kernel's Traits is a
// BwdLayout (its tile and shared memory) plus what the kernel adds.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/common/last_part.cuh"
#include "cuda/common/mask.cuh"
#include "cuda/common/scores.cuh"
#include "cuda/common/seqlen.cuh"
#include "cuda/ptx/barrier.cuh"
#include "cuda/ptx/fence.cuh"
#include "cuda/ptx/ldmatrix.cuh"
#include "cuda/ptx/globaltimer.cuh"
#include "cuda/ptx/bulk_copy.cuh"
#include "cuda/ptx/ld_acquire.cuh"
#include "cuda/ptx/math.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/red.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/ptx/wgmma.cuh"
#include "cuda/sm80/bwd_params.cuh"
#include "cuda/sm90/bwd_grid_order.cuh"
#include "cuda/sm90/fwd_shape.hpp"
#include "cuda/sm90/swizzled_tile.cuh"

namespace flashattn::cuda::sm90 {

using sm80::BwdKernelParams;

// The named barriers (0 is __syncthreads): both warpgroups' dSᵀ are stored; a varlen step's Q and dO
// rows past the sequence are zeroed.
inline constexpr uint32_t kDsBarrier = 1;
inline constexpr uint32_t kTailBarrier = 2;

// The tile of a kernel and its shared memory, every tile on a swizzle atom: K and V (kBlockN keys),
// kStages stages of Q and dO (kBlockM query rows), two [key][query] tiles (dSᵀ double-buffered, or
// Pᵀ and dSᵀ), then LSE·log2e and D per stage. Rows are 64-column chunks of 128 bytes; a [key][query]
// tile's chunks hold 64 queries each (kDsChunkBytes apart).
template <class TagT, int kHeadDim, int kKeys, int kStageCount, int kQueryRows = 64>
struct BwdLayout {
  using Tag = TagT;
  static constexpr int kD = kHeadDim;
  static constexpr int kBlockN = kKeys;        // keys per CTA
  static constexpr int kBlockM = kQueryRows;   // query rows per step
  static_assert(kBlockM % kSwizzleCols == 0, "a step's queries are whole 64-query chunks of the [key][query] tiles");
  static constexpr int kThreads = 2 * kWarpgroupThreads;
  static constexpr int kStages = kStageCount;
  static constexpr int kChunks = kD / kSwizzleCols;
  static constexpr uint32_t kKVChunkBytes = kBlockN * kSwizzleRowBytes;
  static constexpr uint32_t kKVBytes = kChunks * kKVChunkBytes;
  static constexpr uint32_t kQChunkBytes = kBlockM * kSwizzleRowBytes;
  static constexpr uint32_t kQBytes = kChunks * kQChunkBytes;
  static constexpr uint32_t kDsChunkBytes = kBlockN * kSwizzleRowBytes;  // [key][64 queries]: one 128-byte row a key
  static constexpr uint32_t kDsBytes = kBlockM / kSwizzleCols * kDsChunkBytes;
  static constexpr uint32_t kK = 0, kV = kKVBytes, kQ = 2 * kKVBytes;
  static constexpr uint32_t kDO = kQ + kStages * kQBytes;
  static constexpr uint32_t kDS = kDO + kStages * kQBytes;
  static constexpr uint32_t kRowScalars = kDS + 2 * kDsBytes;
  static constexpr uint32_t kSmemBytes = kRowScalars + kStages * 2 * kBlockM * 4 + kSwizzleAtomBytes;
  static_assert(kSmemBytes <= 227 * 1024);
};

template <class Traits>
struct BwdSmem {
  uint32_t base;            // shared-window address, on a swizzle atom
  unsigned char* generic;   // the same byte, as a generic address
  float* row_scalars;
  uint32_t bars;  // kv_full, then q_full per stage

  __device__ uint32_t k() const { return base + Traits::kK; }
  __device__ uint32_t v() const { return base + Traits::kV; }
  __device__ uint32_t q(int s) const { return base + Traits::kQ + s * Traits::kQBytes; }
  __device__ uint32_t dout(int s) const { return base + Traits::kDO + s * Traits::kQBytes; }
  __device__ uint32_t ds(int b) const { return base + Traits::kDS + b * Traits::kDsBytes; }
  __device__ float* lse(int s) const { return row_scalars + s * 2 * Traits::kBlockM; }
  __device__ float* dsum(int s) const { return lse(s) + Traits::kBlockM; }
  // Stage s's LSE·log2e rows, then its D rows, as a shared-window address (the bulk copies' target).
  __device__ uint32_t row_scalars_at(int s) const { return base + Traits::kRowScalars + s * 2 * Traits::kBlockM * 4; }
  __device__ uint32_t kv_full() const { return bars; }
  __device__ uint32_t q_full(int s) const { return bars + 8 * (1 + s); }

  // The layout over the kernel's dynamic shared memory (its start rounded up to a swizzle atom: the
  // traits' kSmemBytes hold that slack) and its barrier array (1 + kStages mbarriers).
  __device__ static BwdSmem over(unsigned char* smem_raw, uint64_t* barriers) {
    const uint32_t raw = ptx::smem_addr(smem_raw);
    const uint32_t base = (raw + kSwizzleAtomBytes - 1) / kSwizzleAtomBytes * kSwizzleAtomBytes;
    unsigned char* generic = smem_raw + (base - raw);
    return {base, generic, reinterpret_cast<float*>(generic + Traits::kRowScalars), ptx::smem_addr(barriers)};
  }
};

// One step of a key block's walk: query head `head`, the query block at row m0.
struct BwdStep {
  int head, m0;
};

// The CTA's key block and the steps it walks: query blocks [m_begin, m_begin + m_count) of each of
// the group's query heads, head-major; a key block in parts (the kernels' kParts instances, the plan's
// bwd_parts) walks those of its part's query heads only, from query head head0 on, and adds its dK
// and dV into the key block's fp32 sums (add_key_side_part).
struct BwdKeyBlock {
  int batch, head_kv, n0;
  SeqLens seq;
  Mask mask;
  int m_begin, m_count, head0, steps;  // head0: the first query head walked
  int64_t ws_row0;     // the sequence's first workspace row (bwd_params.cuh)
  bool varlen;
  int tma_batch;       // TMA coordinates: varlen rows are packed rows of the one "batch" 0
  int q_row0, k_row0;  // the sequence's first row in the maps (varlen: cu_seqlens; the plan keeps them < 2^31)

  // Whether the CTA's keys exist: past a varlen sequence's end there is nothing to compute or write.
  __device__ bool has_keys() const { return n0 < seq.seqlen_k; }

  // Step k's query head and first query row: divided out of k where a walk starts, then carried from
  // step to step (after()): ncu had the division at 4-5 % of the D = 64 kernel's stall samples when
  // every step divided.
  __device__ BwdStep step(int k, int bm) const { return {head0 + k / m_count, (m_begin + k % m_count) * bm}; }
  __device__ BwdStep after(BwdStep s, int bm) const {
    s.m0 += bm;
    if (s.m0 == (m_begin + m_count) * bm) {
      s.m0 = m_begin * bm;
      ++s.head;
    }
    return s;
  }
  // Workspace row (of all heads) of the step's first query row.
  __device__ int64_t ws_row(const BwdKernelParams& p, BwdStep s) const {
    return int64_t{s.head} * p.ws_rows + ws_row0 + s.m0;
  }
};

// The CTA's key block and (kv head, sequence) in the grid's order (bwd_grid_order.cuh), and with
// parts its part: blockIdx.y, which walks part_heads query heads of the group (one more for the first
// part_heads_extra parts), so that every part of a key block has the same blockIdx.x. (The parts'
// heads come from those two parameters rather than from a division by the part count: ptxas keeps
// the CTA's coordinates in uniform registers then, and the D = 64 walk fits its 255 registers.)
template <class Traits, bool kParts>
__device__ __forceinline__ BwdKeyBlock bwd_key_block(const BwdKernelParams& p) {
  BwdKeyBlock b;
  const BwdGridCell cell = bwd_grid_cell(static_cast<int>(blockIdx.x), p.key_blocks_outer, p.order_pairs,
                                         p.num_n_blocks, p.heads_kv * p.batch);
  int n_block = cell.n_block;
  const int pair = cell.pair;
  // Deterministic mode under a right-bounded mask: the key blocks add into a query tile's dQ from
  // the last to the first, so the grid runs them in that order (BwdLoads::wait_dq_turn). A mask with
  // only a left edge: the last key blocks are seen by the most query rows, so they start first.
  const bool right_bounded = p.window_right >= 0;
  if (p.deterministic ? right_bounded : p.key_blocks_outer && !right_bounded) n_block = p.num_n_blocks - 1 - n_block;
  b.head_kv = pair % p.heads_kv;
  b.batch = pair / p.heads_kv;
  b.n0 = n_block * Traits::kBlockN;
  b.varlen = p.cu_seqlens_q != nullptr;
  b.seq = seq_lens(b.batch, p.cu_seqlens_q, p.cu_seqlens_k, p.seqlen_q, p.seqlen_k);
  b.mask = Mask{b.seq.seqlen_q, b.seq.seqlen_k, p.window_left, p.window_right};
  b.m_begin = b.mask.m_block_begin(b.n0, Traits::kBlockM);
  b.m_count = b.mask.m_block_count(b.n0, Traits::kBlockN, Traits::kBlockM);
  b.head0 = b.head_kv * p.group;
  b.steps = b.m_count * p.group;
  if constexpr (kParts) {
    const BwdPartHeads heads = bwd_part_heads(static_cast<int>(blockIdx.y), p.part_heads, p.part_heads_extra);
    b.head0 += heads.first;
    b.steps = b.m_count * heads.count;
  }
  b.ws_row0 = sm80::ws_row_start(b.batch, b.seq.q_offset, b.varlen, p.seqlen_q, Traits::kBlockM);
  b.tma_batch = b.varlen ? 0 : b.batch;
  b.q_row0 = static_cast<int>(b.seq.q_offset);
  b.k_row0 = static_cast<int>(b.seq.k_offset);
  return b;
}

// The key block as the kernels' ends read it (store_key_tiles): in parts, its kv head found again
// from head0, so that the walk does not hold it (the D = 64 kernel's steps need 252 registers).
template <bool kParts>
__device__ __forceinline__ BwdKeyBlock key_block_after_walk(const BwdKeyBlock& kb, const BwdKernelParams& p) {
  BwdKeyBlock e = kb;
  if constexpr (kParts) e.head_kv = kb.head0 / p.group;
  return e;
}


// ---- the elementwise part of a step -------------------------------------------------------------
// A warp's part of the step's Sᵀ and dPᵀ accumulators (the wgmma fragment, ptx/wgmma.cuh): element
// 4j + e is key key0 + g (+8 for e ≥ 2) and query query0 + 8j + 2t (+1 for odd e), both relative to
// the key block and the step; lse and dsum are the step's LSE·log2e and D in shared memory.
struct BwdScoreTile {
  const float* lse;
  const float* dsum;
  const BwdKeyBlock& kb;
  int m0;       // the step's first query row
  bool masked;  // whether the tile straddles the mask or a sequence's end (Mask::tile_needs_mask)
  int key0, query0, g, t;

  __device__ int key(int e) const { return key0 + g + (e >= 2 ? 8 : 0); }
  __device__ int query(int j, int e) const { return query0 + 8 * j + 2 * t + (e & 1); }
  // The mask on this thread's elements, for a tile that needs it: of each of its two keys (rows e / 2
  // of the fragment: keys key(0) and key(2)) the visible queries, as the distances of the thread's
  // first query (query(0, 0)) past the first visible one and short of the end, so that element (j, e)
  // (query(0, 0) + 8j + (e & 1)) is visible iff after[e / 2] + 8j + (e & 1) ≥ 0 and
  // before[e / 2] − 8j − (e & 1) > 0: two compares with immediates per element. The callers branch
  // on `masked` once per tile: tested per element, as Mask::visible behind `masked &&`, it was a
  // branch around every exp2 on every tile (11 % of the D = 64 kernel's stall samples, in branch
  // resolving, without any mask).
  struct RowBounds {
    int after[2], before[2];
  };
  __device__ RowBounds row_bounds() const {
    RowBounds b;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int k = kb.n0 + key(2 * h), q = m0 + query(0, 0);
      b.after[h] = q - kb.mask.query_begin(k);
      b.before[h] = kb.mask.query_end(k) - q;
    }
    return b;
  }
  __device__ static float masked_score(float x, const RowBounds& b, int j, int e) {
    const int d = 8 * j + (e & 1);
    return b.after[e / 2] + d >= 0 && b.before[e / 2] - d > 0 ? x : kMaskedScore;
  }
  __device__ float2 pair(const float* row_scalars, int j) const {
    return *reinterpret_cast<const float2*>(row_scalars + query(j, 0));
  }

  // Pᵀ = exp2(Sᵀ·mult − LSE·log2e) in place of Sᵀ (mult = scale·log2e: plain and prescaled scores).
  template <int kFloats>
  __device__ __forceinline__ void probabilities(float (&s)[kFloats], float mult) const {
    RowBounds b{{1 << 20, 1 << 20}, {1 << 20, 1 << 20}};
    if (masked) b = row_bounds();
#pragma unroll
    for (int j = 0; j < kFloats / 4; ++j) {
      const float2 l = pair(lse, j);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[4 * j + e] = ptx::exp2_approx(masked_score(fmaf(s[4 * j + e], mult, -(e & 1 ? l.y : l.x)), b, j, e));
      }
    }
  }

  // dSᵀ = Pᵀ∘(dPᵀ − D) in place of dPᵀ.
  template <int kFloats>
  __device__ __forceinline__ void score_gradients(float (&dp)[kFloats], const float (&pr)[kFloats]) const {
#pragma unroll
    for (int j = 0; j < kFloats / 4; ++j) {
      const float2 d = pair(dsum, j);
#pragma unroll
      for (int e = 0; e < 4; ++e) dp[4 * j + e] = pr[4 * j + e] * (dp[4 * j + e] - (e & 1 ? d.y : d.x));
    }
  }

  // Sᵀ and dPᵀ issued (two wgmma groups, Sᵀ first) → Pᵀ in place of Sᵀ and dSᵀ in place of dPᵀ: P
  // while dPᵀ's product still runs; where the score transform's slope varies, both in one pass once
  // both are done.
  template <int kFloats>
  __device__ __forceinline__ void gradients_of_scores(float (&s)[kFloats], float (&dp)[kFloats],
                                                      const ScoreTransform& sc, float mult) const {
    if (score_slope_varies(sc)) {
      ptx::wgmma_wait<0>();
      ptx::wgmma_fence_operand(s);
      ptx::wgmma_fence_operand(dp);
      with_varying_slope(s, dp, sc);
    } else {
      ptx::wgmma_wait<1>();
      ptx::wgmma_fence_operand(s);
      probabilities(s, mult);
      ptx::wgmma_wait<0>();
      ptx::wgmma_fence_operand(dp);
      score_gradients(dp, s);
    }
  }

  // A transform whose slope varies (common/scores.cuh's sloped_score): Pᵀ = exp2(x − LSE·log2e) in
  // place of Sᵀ and dSᵀ = Pᵀ∘(dPᵀ − D)·slope in place of dPᵀ, in one pass once both products are
  // done (the slope from the same transform P is made of; the scale is applied to dK and dQ at the
  // end, as for plain scores).
  template <int kFloats>
  __device__ __forceinline__ void with_varying_slope(float (&s)[kFloats], float (&dp)[kFloats],
                                                     const ScoreTransform& sc) const {
    // A tile without the mask takes bounds that pass every element (one code path: soft-capped
    // calls are the slower kind anyway).
    RowBounds b{{1 << 20, 1 << 20}, {1 << 20, 1 << 20}};
    if (masked) b = row_bounds();
#pragma unroll
    for (int j = 0; j < kFloats / 4; ++j) {
      const float2 l = pair(lse, j), d = pair(dsum, j);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const SlopedScore t = sloped_score(s[4 * j + e], sc);
        const float pr = ptx::exp2_approx(masked_score(t.x - (e & 1 ? l.y : l.x), b, j, e));
        s[4 * j + e] = pr;
        dp[4 * j + e] = pr * (dp[4 * j + e] - (e & 1 ? d.y : d.x)) * t.slope;
      }
    }
  }
};

// A warp's fragment of Pᵀ or dSᵀ (kCols queries: its accumulator, elements as `frag` maps them),
// converted, into a 128B-swizzled [key][query] tile of 64-query chunks (kChunkBytes apart; a key's
// row of a chunk is 128 bytes, ptx::swizzle_128b_offset): the A operand of the products that read it
// back through a descriptor. Columns 64c.. of the fragment go to chunk c, so the fragment starts at
// a chunk (query0 = 0) or fits in one (query0 % 64 + kCols ≤ 64).
template <class Tag, int kCols, uint32_t kChunkBytes>
__device__ __forceinline__ void store_fragment(const BwdScoreTile& frag, const float (&x)[kCols / 2],
                                               unsigned char* tile) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
#pragma unroll
    for (int j = 0; j < kCols / 8; ++j) {
      const int chunk = j / 8, in_chunk = j % 8;  // 8 columns per j
      *reinterpret_cast<uint32_t*>(tile + chunk * kChunkBytes +
                                   ptx::swizzle_128b_offset(frag.key(2 * half), 2 * frag.query(in_chunk, 0))) =
          ptx::pack2<Tag>(x[4 * j + 2 * half], x[4 * j + 2 * half + 1]);
    }
  }
}

// What every warp of the backward's CTA does alike: the loads of a step's Q and dO and of its LSE·log2e
// and D (thread 0), and the varlen tails zeroed in shared memory. The mainloops
// (bwd_kernel.cuh, bwd_kernel_wide.cuh) add their products to it.
template <class Traits>
struct BwdLoads {
  const BwdSmem<Traits>& sm;
  const BwdKernelParams& p;
  const CUtensorMap* tm_q;
  const CUtensorMap* tm_do;
  const BwdKeyBlock& kb;
  int tid;

  // Thread 0: step k's Q and dO boxes and its LSE·log2e and D rows (the workspace's, kBlockM floats
  // each from the step's workspace row: always inside the workspace, whose query tiles are whole)
  // into stage k % kStages, all on the stage's barrier. The rows by the copy engine too: read by
  // the threads into registers and stored, they made every warp wait on an L2 round trip per step
  // (ncu at D = 64: 7.6 % of the stall samples on the store).
  static constexpr uint32_t kRowBytes = Traits::kBlockM * 4;
  __device__ void load_step(int k, BwdStep at) const {
    const int s = k % Traits::kStages, head = at.head, m0 = at.m0;
    ptx::mbarrier_arrive_expect_tx(sm.q_full(s), 2 * Traits::kQBytes + 2 * kRowBytes);
#pragma unroll
    for (int c = 0; c < Traits::kChunks; ++c) {
      ptx::tma_load(sm.q(s) + c * Traits::kQChunkBytes, tm_q, sm.q_full(s), c * kSwizzleCols, kb.q_row0 + m0, head,
                    kb.tma_batch);
      ptx::tma_load(sm.dout(s) + c * Traits::kQChunkBytes, tm_do, sm.q_full(s), c * kSwizzleCols, kb.q_row0 + m0,
                    head, kb.tma_batch);
    }
    const int64_t row = kb.ws_row(p, at);
    ptx::bulk_load(sm.row_scalars_at(s), p.lse_log2 + row, kRowBytes, sm.q_full(s));
    ptx::bulk_load(sm.row_scalars_at(s) + kRowBytes, p.dsum + row, kRowBytes, sm.q_full(s));
  }
  // ---- the CTA's start and each step's ---------------------------------------------------------
  // Loads issued this many steps ahead (each kernel's ring has at least as many stages).
  static constexpr int kAhead = 2;
  static_assert(Traits::kStages >= kAhead);

  // The barriers initialized; K and V loaded (thread 0) and the first kAhead steps' Q, dO, LSE·log2e
  // and D; returns once K and V are in (with a varlen tail zeroed). Every thread calls it.
  __device__ void start(const CUtensorMap* tm_k, const CUtensorMap* tm_v) const {
    if (tid == 0) {
      ptx::mbarrier_init(sm.kv_full(), 1);
#pragma unroll
      for (int s = 0; s < Traits::kStages; ++s) ptx::mbarrier_init(sm.q_full(s), 1);
      ptx::fence_mbarrier_init();
    }
    __syncthreads();
    if (tid == 0 && kb.steps > 0) {
      ptx::mbarrier_arrive_expect_tx(sm.kv_full(), 2 * Traits::kKVBytes);
#pragma unroll
      for (int c = 0; c < Traits::kChunks; ++c) {
        ptx::tma_load(sm.k() + c * Traits::kKVChunkBytes, tm_k, sm.kv_full(), c * kSwizzleCols, kb.k_row0 + kb.n0,
                      kb.head_kv, kb.tma_batch);
        ptx::tma_load(sm.v() + c * Traits::kKVChunkBytes, tm_v, sm.kv_full(), c * kSwizzleCols, kb.k_row0 + kb.n0,
                      kb.head_kv, kb.tma_batch);
      }
      for (int k = 0; k < kAhead && k < kb.steps; ++k) load_step(k, kb.step(k, Traits::kBlockM));
    }
    __syncthreads();
    if (kb.steps > 0) {
      ptx::mbarrier_wait(sm.kv_full(), 0);
      zero_key_tail();
    }
  }

  // Step k's Q and dO are in shared memory (with a varlen tail zeroed).
  __device__ void wait_step(int k, BwdStep at) const {
    ptx::mbarrier_wait(sm.q_full(k % Traits::kStages), (k / Traits::kStages) & 1);
    zero_query_tail(k, at);
  }

  // The step's elementwise view for a warp whose fragment starts at key key0, query query0.
  __device__ BwdScoreTile score_tile(int k, BwdStep at, int key0, int query0, int g, int t) const {
    const int s = k % Traits::kStages, m0 = at.m0;
    return {sm.lse(s), sm.dsum(s), kb, m0, kb.mask.tile_needs_mask(m0, Traits::kBlockM, kb.n0, Traits::kBlockN),
            key0, query0, g, t};
  }
  // ---- deterministic mode: dQ added in a fixed key-block order per query tile ----------------------
  // sm80/bwd_dq.cuh's rule: counters[query head][query tile] (zeroed by the preprocess) counts the key
  // blocks that have added into the tile; a key block waits until it equals its place in the order
  // (ascending key blocks, descending under a right-bounded mask), adds, and after a barrier passes
  // the turn on with a release. Every key block a CTA waits for has a lower block index (the grid's
  // order, bwd_key_block), so it has started. A wait over kTurnTimeoutNs (far beyond any real one:
  // a whole chain of steps takes milliseconds) traps, an error instead of a hang.
  static constexpr uint64_t kTurnTimeoutNs = uint64_t{20} * 1000 * 1000 * 1000;

  __device__ int32_t* dq_counter(BwdStep at) const { return p.counters + kb.ws_row(p, at) / Traits::kBlockM; }

  // Thread 0: until the key blocks before this one have added into step k's query tile (the barrier
  // after it holds the others).
  __device__ void wait_dq_turn(BwdStep at) const {
    if (!p.deterministic || tid != 0) return;
    const int m0 = at.m0, n_block = kb.n0 / Traits::kBlockN;
    const int turn = p.window_right >= 0 ? kb.mask.last_n_block_visiting(m0, Traits::kBlockM, Traits::kBlockN) - n_block
                                         : n_block - kb.mask.n_block_begin(m0, Traits::kBlockN);
    const int32_t* counter = dq_counter(at);
    const uint64_t start = ptx::globaltimer_ns();
    while (ptx::ld_acquire_s32(counter) != turn) {
      if (ptx::globaltimer_ns() - start > kTurnTimeoutNs) __trap();
    }
  }
  // Thread 0, after the barrier that follows every thread's dQ additions of step k.
  __device__ void pass_dq_turn(BwdStep at) const {
    if (p.deterministic && tid == 0) ptx::red_release_add_s32(dq_counter(at), 1);
  }

  // Varlen: the rows a box loaded past the sequence (the next sequence's, or packed rows of none,
  // which may hold anything, NaN too) zeroed in shared memory: P = 0 and dS = 0 there do not keep
  // them out of the products (0 · NaN = NaN in P·dO, dS·Q, dS·K). Rows [first, rows) of each
  // 64-column chunk of the tile at `tile_offset`, by every thread; then fence.proxy.async (before
  // wgmma reads them) and a barrier.
  template <uint32_t kChunkBytes>
  __device__ void zero_rows(uint32_t tile_offset, int rows, int first) const {
    zero_tile_rows<Traits::kChunks, kChunkBytes, Traits::kThreads>(sm.generic + tile_offset, rows, first, tid);
  }
  // The K and V rows past seqlen_k (once, after they landed), before the first product.
  __device__ void zero_key_tail() const {
    const int first = kb.seq.seqlen_k - kb.n0;
    if (!kb.varlen || first >= Traits::kBlockN) return;
    zero_rows<Traits::kKVChunkBytes>(Traits::kK, Traits::kBlockN, first);
    zero_rows<Traits::kKVChunkBytes>(Traits::kV, Traits::kBlockN, first);
    ptx::fence_proxy_async_shared_cta();
    __syncthreads();
  }
  // The Q and dO rows of step k past seqlen_q (the sequence's last query block only).
  __device__ void zero_query_tail(int k, BwdStep at) const {
    const int first = kb.seq.seqlen_q - at.m0;
    if (!kb.varlen || first >= Traits::kBlockM) return;
    const int s = k % Traits::kStages;
    zero_rows<Traits::kQChunkBytes>(Traits::kQ + s * Traits::kQBytes, Traits::kBlockM, first);
    zero_rows<Traits::kQChunkBytes>(Traits::kDO + s * Traits::kQBytes, Traits::kBlockM, first);
    ptx::fence_proxy_async_shared_cta();
    ptx::named_barrier_sync(kTailBarrier, Traits::kThreads);
  }

};

// red.add of a warp's dQ fragment (rows row, row + 8 of the accumulator, kCols columns from col0 in
// pairs 8j + 2t) into the row-major fp32 accumulator (p.dq_accum, rows of head_dim floats), four
// columns a reduction: lanes t and t ^ 1 swap halves first (the even lane sends its row + 8 pair
// and adds four columns of row, the odd lane the other way round): half the reduction instructions of
// two v2 per pair of columns, whose queue ncu had at 12 % / 9 % of the D = 128 / 64 kernel's stall
// samples (the next write of a reduction's address register) and 12 % / 5 % on lg_throttle. The
// additions in L2 are as many as before, and they set the pace: measured ±1 % alone
// (docs/kernels-sm90-backward.md, "dQ's reductions").
template <int kD, int kCols>
__device__ __forceinline__ void add_dq_fragment(const BwdKernelParams& p, int64_t row, int col0, int t,
                                                const float (&dq)[kCols / 2]) {
  const bool odd = t & 1;
  float* dst = p.dq_accum + (row + (odd ? 8 : 0)) * kD + col0 + 4 * (t >> 1);
#pragma unroll
  for (int j = 0; j < kCols / 8; ++j) {
    const float row_lo = dq[4 * j], row_hi = dq[4 * j + 1], next_lo = dq[4 * j + 2], next_hi = dq[4 * j + 3];
    const float got_lo = __shfl_xor_sync(0xffffffffu, odd ? row_lo : next_lo, 1);
    const float got_hi = __shfl_xor_sync(0xffffffffu, odd ? row_hi : next_hi, 1);
    // Selected, not branched on: one reduction instruction for the whole warp.
    ptx::red_add_v4_f32(dst + 8 * j, odd ? got_lo : row_lo, odd ? got_hi : row_hi, odd ? next_lo : got_lo,
                        odd ? next_hi : got_hi);
  }
}

// A part's dK and dV (the kParts kernels: p.split_parts parts a key block) added into its key block's
// fp32 sums, p.tail_dkv[blockIdx.x] ([2][kBlockN][kD], row-major, zeroed by the preprocess; dK
// unscaled): this
// warp's fragment, keys key0 + g (+ 8), kCols columns from col0 in pairs 8j + 2t, as stage_key_side
// reads it. The part that finishes its key block last (a CTA-uniform answer) reads the sums back into
// dk and dv, in the same places, and returns true: it stores them; the others return false and are
// done. Release and acquire: last_part_done; the last part reads the sums from L2 (ld.global.cg: this
// CTA never cached them). Not in deterministic mode (the plan).
template <class Traits, int kCols>
__device__ __forceinline__ bool add_key_side_part(const BwdKernelParams& p, int key0, int col0, int g, int t,
                                                  float (&dk)[kCols / 2], float (&dv)[kCols / 2]) {
  __shared__ int s_last;
  const int cell = static_cast<int>(blockIdx.x);
  float* sum_dk = p.tail_dkv + int64_t{cell} * 2 * Traits::kBlockN * Traits::kD;
  float* sum_dv = sum_dk + Traits::kBlockN * Traits::kD;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
#pragma unroll
    for (int j = 0; j < kCols / 8; ++j) {
      const int at = (key0 + g + 8 * half) * Traits::kD + col0 + 8 * j + 2 * t, e = 4 * j + 2 * half;
      ptx::red_add_v2_f32(sum_dk + at, dk[e], dk[e + 1]);
      ptx::red_add_v2_f32(sum_dv + at, dv[e], dv[e + 1]);
    }
  }
  if (!last_part_done(p.tail_done, cell, p.split_parts, &s_last)) return false;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
#pragma unroll
    for (int j = 0; j < kCols / 8; ++j) {
      const int at = (key0 + g + 8 * half) * Traits::kD + col0 + 8 * j + 2 * t, e = 4 * j + 2 * half;
      const float2 k2 = __ldcg(reinterpret_cast<const float2*>(sum_dk + at));
      const float2 v2 = __ldcg(reinterpret_cast<const float2*>(sum_dv + at));
      dk[e] = k2.x, dk[e + 1] = k2.y, dv[e] = v2.x, dv[e + 1] = v2.y;
    }
  }
  return true;
}

// The key side's end, through shared memory (K's and V's tiles: free once every product that reads
// them has been waited for, which the caller's barrier makes sure of), so that the global stores
// are whole 16-byte pieces of rows rather than 4-byte pairs of eight rows per warp instruction.
// stage_key_side: dK·scale and dV of this warp's fragment (keys key0 + g, + 8 of the block; kCols
// columns from col0) into the tiles, element (key, col) where TMA put K's (64-column chunks,
// ptx::swizzle_128b_offset: the eight rows of a fragment store land in eight distinct 16-byte
// columns, no bank conflict). store_key_tiles: after a barrier, every thread's 16-byte pieces of the
// block's rows to dK and dV; keys past seqlen_k are not written.
template <class Traits, int kCols>
__device__ __forceinline__ void stage_key_side(const BwdSmem<Traits>& sm, int key0, int col0, int g, int t,
                                               const float (&dk)[kCols / 2], const float (&dv)[kCols / 2],
                                               float scale) {
  using Tag = typename Traits::Tag;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int key = key0 + g + 8 * half;
#pragma unroll
    for (int j = 0; j < kCols / 8; ++j) {
      const int col = col0 + 8 * j + 2 * t, e = 4 * j + 2 * half;
      const uint32_t at = (col / kSwizzleCols) * Traits::kKVChunkBytes +
                          ptx::swizzle_128b_offset(key, 2 * (col % kSwizzleCols));
      *reinterpret_cast<uint32_t*>(sm.generic + Traits::kK + at) = ptx::pack2<Tag>(dk[e] * scale, dk[e + 1] * scale);
      *reinterpret_cast<uint32_t*>(sm.generic + Traits::kV + at) = ptx::pack2<Tag>(dv[e], dv[e + 1]);
    }
  }
}

template <class Traits>
__device__ __forceinline__ void store_key_tiles(const BwdKernelParams& p, const BwdKeyBlock& kb,
                                                const BwdSmem<Traits>& sm, int tid) {
  constexpr int kPieces = Traits::kD / 8;  // 16-byte pieces of a row
  for (int i = tid; i < Traits::kBlockN * kPieces; i += Traits::kThreads) {
    const int r = i / kPieces, c = i % kPieces, key = kb.n0 + r;
    if (key >= kb.seq.seqlen_k) break;  // i only grows: the rest of the block is past the sequence too
    const uint32_t at = (c / 8) * Traits::kKVChunkBytes + ptx::swizzle_128b_offset(r, 16 * (c % 8));
    const int64_t row = kb.seq.k_offset + key;  // varlen: the packed row (batch strides are 0)
    *reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.dk) + 8 * c +
                              gmem_offset(kb.batch, row, kb.head_kv, p.dk_batch_stride, p.dk_row_stride,
                                          p.dk_head_stride)) = *reinterpret_cast<const uint4*>(sm.generic + Traits::kK + at);
    *reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.dv) + 8 * c +
                              gmem_offset(kb.batch, row, kb.head_kv, p.dv_batch_stride, p.dv_row_stride,
                                          p.dv_head_stride)) = *reinterpret_cast<const uint4*>(sm.generic + Traits::kV + at);
  }
}

// The key block's end, after the walk (the caller's barrier has waited for every product that reads
// K and V): this warp's dK·scale and dV (keys key0 + g, + 8; kCols columns from col0) staged and the
// block's rows stored; a part (kParts) first adds its sums, and only the part that finishes its key
// block last goes on to store them.
template <class Traits, bool kParts, int kCols>
__device__ __forceinline__ void finish_key_block(const BwdKernelParams& p, const BwdKeyBlock& kb,
                                                 const BwdSmem<Traits>& sm, int key0, int col0, int lane, int tid,
                                                 float (&dk)[kCols / 2], float (&dv)[kCols / 2]) {
  const BwdKeyBlock end = key_block_after_walk<kParts>(kb, p);
  if constexpr (kParts) {
    if (!add_key_side_part<Traits, kCols>(p, key0, col0, lane / 4, lane % 4, dk, dv)) return;
  }
  stage_key_side<Traits, kCols>(sm, key0, col0, lane / 4, lane % 4, dk, dv, p.scale);
  __syncthreads();
  store_key_tiles<Traits>(p, end, sm, tid);
}

}  // namespace flashattn::cuda::sm90
