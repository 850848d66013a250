// Query blocks attending to one sequence's keys: FlashAttention's tiled online softmax, shared by
// the forward (forward.cpp) and the KV-cache call (kvcache.cpp). The blocks' Qᵀ tiles stay resident
// while K, V stream through in key blocks (read in place when they are float); a score tile lives
// only until it has been folded into the running max m, sum ℓ and output accumulator of its query
// block; O and LSE are written once at the end. Tiles are transposed (tile_math.hpp): S = K·Qᵀ and
// Oᵀ += Vᵀ·Pᵀ take K and V as stored. Where the keys live (a padded or packed tensor, a contiguous or paged cache) is the
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

// Query blocks of one task at most: the blocks of a task share each key / value block's load (and
// its widening from bf16 / f16), so taller tasks read K and V fewer times from memory. Measured
// (f32, hdim 128, 4k, 1 thread): 1, 2, 4, 8, 16 blocks gave 33, 40, 47, 54, 59 GF/s; 8 keeps a
// thread's state (Qᵀ and Oᵀ of its blocks) at 1 MiB for hdim 256.
constexpr int64_t kMaxQueryBlocksPerTask = 8;

// One thread's tiles. Per query block of its task: Qᵀ, the transposed output accumulator and the
// running max / sum; shared: one transposed score tile and the widened K, V blocks.
struct ForwardTiles {
  float* qt;           // [kMaxQueryBlocksPerTask][d][kBlockM]   query blocks, transposed
  float* acc_t;        // [kMaxQueryBlocksPerTask][dv][kBlockM]  Σ P·V transposed, not yet divided by ℓ
  float* running_max;  // [kMaxQueryBlocksPerTask][kBlockM]      m
  float* running_sum;  // [kMaxQueryBlocksPerTask][kBlockM]      ℓ (relative to m)
  float* st;           // [kBlockN][kBlockM]                     scores, then probabilities P (transposed)
  float* k;            // [kBlockN][d]    key block, when it cannot be read in place (bf16, f16, paged)
  float* v;            // [kBlockN][dv]   value block, likewise
  float* out;          // [kBlockM][max(d, dv)]  output rows of the epilogue; staging of the Q loader

  static ForwardTiles carve(ThreadScratch::Carver& c, int64_t d, int64_t dv) {
    constexpr int64_t blocks = kMaxQueryBlocksPerTask;
    return {c.take(blocks * d * kBlockM), c.take(blocks * dv * kBlockM), c.take(blocks * kBlockM),
            c.take(blocks * kBlockM),     c.take(kBlockN * kBlockM),     c.take(kBlockN * d),
            c.take(kBlockN * dv),         c.take(kBlockM * std::max(d, dv))};
  }
  static int64_t floats(int64_t d, int64_t dv) {
    ThreadScratch::Carver counter(nullptr);
    carve(counter, d, dv);
    return counter.used();
  }
};

// The state of query block `b` of a task, and its rows and visible keys.
struct QueryBlock {
  float* qt;
  float* acc_t;
  float* running_max;
  float* running_sum;
  int64_t row0, rows;
  Range keys;

  bool sees(int64_t n_block) const {
    return !keys.empty() && keys.begin / kBlockN <= n_block && n_block <= (keys.end - 1) / kBlockN;
  }
};

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

