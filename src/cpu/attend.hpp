// One query block attending to one sequence's keys: FlashAttention's tiled online softmax, shared
// by the forward (forward.cpp) and the KV-cache call (kvcache.cpp). The block's Q tile stays
// resident while K, V stream through in key blocks; a score tile lives only until it has been
// folded into the running row max m, row sum ℓ and output accumulator; O and LSE are written once
// at the end. Where the keys live (a padded or packed tensor, a contiguous or paged cache) is the
// caller's KVRows (tile.hpp's row addressings).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "cpu/mask.hpp"
#include "cpu/matmul.hpp"
#include "cpu/row_ops.hpp"
#include "cpu/score.hpp"
#include "cpu/tile.hpp"

namespace flashattn::cpu {

// One thread's tiles.
struct ForwardTiles {
  float* q;            // [kBlockM][d]        query tile
  float* kt;           // [d][kBlockN]        key tile, transposed
  float* v;            // [kBlockN][dv]       value tile
  float* s;            // [kBlockM][kBlockN]  scores, then probabilities P
  float* acc;          // [kBlockM][dv]       Σ P·V, not yet divided by ℓ
  float* running_max;  // [kBlockM]           m
  float* running_sum;  // [kBlockM]           ℓ (relative to m)
  float* row_buf;      // [d]                 staging row of the transposed loader

  static ForwardTiles carve(ThreadScratch::Carver& c, int64_t d, int64_t dv) {
    return {c.take(kBlockM * d),  c.take(d * kBlockN), c.take(kBlockN * dv), c.take(kBlockM * kBlockN),
            c.take(kBlockM * dv), c.take(kBlockM),     c.take(kBlockM),      c.take(d)};
  }
  static int64_t floats(int64_t d, int64_t dv) {
    ThreadScratch::Carver counter(nullptr);
    carve(counter, d, dv);
    return counter.used();
  }
};

// Online softmax update: fold a score tile into each row's running (m, ℓ, acc) and turn the scores
// into P = exp(S − m_new). ℓ and acc were summed against m_old, so both are rescaled by
// exp(m_old − m_new) when the max grows.
inline void online_softmax_update(const ForwardTiles& t, int64_t rows, int64_t cols, int64_t dv) {
  for (int64_t r = 0; r < rows; ++r) {
    float* s_row = t.s + r * kBlockN;
    const float m_old = t.running_max[r];
    const float m_new = std::max(m_old, row_max(s_row, cols));
    // A row that has seen no key yet has m = −inf; shifting by 0 instead keeps exp(−inf − (−inf))
    // = NaN out: its masked scores give P = exp(−inf) = 0 and its (zero) state rescales by 0.
    const float shift = m_new == kNegInf ? 0.f : m_new;
    const float rescale = exp_poly(m_old - shift);
    exp_shifted(s_row, cols, shift);
    t.running_sum[r] = t.running_sum[r] * rescale + row_sum(s_row, cols);
    if (rescale != 1.f) scale_row(t.acc + r * dv, dv, rescale);
    t.running_max[r] = m_new;
  }
}

// Epilogue: out = acc / ℓ, rounded once to the storage dtype, and lse = m + log ℓ. A row that saw
// no key has ℓ = 0 (any visible key adds exp(0) = 1): out = 0, lse = +inf, as flash-attn.
inline void write_epilogue(const ForwardTiles& t, int64_t dv, const OutRows& out, float* lse, int64_t row0,
                           int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) {
    float* acc_row = t.acc + r * dv;
    const float l = t.running_sum[r];
    const bool fully_masked = l == 0.f;
    if (fully_masked) {
      std::fill(acc_row, acc_row + dv, 0.f);
    } else {
      scale_row(acc_row, dv, 1.f / l);
    }
    if (lse != nullptr) lse[row0 + r] = fully_masked ? kPosInf : t.running_max[r] + std::log(l);
  }
  store_tile(out, row0, rows, dv, t.acc, dv);
}

// Where one (sequence, query head) lives: its query rows, the keys and values of its kv head, its
// out rows and lse row (null: not written), and the lengths the mask aligns.
template <class KVRows>
struct HeadViews {
  InRows q;
  KVRows k, v;
  OutRows out;
  float* lse;
  int64_t len_q, len_k;
};

// Query rows [row0, row0 + kBlockM) ∩ [0, len_q) of one head against its keys.
template <class KVRows>
void attend_block(const FwdParams& p, const ForwardTiles& t, const HeadViews<KVRows>& h, int64_t row0) {
  if (row0 >= h.len_q) return;  // a sequence shorter than the longest
  const int64_t rows = std::min(kBlockM, h.len_q - row0);
  const int64_t d = p.hdim_qk, dv = p.hdim_v;
  const VisibleKeys mask(mask_of(p.options), h.len_q, h.len_k);

  load_tile(t.q, d, h.q, row0, rows, d);
  std::fill(t.acc, t.acc + rows * dv, 0.f);
  std::fill(t.running_max, t.running_max + rows, kNegInf);
  std::fill(t.running_sum, t.running_sum + rows, 0.f);

  // Causal / window block skipping: only key blocks some row of this block can see are touched.
  const Range keys = mask.keys_of_rows({row0, row0 + rows});
  if (!keys.empty()) {
    for (int64_t n_block = keys.begin / kBlockN; n_block <= (keys.end - 1) / kBlockN; ++n_block) {
      const int64_t key0 = n_block * kBlockN;
      const int64_t cols = std::min(kBlockN, h.len_k - key0);
      load_tile_transposed(t.kt, kBlockN, h.k, key0, cols, d, t.row_buf);
      load_tile(t.v, dv, h.v, key0, cols, dv);
      score_tile(t.s, t.q, t.kt, d, {row0, rows, key0, cols}, p.options, mask);
      online_softmax_update(t, rows, cols, dv);
      matmul_acc(t.acc, dv, as_stored(t.s, kBlockN), t.v, dv, rows, dv, cols);  // PV accumulate
    }
  }
  write_epilogue(t, dv, h.out, h.lse, row0, rows);
}

// Runs block(tiles, b, h, m_block) for every (batch, query head, query block) of p on all threads,
// each with its own tiles. Last query blocks first: under a causal mask they see the most keys, so
// the longest tasks start early and the short ones fill in at the end.
template <class Block>
void for_each_query_block(const FwdParams& p, Block&& block) {
  const int64_t m_blocks = num_blocks(p.seqlen_q, kBlockM);  // varlen: of the longest sequence
  const int64_t tasks = p.batch * p.heads_q * m_blocks;
  if (tasks == 0) return;
  const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), tasks));
  ThreadScratch scratch(threads, ForwardTiles::floats(p.hdim_qk, p.hdim_v));

#pragma omp parallel num_threads(threads)
  {
    ThreadScratch::Carver carver(scratch.of_thread(omp_get_thread_num()));
    const ForwardTiles tiles = ForwardTiles::carve(carver, p.hdim_qk, p.hdim_v);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t m_block = m_blocks - 1 - task % m_blocks;
      const int64_t bh = task / m_blocks;
      block(tiles, bh / p.heads_q, bh % p.heads_q, m_block);
    }
  }
}

}  // namespace flashattn::cpu
