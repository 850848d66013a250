// Few query rows against many keys (the KV-cache call's decode, kvcache.cpp): FlashAttention's tiled
// online softmax laid out the way Flash-Decoding lays it out on a GPU.
//   - A task is a (sequence, kv head), not a (sequence, query head): the query heads of its GQA group
//     are packed into one query block, query by query (row r: query r / g of head r % g; GroupRows),
//     so each key and value block is read, and widened or transposed, once per group instead of once
//     per query head.
//   - The tiles are rows × keys, not keys × rows as the forward's (attend.hpp): S = Q·Kᵀ with Kᵀ
//     made per key block, O += P·V with V as stored, the accumulator in rows. With a handful of rows
//     the forward's products vectorize along those few rows; these vectorize along the keys and the
//     head dim, and the softmax runs along a row of 64 keys.
//   - Each (sequence, kv head)'s visible key blocks are split into ranges, one task each, so that a
//     small batch still gives every thread work. A range leaves its running max m, sum ℓ and output
//     accumulator (a RangeState); a last pass merges a pair's ranges in order,
//         m = max m_s,   ℓ = Σ ℓ_s · exp(m_s − m),   acc = Σ acc_s · exp(m_s − m),
//     then O = acc / ℓ and LSE = m + log ℓ as for one range: exact (the rounding differs from one
//     range's by a few ulp).
// The number of ranges follows from the shapes and lengths only, never from the thread count, so a
// call gives the same result on any number of threads; a paged cache holding a contiguous one's
// keys gives its result bitwise (the same products on the same tiles).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/attend.hpp"

namespace flashattn::cpu {

static_assert(kBlockM == kBlockN, "a rows × keys tile is one of the forward's tiles (finish_scores, the transposes)");

// Whether p runs here: its query rows (a GQA group's heads times the queries) fit one block, and
// they are few or shared. Measured on 2 Zen 4 cores (hdim 128, 4k keys): one head's 32 and 64 rows
// on float products ran 7 % and 30 % faster as the forward's tasks, which need no Kᵀ per block; any
// group of 4 query heads, and any count of rows on bf16 products, ran 1.1–10 × faster here.
inline bool decode_packs(const FwdParams& p) {
  const int64_t rows = p.seqlen_q * p.group_size();
  return rows <= kBlockM && (rows <= 16 || p.group_size() > 1 || bf16_products(p));
}

// One thread's tiles. The block's state: scores, then P, row by row; the accumulator rows; m and ℓ.
// Float products: Q (when not read in place), Kᵀ and V (when not read in place) widened to float.
// bf16 products: Q plain, Kᵀ in pairs of head-dim columns, P rounded to bf16, V in pairs of keys.
struct DecodeTiles {
  float* s = nullptr;            // [kBlockM][kBlockN]  scores, then P
  float* acc = nullptr;          // [kBlockM][dv]       Σ P·V, not yet divided by ℓ
  float* running_max = nullptr;  // [kBlockM]           m
  float* running_sum = nullptr;  // [kBlockM]           ℓ (relative to m)
  // Float products.
  float* q = nullptr;        // [kBlockM][d]
  float* kt = nullptr;       // [d][kBlockN]
  float* v = nullptr;        // [kBlockN][dv]
  float* staging = nullptr;  // [kBlockN][d]  K widened or gathered before its transpose
  // bf16 products.
  uint16_t* q_bf16 = nullptr;    // [kBlockM][d]
  uint32_t* kt_pairs = nullptr;  // [d / 2][kBlockN]
  uint16_t* p_bf16 = nullptr;    // [kBlockM][kBlockN]
  uint32_t* v_pairs = nullptr;   // [kBlockN / 2][dv]

  static DecodeTiles carve(ThreadScratch::Carver& c, int64_t d, int64_t dv, bool bf16) {
    DecodeTiles t;
    t.s = c.take(kBlockM * kBlockN);
    t.acc = c.take(kBlockM * dv);
    t.running_max = c.take(kBlockM);
    t.running_sum = c.take(kBlockM);
    if (bf16) {
      t.q_bf16 = c.take_bf16(kBlockM * d);
      t.kt_pairs = c.take_words(d / 2 * kBlockN);
      t.p_bf16 = c.take_bf16(kBlockM * kBlockN);
      t.v_pairs = c.take_words(kBlockN / 2 * dv);
    } else {
      t.q = c.take(kBlockM * d);
      t.kt = c.take(d * kBlockN);
      t.v = c.take(kBlockN * dv);
      t.staging = c.take(kBlockN * d);
    }
    return t;
  }

  // A fresh state for `rows` rows: m = −inf, ℓ = 0, acc = 0.
  void start_state(int64_t rows, int64_t dv) const {
    std::fill(acc, acc + rows * dv, 0.f);
    std::fill(running_max, running_max + rows, kNegInf);
    std::fill(running_sum, running_sum + rows, 0.f);
  }
};

// S = Q·Kᵀ and O += P·V on float tiles: Q and V read in place when they are float at one stride,
// Kᵀ transposed (and widened) per key block.
template <class Views>
struct FloatDecodeProducts {
  const FwdParams& p;
  const DecodeTiles& t;
  const Views& h;
  RowBlock q{}, v{};

