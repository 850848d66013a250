// The sm90 forward kernel (docs/kernels-sm90-forward.md): warp-specialized, FlashAttention-3's design.
//
// Persistent: one CTA per SM takes tile after tile (a tile is block_m = 64·consumers query rows of
// one (batch, head); the scheduler of fwd_tile.cuh hands them out, statically or from an atomic
// counter), so that one tile's loads overlap the previous tile's last products and epilogue.
// Warpgroup 0 is the producer: it gives most of its registers away (setmaxnreg) and one of its
// threads schedules the tiles and issues every TMA load, per tile Q once and K/V blocks through a
// ring of mbarrier-guarded stages that runs on across tiles (fwd_producer.cuh; paged K/V: the
// thread's warp shares a block's page boxes). Warpgroups 1.. are
// the consumers, 64 rows each, with the registers the producer gave up: they take each tile index
// from the producer, run the key loop on wgmma with softmax/product overlap and ping-pong
// (fwd_consumer.cuh), then the epilogue (fwd_epilogue.cuh).
//
// Padded batches: keys past seqlen_k are never read from memory: the tensor maps end at seqlen_k
// (TMA fills zeros), and the mask sets their scores to −inf.
//
// Varlen batches (cu_seqlens): the maps are over the packed tensors (rank 4 with one "batch"), and
// sequence b's rows start at cu_seqlens[b] (common/seqlen.cuh, the sm80 kernels' rules). A box of
// rows may then run past the sequence: into the next one, into packed rows of no sequence, or past
// the tensor's end (zero-filled). What keeps those rows out of the output:
//   - Q rows ≥ seqlen_q(b): each output row depends on its own Q row only; they are never stored
//     (O and LSE), and tiles with m0 ≥ seqlen_q(b) are skipped (the tiles cover max_seqlen_q);
//   - K rows ≥ seqlen_k(b): the mask overwrites their scores with −inf whatever they hold (NaN too),
//     so P is exactly 0 there;
//   - V rows ≥ seqlen_k(b): P = 0 does not help (0 · NaN = NaN in P·V), so the rows of the sequence's
//     last key block past seqlen_k(b) are zeroed in shared memory before the first P·V (the only
//     such block is the first one loaded: Consumer::zero_v_tail).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/ptx/ldmatrix.cuh"
#include "cuda/ptx/setmaxnreg.cuh"
#include "cuda/sm90/fwd_consumer.cuh"
#include "cuda/sm90/fwd_epilogue.cuh"
#include "cuda/sm90/fwd_producer.cuh"
#include "cuda/sm90/fwd_tile.cuh"

namespace flashattn::cuda::sm90 {

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    fwd_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
               const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ FwdKernelParams p) {
#if FLASHATTN_PTX_SM90A
  extern __shared__ unsigned char smem_raw[];
  __shared__ uint64_t bars[FwdSmem<Traits>::kBarriers];
  __shared__ int tile_slots[FwdSmem<Traits>::kTileSlots];
  const uint32_t raw = ptx::smem_addr(smem_raw);
  const uint32_t q = (raw + kSwizzleAtomBytes - 1) / kSwizzleAtomBytes * kSwizzleAtomBytes;
  const FwdSmem<Traits> sm{smem_raw + (q - raw), q, ptx::smem_addr(&bars[0]), tile_slots};

  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) sm.init_barriers();
  __syncthreads();

  const int warpgroup = tid / kWarpgroupThreads;
  if (warpgroup == 0) {
    ptx::setmaxnreg_dec<Traits::kShape.producer_registers()>();
    if (Traits::kPaged ? tid < 32 : tid == 0) load_tiles(sm, p, &tm_q, &tm_k, &tm_v, tid);
    return;
  }
  ptx::setmaxnreg_inc<Traits::kShape.consumer_registers()>();
  const int wg = warpgroup - 1, lane = tid % 32;
  const int row0 = wg * kWarpgroupRows + (tid % kWarpgroupThreads / 32) * 16;
  const TileScheduler<Traits> scheduler{sm, p};
  TileCursor at;
  for (int j = 0;; ++j) {
    const int tile = scheduler.take(j);
    if (tile >= p.num_tiles) break;
    const FwdTile t = fwd_tile<Traits>(p, tile);
    if (t.has_rows()) {  // else varlen: past this sequence's end (an empty one: every block)
      ConsumerState<Traits> c;
      c.init();
      if (t.loads()) {
        const Consumer<Traits> consumer{sm, t, p.scores, wg, row0, lane};
        consumer.attend(c, at, tid - kWarpgroupThreads);
      } else if constexpr (Consumer<Traits>::kRowScalesUnderLastProduct) {
        c.softmax.row_scales(p.scores.exp_mult, c.inv, c.lse);  // no keys: out 0, lse +inf
      }
      const Epilogue<Traits> epilogue{t, p, row0, lane};
      epilogue.store(c, p.scores.exp_mult);
    }
    at.advance(t);
  }
#else
  FLASHATTN_PTX_UNSUPPORTED("the sm90 forward kernel needs sm_90a");
#endif
}

}  // namespace flashattn::cuda::sm90