// Query rows [row0, row0 + blocks · kBlockM) ∩ [0, len_q) of one head against its keys, in blocks of
// kBlockM rows. Key blocks are the outer loop: each is loaded once and folded into every query block
// that sees it (causal / window block skipping per query block).
template <class KVRows>
void attend_rows(const FwdParams& p, const ForwardTiles& t, const HeadViews<KVRows>& h, int64_t row0,
                 int64_t blocks) {
  const int64_t d = p.hdim_qk, dv = p.hdim_v;
  const VisibleKeys mask(mask_of(p.options), h.len_q, h.len_k);

  QueryBlock qb[kMaxQueryBlocksPerTask];
  int64_t n = 0;
  Range keys{0, 0};  // the union of the blocks' key ranges
  for (; n < blocks && row0 + n * kBlockM < h.len_q; ++n) {
    const int64_t r0 = row0 + n * kBlockM, rows = std::min(kBlockM, h.len_q - r0);
    qb[n] = {t.qt + n * d * kBlockM, t.acc_t + n * dv * kBlockM, t.running_max + n * kBlockM,
             t.running_sum + n * kBlockM, r0, rows, mask.keys_of_rows({r0, r0 + rows})};
    load_tile_transposed(qb[n].qt, h.q, r0, rows, d, t.out);
    std::fill(qb[n].acc_t, qb[n].acc_t + dv * kBlockM, 0.f);
    std::fill(qb[n].running_max, qb[n].running_max + rows, kNegInf);
    std::fill(qb[n].running_sum, qb[n].running_sum + rows, 0.f);
    if (qb[n].keys.empty()) continue;
    keys = keys.empty() ? qb[n].keys : Range{std::min(keys.begin, qb[n].keys.begin), std::max(keys.end, qb[n].keys.end)};
  }

  for (int64_t n_block = keys.begin / kBlockN; !keys.empty() && n_block <= (keys.end - 1) / kBlockN; ++n_block) {
    const int64_t key0 = n_block * kBlockN;
    const int64_t cols = std::min(kBlockN, h.len_k - key0);
    const RowBlock k = row_block(h.k, key0, cols, d, t.k);
    const RowBlock v = row_block(h.v, key0, cols, dv, t.v);
    for (int64_t b = 0; b < n; ++b) {
      const QueryBlock& q = qb[b];
      if (!q.sees(n_block)) continue;
      score_tile(t.st, k, q.qt, d, {q.row0, q.rows, key0, cols}, p.options, mask);
      fold_scores(t.st, cols, q.rows, q.running_max, q.running_sum, q.acc_t, dv);
      matmul_acc(q.acc_t, kBlockM, transposed(v.data, v.ld), t.st, kBlockM, dv, q.rows, cols);  // Oᵀ += Vᵀ·Pᵀ
    }
  }

  for (int64_t b = 0; b < n; ++b) {
    const QueryBlock& q = qb[b];
    finish_output(q.acc_t, dv, q.rows, q.running_max, q.running_sum, t.out, h.lse ? h.lse + q.row0 : nullptr);
    store_tile(h.out, q.row0, q.rows, dv, t.out, dv);
  }
}

// Query blocks per task: as many as kMaxQueryBlocksPerTask while there stay about four tasks per
// thread for the dynamic schedule to even out (causal blocks differ in length).
inline int64_t query_blocks_per_task(int64_t all_query_blocks, int threads) {
  return std::clamp<int64_t>(all_query_blocks / (4 * int64_t{threads}), 1, kMaxQueryBlocksPerTask);
}

// Runs task(tiles, b, h, row0, blocks) for every (batch, query head, group of query blocks) of p on
// all threads, each with its own tiles. Last query blocks first: under a causal mask they see the
// most keys, so the longest tasks start early and the short ones fill in at the end.
template <class Task>
void for_each_query_task(const FwdParams& p, Task&& task) {
  const int64_t m_blocks = num_blocks(p.seqlen_q, kBlockM);  // varlen: of the longest sequence
  const int64_t max_threads = omp_get_max_threads();
  const int64_t per_task = query_blocks_per_task(p.batch * p.heads_q * m_blocks, static_cast<int>(max_threads));
  const int64_t m_tasks = num_blocks(m_blocks, per_task);
  const int64_t tasks = p.batch * p.heads_q * m_tasks;
  if (tasks == 0) return;
  const int threads = static_cast<int>(std::min(max_threads, tasks));
  ThreadScratch scratch(threads, ForwardTiles::floats(p.hdim_qk, p.hdim_v));

#pragma omp parallel num_threads(threads)
  {
    ThreadScratch::Carver carver(scratch.of_thread(omp_get_thread_num()));
    const ForwardTiles tiles = ForwardTiles::carve(carver, p.hdim_qk, p.hdim_v);
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < tasks; ++i) {
      const int64_t m_task = m_tasks - 1 - i % m_tasks;
      const int64_t bh = i / m_tasks;
      task(tiles, bh / p.heads_q, bh % p.heads_q, m_task * per_task * kBlockM, per_task);
    }
  }
}

}  // namespace flashattn::cpu