  void load_queries(int64_t rows) { q = row_block(h.q, 0, rows, p.hdim_qk, t.q); }
  void load_keys(int64_t key0, int64_t cols) {
    load_tile_transposed(t.kt, h.k, key0, cols, p.hdim_qk, t.staging);
    v = row_block(h.v, key0, cols, p.hdim_v, t.v);
  }
  void scores(int64_t rows, int64_t cols) const {
    matmul_acc(t.s, kBlockN, as_stored(q.data, q.ld), t.kt, kBlockN, rows, cols, p.hdim_qk);
  }
  void accumulate_output(int64_t rows, int64_t cols) const {
    matmul_acc(t.acc, p.hdim_v, as_stored(t.s, kBlockN), v.data, v.ld, rows, p.hdim_v, cols);
  }
};

// The same on bf16 operands (bf16_tiles.hpp): Q plain, Kᵀ in pairs of columns, P rounded to bf16,
// V in pairs of keys (odd blocks padded with a zero key).
template <class Views>
struct Bf16DecodeProducts {
  const FwdParams& p;
  const DecodeTiles& t;
  const Views& h;
  Bf16Block q{};

  void load_queries(int64_t rows) { q = bf16_block(h.q, 0, rows, p.hdim_qk, t.q_bf16); }
  void load_keys(int64_t key0, int64_t cols) {
    load_pairs_transposed(t.kt_pairs, h.k, key0, cols, p.hdim_qk);
    load_pairs(t.v_pairs, p.hdim_v, h.v, key0, cols, p.hdim_v);
  }
  void scores(int64_t rows, int64_t cols) const {
    matmul_acc_bf16(t.s, kBlockN, q.data, q.ld, t.kt_pairs, kBlockN, rows, cols, p.hdim_qk);
  }
  void accumulate_output(int64_t rows, int64_t cols) const {
    round_tile_bf16(t.p_bf16, kBlockN, t.s, kBlockN, rows, cols, round_up_even(cols));
    matmul_acc_bf16(t.acc, p.hdim_v, t.p_bf16, kBlockN, t.v_pairs, p.hdim_v, rows, p.hdim_v, round_up_even(cols));
  }
};

// A task's query rows (all of h's) against key blocks `blocks`, from a fresh state (m = −inf, ℓ = 0,
// acc = 0) left in the tiles: per block S = Q·Kᵀ (transformed, masked), the online softmax, O += P·V.
template <class Views>
void decode_key_blocks(const FwdParams& p, const DecodeTiles& t, const Views& h, const VisibleKeys& mask,
                       Range blocks) {
  const int64_t rows = h.rows(), dv = p.hdim_v;
  t.start_state(rows, dv);
  const ScoreTransform transform = score_transform(p.options);
  with_products<FloatDecodeProducts, Bf16DecodeProducts>(t.q_bf16 != nullptr, p, t, h, [&](auto& products) {
    products.load_queries(rows);
    for (int64_t n_block = blocks.begin; n_block < blocks.end; ++n_block) {
      const int64_t key0 = n_block * kBlockN, cols = std::min(kBlockN, h.len_k - key0);
      if (n_block + 1 < blocks.end) {  // the next block's rows on their way while this one is computed
        const int64_t next_cols = std::min(kBlockN, h.len_k - key0 - kBlockN);
        prefetch_rows(h.k, key0 + kBlockN, next_cols, p.hdim_qk);
        prefetch_rows(h.v, key0 + kBlockN, next_cols, p.hdim_v);
      }
      products.load_keys(key0, cols);
      clear_tile(t.s, rows, cols);  // [rows][kBlockN]: the same tile as keys × queries
      products.scores(rows, cols);
      finish_scores(t.s, rows, cols, transform);
      for (int64_t i = 0; i < rows; ++i) mask.mask_row(t.s + i * kBlockN, i, key0, cols);
      fold_score_rows(t.s, rows, cols, t.running_max, t.running_sum, t.acc, dv);
      products.accumulate_output(rows, cols);
    }
  });
}

// The state in the tiles finished: O = acc / ℓ and LSE = m + log ℓ, written once.
template <class Views>
void finish_decode(const DecodeTiles& t, const Views& h, int64_t dv) {
  const int64_t rows = h.rows();
  float lse[kBlockM];
  finish_rows(t.acc, dv, rows, t.running_max, t.running_sum, h.lse.data ? lse : nullptr);
  store_tile(h.out, 0, rows, dv, t.acc, dv);
  h.lse.store(0, rows, lse);
}

// Splitting: about kDecodeTasks tasks in all (many threads' worth; a range's own cost, its query
// load and its state's merge, is small against 4 key blocks), ranges of at least kMinBlocksPerRange
// key blocks.
constexpr int64_t kDecodeTasks = 256;
constexpr int64_t kMinBlocksPerRange = 4;

inline int64_t decode_ranges(int64_t pairs, int64_t max_key_blocks) {
  const int64_t wanted = (kDecodeTasks + pairs - 1) / pairs;
  return std::clamp<int64_t>(std::min(wanted, max_key_blocks / kMinBlocksPerRange), 1, kDecodeTasks);
}

// Range s of `ranges` over key blocks `blocks`: equal parts, the first ones one block longer.
inline Range range_of(Range blocks, int64_t s, int64_t ranges) {
  const int64_t n = std::max<int64_t>(0, blocks.end - blocks.begin);
  const int64_t base = n / ranges, extra = n % ranges;
  const int64_t begin = blocks.begin + s * base + std::min(s, extra);
  return {begin, begin + base + (s < extra ? 1 : 0)};
}

// One range's unfinished state of `rows` rows as saved between the passes: m[rows], ℓ[rows], then
// acc[rows][dv].
struct RangeState {
  float* data;
  int64_t rows, dv;

