// The decode family's ring kernel: the attention of attend_kernel.cuh (same work per thread block,
// same helpers, same results up to the order of the warps' merge) on DecodeRingTraits' shape —
// 128-key blocks over eight warps, K and V of a block staged apart. Half-block h of a split (K of
// block n_begin + h/2 when h is even, V when odd) goes to ring slot h % kSlots; one barrier per
// half-block:
//   wait for half h → barrier (every warp is done with half h − 1, whose slot is refilled next) →
//   load half h + 2 into that slot → K half: S = Q·Kᵀ, transform, mask, online softmax, P kept in
//   registers; V half: O += P·V.
// Paged caches: block m's row offsets are staged at the end of block m − 2 into offset buffer
// (m − n_begin) % 2 (the first two in the prologue), from table entries fetched (cp.async) with
// K_{m−2}'s group, which has landed by then; each thread stages and fetches one row of one side, as
// in attend_kernel.cuh.
#pragma once

#include "cuda/decode/attend_kernel.cuh"

namespace flashattn::cuda::decode {

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 2) attend_ring_kernel(const __grid_constant__ AttendParams p) {
#if FLASHATTN_PTX_SM80
  using Tag = typename Traits::Tag;
  using QTile = typename Traits::QTile;
  using KVTile = typename Traits::KVTile;
  constexpr int kSlots = Traits::kSlots, kNTiles = Traits::kNTiles, kDTiles = Traits::kDTiles;

  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const AttendWork w = attend_work<Traits>(p);
  if (w.n_begin >= w.n_end && p.num_splits > 1) {
    report_empty_split<Traits>(p, w, tid);
    return;
  }

  const uint32_t s_q = ptx::smem_addr(smem) + Traits::kQOffset;
  const uint32_t s_ring = ptx::smem_addr(smem) + Traits::kKOffset;
  const int warp_key0 = warp * Traits::kKeysPerWarp;
  const LdsmAddr<QTile> q_frag = ldsm_a_addr<QTile>(s_q, 0, lane);
  const LdsmAddr<KVTile> k_frag = ldsm_b_addr<KVTile>(s_ring, warp_key0, lane);
  const LdsmAddr<KVTile> v_frag = ldsm_bt_addr<KVTile>(s_ring, warp_key0, lane);
  const int query[2] = {(w.r0 + lane / 4) / p.group_size, (w.r0 + lane / 4 + 8) / p.group_size};

  // Contiguous: both sides' rows; paged: the side this thread stages (PagedRowOffsets).
  [[maybe_unused]] SequenceRows<false> k_rows, v_rows;
  [[maybe_unused]] PagedRowOffsets<Traits> paged;
  if constexpr (Traits::kPaged) {
    paged.ring = reinterpret_cast<int64_t*>(smem + Traits::kRowOffsetsOffset);
    paged.entries = reinterpret_cast<int32_t*>(smem + Traits::kEntriesOffset);
    paged.side = tid / Traits::kBlockN;
    paged.row = tid % Traits::kBlockN;
    paged.rows = p.index.template key_rows<true>(paged.side == 0 ? p.k : p.v, w.b, w.h_kv);
  } else {
    k_rows = p.index.template key_rows<false>(p.k, w.b, w.h_kv);
    v_rows = p.index.template key_rows<false>(p.v, w.b, w.h_kv);
  }
  // Half-block h into ring slot `slot`; paged: with K_m's half, block m + 2's table entries.
  auto load_half = [&](int h, int slot) {
    const int n = w.n_begin + h / 2, side = h % 2;
    int64_t offsets[Traits::kLoadRows];
    if constexpr (Traits::kPaged) {
      paged.read((h / 2) % 2, side, tid / KVTile::kChunksPerRow, offsets);
      if (side == 0 && n + 2 < w.n_end) paged.fetch_entry(w, n + 2, (h / 2) % 2);
    } else {
      contiguous_offsets<Traits>(side == 0 ? k_rows : v_rows, n, tid, offsets);
    }
    load_kv_block<Traits>(w, static_cast<const char*>(side == 0 ? p.k.data : p.v.data), offsets,
                          side == 0 ? p.hdim_qk : p.hdim_v, n, s_ring + slot * KVTile::kBytes, tid);
  };

  float acc[1][kDTiles][4];
#pragma unroll
  for (int di = 0; di < kDTiles; ++di)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[0][di][c] = 0.f;
  OnlineSoftmax<1> softmax;
  softmax.init();
  const ScoreTransform scores = p.scores;

  // Prologue: Q with half 0 (K of the first block), then half 1, one commit group each; paged: the
  // first two blocks' row offsets staged from entries read now.
  load_q<Traits>(p, w, s_q, tid);
  if constexpr (Traits::kPaged) {
    int first_entries[2];
#pragma unroll
    for (int k = 0; k < 2; ++k) first_entries[k] = w.n_begin + k < w.n_end ? paged.entry_for(w, w.n_begin + k) : 0;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      if (w.n_begin + k < w.n_end) paged.stage(w, w.n_begin + k, k, first_entries[k]);
    }
    __syncthreads();
  }
  const bool any = w.n_begin < w.n_end;
  if (any) load_half(0, 0);
  ptx::cp_async_commit();
  if (any) load_half(1, 1);
  ptx::cp_async_commit();

  const int halves = 2 * (w.n_end - w.n_begin);
  int slot = 0;  // half h's slot
  // Waits for half h, then refills the slot half h − 1 used with half h + 2 (one commit group per
  // half, empty past the end, so that wait<1> always means "half h has landed").
  auto next_half = [&](int h) {
    ptx::cp_async_wait<1>();
    __syncthreads();
    const int refill = slot == 0 ? kSlots - 1 : slot - 1;
    if (h + 2 < halves) load_half(h + 2, refill);
    ptx::cp_async_commit();
  };
  for (int n = w.n_begin; n < w.n_end; ++n) {
    const int h = 2 * (n - w.n_begin);
    next_half(h);  // K of block n
    float s[1][kNTiles][4];
#pragma unroll
    for (int ni = 0; ni < kNTiles; ++ni)
#pragma unroll
      for (int c = 0; c < 4; ++c) s[0][ni][c] = 0.f;
    gemm_ss<Tag, QTile, KVTile, 1, kNTiles, Traits::kQKSteps>(s, q_frag, k_frag, slot * KVTile::kBytes);
    transform_scores(s, scores);
    const int key0 = n * Traits::kBlockN;
    if (w.mask.tile_needs_mask(w.i_first, w.i_last - w.i_first + 1, key0, Traits::kBlockN)) {
      mask_packed_rows<Traits>(s, w, query, key0 + warp_key0, lane);
    }
    softmax.update(s, acc, scores.exp_mult);
    uint32_t pa[1][Traits::kPVSteps][4];
    accumulator_to_a_fragments<Tag>(pa, s);
    slot = slot + 1 == kSlots ? 0 : slot + 1;

    next_half(h + 1);  // V of block n
    gemm_rs<Tag, KVTile, 1, kDTiles, Traits::kPVSteps>(acc, pa, v_frag, slot * KVTile::kBytes);
    slot = slot + 1 == kSlots ? 0 : slot + 1;
    // Paged: block n + 2's row offsets into block n's offset buffer (its last reader, V_n's load,
    // was issued before this block's first barrier), from the entries that came with K_n.
    if constexpr (Traits::kPaged) {
      const int buffer = (n - w.n_begin) % 2;
      if (n + 2 < w.n_end) paged.stage(w, n + 2, buffer, paged.fetched(buffer));
    }
  }
  ptx::griddep_launch_dependents();
  ptx::cp_async_wait<0>();
  __syncthreads();
  merge_warps_and_store<Traits>(p, w, smem, softmax, acc, scores.exp_mult, warp, lane, tid);
#else
  FLASHATTN_PTX_UNSUPPORTED("the decode attention kernel needs sm_80");
#endif
}

}  // namespace flashattn::cuda::decode
