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

#include "cpu/bf16_tiles.hpp"
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
// running max / sum; shared: one transposed score tile and the key and value blocks as the products
// read them: widened to float, or (bf16 products, bf16_tiles.hpp) K as stored or gathered, Vᵀ, and P
// rounded to bf16 in row pairs.
struct ForwardTiles {
  float* acc_t = nullptr;        // [kMaxQueryBlocksPerTask][dv][kBlockM]  Σ P·V transposed, not yet divided by ℓ
  float* running_max = nullptr;  // [kMaxQueryBlocksPerTask][kBlockM]      m
  float* running_sum = nullptr;  // [kMaxQueryBlocksPerTask][kBlockM]      ℓ (relative to m)
  float* st = nullptr;           // [kBlockN][kBlockM]                     scores, then probabilities P (transposed)
  float* out = nullptr;          // [kBlockM][max(d, dv)]  output rows of the epilogue; staging of the Q loader
  // Float products.
  float* qt = nullptr;  // [kMaxQueryBlocksPerTask][d][kBlockM]   query blocks, transposed
  float* k = nullptr;   // [kBlockN][d]    key block, when it cannot be read in place (bf16, f16, paged)
  float* v = nullptr;   // [kBlockN][dv]   value block, likewise
  // bf16 products.
  uint32_t* qt_pairs = nullptr;  // [kMaxQueryBlocksPerTask][d / 2][kBlockM]  query blocks, transposed, in pairs
  uint16_t* k_bf16 = nullptr;    // [kBlockN][d]   key block gathered from pages
  uint16_t* vt_bf16 = nullptr;   // [dv][kBlockN]  value block, transposed
  uint32_t* p_pairs = nullptr;   // [kBlockN / 2][kBlockM]  P in pairs

  static ForwardTiles carve(ThreadScratch::Carver& c, int64_t d, int64_t dv, bool bf16) {
    constexpr int64_t blocks = kMaxQueryBlocksPerTask;
    ForwardTiles t{c.take(blocks * dv * kBlockM), c.take(blocks * kBlockM), c.take(blocks * kBlockM),
                   c.take(kBlockN * kBlockM), c.take(kBlockM * std::max(d, dv))};
    if (bf16) {
      t.qt_pairs = c.take_words(blocks * d / 2 * kBlockM);
      t.k_bf16 = c.take_bf16(kBlockN * d);
      t.vt_bf16 = c.take_bf16(dv * kBlockN);
      t.p_pairs = c.take_words(kBlockN / 2 * kBlockM);
    } else {
      t.qt = c.take(blocks * d * kBlockM);
      t.k = c.take(kBlockN * d);
      t.v = c.take(kBlockN * dv);
    }
    return t;
  }
};

// The state of query block `b` of a task, and its rows and visible keys.
struct QueryBlock {
  float* qt;           // float products
  uint32_t* qt_pairs;  // bf16 products
  float* acc_t;
  float* running_max;
  float* running_sum;
  int64_t row0, rows;
  Range keys;

  bool sees(int64_t n_block) const {
    return !keys.empty() && keys.begin / kBlockN <= n_block && n_block <= (keys.end - 1) / kBlockN;
  }
};

// Where one task's rows live: its query rows, the keys and values of its kv head, its out and lse
// rows, and the lengths the mask aligns. Rows are one query head's queries (QRows, ORows: HeadRows),
// or the `group` query heads of a GQA group packed query by query (GroupRows, attend_decode.hpp):
// len_q · group rows.
template <class KVRows, class QRows = InRows, class ORows = OutRows>
struct HeadViews {
  QRows q;
  KVRows k, v;
  ORows out;
  LseRows lse;
  int64_t len_q, len_k;
  int64_t group = 1;

  int64_t rows() const { return len_q * group; }
  VisibleKeys visible_keys(const AttentionOptions& options) const {
    return VisibleKeys(mask_of(options), len_q, len_k, group);
  }
};