  static int64_t floats(int64_t rows, int64_t dv) { return rows * (dv + 2); }
  float* max() const { return data; }
  float* sum() const { return data + rows; }
  float* acc() const { return data + 2 * rows; }

  void save(const DecodeTiles& t) const {
    std::copy_n(t.running_max, rows, max());
    std::copy_n(t.running_sum, rows, sum());
    std::copy_n(t.acc, rows * dv, acc());
  }

  // Folds this range's state into the tiles' (the ranges before it), row by row; a row that saw no
  // key in this range (ℓ = 0) is left as it is, one that saw none before takes this range's state.
  void merge_into(const DecodeTiles& t) const {
    for (int64_t i = 0; i < rows; ++i) {
      const float m_s = max()[i], l_s = sum()[i];
      if (l_s == 0.f) continue;
      const bool first = t.running_sum[i] == 0.f;
      const float m_new = first ? m_s : std::max(t.running_max[i], m_s);
      const float before = first ? 0.f : std::exp(t.running_max[i] - m_new), here = std::exp(m_s - m_new);
      t.running_max[i] = m_new;
      t.running_sum[i] = t.running_sum[i] * before + l_s * here;
      float* __restrict a = t.acc + i * dv;
      const float* __restrict a_s = acc() + i * dv;
      for (int64_t c = 0; c < dv; ++c) a[c] = a[c] * before + a_s[c] * here;
    }
  }
};

// Attention of every (sequence b, kv head h_kv) of p, its group's query rows packed: views_of(b,
// h_kv) gives the task's HeadViews (GroupRows q and out, group = p.group_size()).
template <class ViewsOf>
void attend_groups(const FwdParams& p, ViewsOf&& views_of) {
  const int64_t pairs = p.batch * p.heads_kv;
  if (pairs == 0) return;
  const int64_t rows = p.seqlen_q * p.group_size(), dv = p.hdim_v;
  int64_t max_key_blocks = 0;  // visible to a sequence's rows
  for (int64_t b = 0; b < p.batch; ++b) {
    const Range visible = key_blocks_of(views_of(b, int64_t{0}).visible_keys(p.options).keys_of_rows({0, rows}));
    max_key_blocks = std::max(max_key_blocks, visible.end - visible.begin);
  }
  const int64_t ranges = decode_ranges(pairs, max_key_blocks), tasks = pairs * ranges;
  std::vector<float> states(ranges > 1 ? static_cast<size_t>(tasks * RangeState::floats(rows, dv)) : 0);
  const auto state_of = [&](int64_t task) {
    return RangeState{states.data() + task * RangeState::floats(rows, dv), rows, dv};
  };
  const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), tasks));
  const bool bf16 = bf16_products(p);
  ThreadScratch scratch(threads, ThreadScratch::floats_of<DecodeTiles>(p.hdim_qk, dv, bf16));

#pragma omp parallel num_threads(threads)
  {
    ThreadScratch::Carver carver(scratch.of_thread(omp_get_thread_num()));
    const DecodeTiles tiles = DecodeTiles::carve(carver, p.hdim_qk, dv, bf16);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      // Sequence-major, then range, then kv head: the heads of one range are neighbours in the cache
      // (a row holds every head's key), so consecutive tasks read the same pages.
      const int64_t h_kv = task % p.heads_kv, s = task / p.heads_kv % ranges, b = task / p.heads_kv / ranges;
      const auto views = views_of(b, h_kv);
      const VisibleKeys mask = views.visible_keys(p.options);
      const Range visible = key_blocks_of(mask.keys_of_rows({0, rows}));
      decode_key_blocks(p, tiles, views, mask, range_of(visible, s, ranges));
      if (ranges == 1) {
        finish_decode(tiles, views, dv);
      } else {
        state_of((b * p.heads_kv + h_kv) * ranges + s).save(tiles);
      }
    }
    if (ranges > 1) {
#pragma omp for schedule(static)
      for (int64_t pair = 0; pair < pairs; ++pair) {
        tiles.start_state(rows, dv);
        for (int64_t s = 0; s < ranges; ++s) state_of(pair * ranges + s).merge_into(tiles);
        finish_decode(tiles, views_of(pair / p.heads_kv, pair % p.heads_kv), dv);
      }
    }
  }
}

}  // namespace flashattn::cpu