// The forward's two products, S = K·Qᵀ and Oᵀ += Vᵀ·Pᵀ, in float: Q transposed per query block, K
// and V read in place when they are float, else widened per key block.
template <class Views>
struct FloatForwardProducts {
  const FwdParams& p;
  const ForwardTiles& t;
  const Views& h;
  RowBlock k{}, v{};

  void load_queries(const QueryBlock& q) const { load_tile_transposed(q.qt, h.q, q.row0, q.rows, p.hdim_qk, t.out); }
  void load_keys(int64_t key0, int64_t cols) {
    k = row_block(h.k, key0, cols, p.hdim_qk, t.k);
    v = row_block(h.v, key0, cols, p.hdim_v, t.v);
  }
  void scores(const QueryBlock& q, const TileCoords& c, const VisibleKeys& mask) const {
    score_tile(t.st, k, q.qt, p.hdim_qk, c, p.options, mask);
  }
  void accumulate_output(const QueryBlock& q, int64_t cols) const {
    matmul_acc(q.acc_t, kBlockM, transposed(v.data, v.ld), t.st, kBlockM, p.hdim_v, q.rows, cols);
  }
};

// The same in bf16 (bf16_tiles.hpp): Qᵀ in pairs per query block, K as stored (gathered from
// pages), Vᵀ per key block, P rounded to bf16 in pairs per tile.
template <class Views>
struct Bf16ForwardProducts {
  const FwdParams& p;
  const ForwardTiles& t;
  const Views& h;
  Bf16Block k{};

  void load_queries(const QueryBlock& q) const { load_pairs_transposed(q.qt_pairs, h.q, q.row0, q.rows, p.hdim_qk); }
  void load_keys(int64_t key0, int64_t cols) {
    k = bf16_block(h.k, key0, cols, p.hdim_qk, t.k_bf16);
    load_transposed_bf16(t.vt_bf16, kBlockN, h.v, key0, cols, p.hdim_v);
  }
  void scores(const QueryBlock& q, const TileCoords& c, const VisibleKeys& mask) const {
    score_tile_bf16(t.st, k, q.qt_pairs, p.hdim_qk, c, p.options, mask);
  }
  void accumulate_output(const QueryBlock& q, int64_t cols) const {
    pack_pairs_bf16(t.p_pairs, kBlockM, t.st, kBlockM, cols, q.rows);
    matmul_acc_bf16(q.acc_t, kBlockM, t.vt_bf16, kBlockN, t.p_pairs, kBlockM, p.hdim_v, q.rows, round_up_even(cols));
  }
};

// f(products) on the products this call runs, Float<Views> or Bf16<Views> (bf16_products: which
// the tiles were carved for).
template <template <class> class Float, template <class> class Bf16, class Tiles, class Views, class F>
void with_products(bool bf16, const FwdParams& p, const Tiles& t, const Views& h, F&& f) {
  if (bf16) {
    Bf16<Views> products{p, t, h};
    f(products);
  } else {
    Float<Views> products{p, t, h};
    f(products);
  }
}

// Query block n of a task, rows [row0, row0 + rows): its state in the task's tiles, Qᵀ loaded,
// m = −inf, ℓ = 0, acc = 0.
template <class Products>
QueryBlock start_query_block(const Products& products, const VisibleKeys& mask, int64_t n, int64_t row0,
                             int64_t rows) {
  const ForwardTiles& t = products.t;
  const int64_t d = products.p.hdim_qk, dv = products.p.hdim_v;
  const QueryBlock q{t.qt ? t.qt + n * d * kBlockM : nullptr, t.qt_pairs ? t.qt_pairs + n * d / 2 * kBlockM : nullptr,
                     t.acc_t + n * dv * kBlockM, t.running_max + n * kBlockM, t.running_sum + n * kBlockM, row0, rows,
                     mask.keys_of_rows({row0, row0 + rows})};
  products.load_queries(q);
  std::fill(q.acc_t, q.acc_t + dv * kBlockM, 0.f);
  std::fill(q.running_max, q.running_max + rows, kNegInf);
  std::fill(q.running_sum, q.running_sum + rows, 0.f);
  return q;
}

// The key blocks holding keys [keys.begin, keys.end).
inline Range key_blocks_of(Range keys) {
  return keys.empty() ? Range{} : Range{keys.begin / kBlockN, (keys.end - 1) / kBlockN + 1};
}

// Key blocks `blocks`, each loaded once, folded into every one of query blocks qb[0, n) that sees it:
// S = K·Qᵀ (transformed, masked), the online softmax, Oᵀ += Vᵀ·Pᵀ.
template <class Products>
void fold_key_blocks(Products& products, const VisibleKeys& mask, const QueryBlock* qb, int64_t n, Range blocks) {
  const int64_t len_k = products.h.len_k, dv = products.p.hdim_v;
  for (int64_t n_block = blocks.begin; n_block < blocks.end; ++n_block) {
    const int64_t key0 = n_block * kBlockN;
    const int64_t cols = std::min(kBlockN, len_k - key0);
    products.load_keys(key0, cols);
    for (int64_t b = 0; b < n; ++b) {
      const QueryBlock& q = qb[b];
      if (!q.sees(n_block)) continue;
      products.scores(q, {q.row0, q.rows, key0, cols}, mask);
      fold_scores(products.t.st, cols, q.rows, q.running_max, q.running_sum, q.acc_t, dv);
      products.accumulate_output(q, cols);
    }
  }
}

// The epilogue of a query block: O = acc / ℓ and LSE = m + log ℓ, written once.
template <class Views>
void finish_query_block(const QueryBlock& q, const ForwardTiles& t, const Views& h, int64_t dv) {
  float lse[kBlockM];
  finish_output(q.acc_t, dv, q.rows, q.running_max, q.running_sum, t.out, h.lse.data ? lse : nullptr);
  store_tile(h.out, q.row0, q.rows, dv, t.out, dv);
  h.lse.store(q.row0, q.rows, lse);
}

// Rows [row0, row0 + blocks · kBlockM) ∩ [0, h.rows()) of a task against its keys, in blocks of
// kBlockM rows. Key blocks are the outer loop: each is loaded once and folded into every query block
// that sees it (causal / window block skipping per query block).
template <class Views>
void attend_rows(const FwdParams& p, const ForwardTiles& t, const Views& h, int64_t row0, int64_t blocks) {
  const VisibleKeys mask = h.visible_keys(p.options);
  with_products<FloatForwardProducts, Bf16ForwardProducts>(t.qt_pairs != nullptr, p, t, h, [&](auto& products) {
    QueryBlock qb[kMaxQueryBlocksPerTask];
    int64_t n = 0;
    Range keys{0, 0};  // the union of the blocks' key ranges
    for (; n < blocks && row0 + n * kBlockM < h.rows(); ++n) {
      const int64_t r0 = row0 + n * kBlockM;
      qb[n] = start_query_block(products, mask, n, r0, std::min(kBlockM, h.rows() - r0));
      if (qb[n].keys.empty()) continue;
      keys = keys.empty() ? qb[n].keys
                          : Range{std::min(keys.begin, qb[n].keys.begin), std::max(keys.end, qb[n].keys.end)};
    }
    fold_key_blocks(products, mask, qb, n, key_blocks_of(keys));
    for (int64_t b = 0; b < n; ++b) finish_query_block(qb[b], t, h, p.hdim_v);
  });
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
  const bool bf16 = bf16_products(p);
  ThreadScratch scratch(threads, ThreadScratch::floats_of<ForwardTiles>(p.hdim_qk, p.hdim_v, bf16));

#pragma omp parallel num_threads(threads)
  {
    ThreadScratch::Carver carver(scratch.of_thread(omp_get_thread_num()));
    const ForwardTiles tiles = ForwardTiles::carve(carver, p.hdim_qk, p.hdim_v, bf16);
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < tasks; ++i) {
      const int64_t m_task = m_tasks - 1 - i % m_tasks;
      const int64_t bh = i / m_tasks;
      task(tiles, bh / p.heads_q, bh % p.heads_q, m_task * per_task * kBlockM, per_task);
    }
  }
}

}  // namespace flashattn::cpu
