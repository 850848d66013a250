// CPU backward: FlashAttention's backward by recomputation. P is never stored: each tile recomputes
// S = Q·Kᵀ (score.hpp: transformed, masked) and P = exp(S − LSE) from the forward's LSE, then
//   dV += Pᵀ·dO,   dP = dO·Vᵀ,   dS = P∘(dP − D) ∘ the score transform's slope,   D = rowsum(dO∘O),
//   dQ += dS·K·scale,   dK += dSᵀ·Q·scale.
// Race-free without atomics, hence deterministic: pass 1 gives each (batch, kv head, key block) to
// one thread, which owns those rows of dK, dV and sums over every query head of its GQA group and
// every query block that sees the keys; pass 2 gives each (batch, query head, query block) to one
// thread for dQ. D is recomputed per query tile (one dot product per row) instead of kept in an
// O(N) workspace.
#include <omp.h>

#include <algorithm>

#include "cpu/cpu_backend.hpp"
#include "cpu/mask.hpp"
#include "cpu/matmul.hpp"
#include "cpu/row_ops.hpp"
#include "cpu/score.hpp"
#include "cpu/tile.hpp"

namespace flashattn::cpu {
namespace {

// One thread's tiles (both passes).
struct BackwardTiles {
  float* q;        // [kBlockM][d]        query tile
  float* dout;     // [kBlockM][dv]       dO tile
  float* lse;      // [kBlockM]           the forward's LSE of the query rows
  float* delta;    // [kBlockM]           D = rowsum(dO∘O)
  float* kt;       // [d][kBlockN]        key tile, transposed (for S)
  float* vt;       // [dv][kBlockN]       value tile, transposed (for dP)
  float* k;        // [kBlockN][d]        key tile as stored (for dQ)
  float* p;        // [kBlockM][kBlockN]  scores, then P
  float* ds;       // [kBlockM][kBlockN]  dP, then dS·scale
  float* dq;       // [kBlockM][d]        dQ accumulator (pass 2)
  float* dk;       // [kBlockN][d]        dK accumulator (pass 1)
  float* dv;       // [kBlockN][dv]       dV accumulator (pass 1)
  float* row_buf;  // [max(d, dv)]        staging row of the loaders

  static BackwardTiles carve(ThreadScratch::Carver& c, int64_t d, int64_t dv) {
    return {c.take(kBlockM * d),       c.take(kBlockM * dv),      c.take(kBlockM),
            c.take(kBlockM),           c.take(d * kBlockN),       c.take(dv * kBlockN),
            c.take(kBlockN * d),       c.take(kBlockM * kBlockN), c.take(kBlockM * kBlockN),
            c.take(kBlockM * d),       c.take(kBlockN * d),       c.take(kBlockN * dv),
            c.take(std::max(d, dv))};
  }
  static int64_t floats(int64_t d, int64_t dv) {
    ThreadScratch::Carver counter(nullptr);
    carve(counter, d, dv);
    return counter.used();
  }
};

// Where one (batch, query head) and its kv head live: the rows of every tensor the backward reads
// or writes, and the mask of the sequence.
struct HeadView {
  Sequence seq;
  InRows q, k, v, out, dout;
  OutRows dq, dk, dv;
  const float* lse;
  VisibleKeys mask;

  HeadView(const BwdParams& p, int64_t b, int64_t h)
      : seq(sequence_of(p, b)),
        q(head_rows(p.q, p.dtype, p.q_batch_stride, p.q_row_stride, p.q_head_stride, b, seq.row_offset_q, h)),
        k(head_rows(p.k, p.dtype, p.k_batch_stride, p.k_row_stride, p.k_head_stride, b, seq.row_offset_k, kv(p, h))),
        v(head_rows(p.v, p.dtype, p.v_batch_stride, p.v_row_stride, p.v_head_stride, b, seq.row_offset_k, kv(p, h))),
        out(head_rows(static_cast<const void*>(p.out), p.dtype, p.o_batch_stride, p.o_row_stride, p.o_head_stride, b, seq.row_offset_q, h)),
        dout(head_rows(p.dout, p.dtype, p.do_batch_stride, p.do_row_stride, p.do_head_stride, b, seq.row_offset_q, h)),
        dq(head_rows(p.dq, p.dtype, p.dq_batch_stride, p.dq_row_stride, p.dq_head_stride, b, seq.row_offset_q, h)),
        dk(head_rows(p.dk, p.dtype, p.dk_batch_stride, p.dk_row_stride, p.dk_head_stride, b, seq.row_offset_k, kv(p, h))),
        dv(head_rows(p.dv, p.dtype, p.dv_batch_stride, p.dv_row_stride, p.dv_head_stride, b, seq.row_offset_k, kv(p, h))),
        lse(lse_rows(p, b, seq, h)),
        mask(mask_of(p.options), seq.len_q, seq.len_k) {}

  static int64_t kv(const BwdParams& p, int64_t h) { return h / p.group_size(); }
};

// Query tile loader: Q, dO, LSE of rows [row0, row0 + rows), and D = rowsum(dO∘O) from the stored
// (rounded) O, as the forward wrote it.
void load_query_tile(const BwdParams& p, const BackwardTiles& t, const HeadView& hv, int64_t row0, int64_t rows) {
  const int64_t d = p.hdim_qk, dv = p.hdim_v;
  load_tile(t.q, d, hv.q, row0, rows, d);
  load_tile(t.dout, dv, hv.dout, row0, rows, dv);
  for (int64_t r = 0; r < rows; ++r) {
    load_row(t.row_buf, hv.out.data, hv.out.dtype, hv.out.at(row0 + r), dv);
    t.delta[r] = row_dot(t.dout + r * dv, t.row_buf, dv);
    t.lse[r] = hv.lse[row0 + r];
  }
}

// Key tile loader: Kᵀ and Vᵀ of keys [key0, key0 + cols), and K as stored when dQ needs it.
void load_key_tile(const BwdParams& p, const BackwardTiles& t, const HeadView& hv, int64_t key0, int64_t cols,
                   bool with_k) {
  const int64_t d = p.hdim_qk, dv = p.hdim_v;
  load_tile_transposed(t.kt, kBlockN, hv.k, key0, cols, d, t.row_buf);
  load_tile_transposed(t.vt, kBlockN, hv.v, key0, cols, dv, t.row_buf);
  if (with_k) load_tile(t.k, d, hv.k, key0, cols, d);
}

// Recomputation: P = exp(S − LSE) and dS·scale for the loaded query and key tiles, where
// dS = P∘(dP − D), dP = dO·Vᵀ, times the score transform's slope at S (score.hpp's ScoreChain).
// Masked entries get P = dS = 0 explicitly; a fully masked row has LSE = +inf, so its P is 0 too.
void recompute_p_and_ds(const BwdParams& p, const BackwardTiles& t, const HeadView& hv, const TileCoords& c) {
  const int64_t d = p.hdim_qk, dv = p.hdim_v;
  score_tile(t.p, t.q, t.kt, d, c, p.options, hv.mask);
  for (int64_t r = 0; r < c.rows; ++r) std::fill(t.ds + r * kBlockN, t.ds + r * kBlockN + c.cols, 0.f);
  matmul_acc(t.ds, kBlockN, as_stored(t.dout, dv), t.vt, kBlockN, c.rows, c.cols, dv);  // dP

  const ScoreChain chain = score_chain(p.options);
  for (int64_t r = 0; r < c.rows; ++r) {
    float* __restrict s_row = t.p + r * kBlockN;
    float* __restrict ds_row = t.ds + r * kBlockN;
    const float lse = t.lse[r], delta = t.delta[r];
    for (int64_t j = 0; j < c.cols; ++j) {
      const float s = s_row[j];
      const bool visible = s != kNegInf;
      const float prob = visible ? exp_poly(s - lse) : 0.f;
      s_row[j] = prob;
      ds_row[j] = prob * (ds_row[j] - delta) * chain(visible ? s : 0.f);
    }
  }
}

// Pass 1: dK, dV of one key block of kv head h_kv, summed over the query heads of its group and the
// query blocks that see the block; written once, zeros for keys no query sees.
void dkdv_block(const BwdParams& p, const BackwardTiles& t, int64_t b, int64_t h_kv, int64_t n_block) {
  const int64_t d = p.hdim_qk, dv = p.hdim_v, group = p.group_size();
  const HeadView first_head(p, b, h_kv * group);
  const Sequence& seq = first_head.seq;
  const int64_t key0 = n_block * kBlockN;
  if (key0 >= seq.len_k) return;  // a varlen sequence shorter than max_seqlen_k
  const int64_t cols = std::min(kBlockN, seq.len_k - key0);

  load_key_tile(p, t, first_head, key0, cols, /*with_k=*/false);
  std::fill(t.dk, t.dk + cols * d, 0.f);
  std::fill(t.dv, t.dv + cols * dv, 0.f);
  const Range rows = first_head.mask.rows_of_keys({key0, key0 + cols});
  for (int64_t h = h_kv * group; h < (h_kv + 1) * group && !rows.empty(); ++h) {
    const HeadView hv(p, b, h);
    for (int64_t m_block = rows.begin / kBlockM; m_block <= (rows.end - 1) / kBlockM; ++m_block) {
      const int64_t row0 = m_block * kBlockM;
      const TileCoords c{row0, std::min(kBlockM, seq.len_q - row0), key0, cols};
      load_query_tile(p, t, hv, c.row0, c.rows);
      recompute_p_and_ds(p, t, hv, c);
      matmul_acc(t.dv, dv, transposed(t.p, kBlockN), t.dout, dv, cols, dv, c.rows);  // dV += Pᵀ·dO
      matmul_acc(t.dk, d, transposed(t.ds, kBlockN), t.q, d, cols, d, c.rows);      // dK += dSᵀ·Q
    }
  }
  store_tile(first_head.dk, key0, cols, d, t.dk, d);
  store_tile(first_head.dv, key0, cols, dv, t.dv, dv);
}

// Pass 2: dQ of one query block, over the key blocks it sees (the forward's block skipping).
void dq_block(const BwdParams& p, const BackwardTiles& t, int64_t b, int64_t h, int64_t m_block) {
  const int64_t d = p.hdim_qk;
  const HeadView hv(p, b, h);
  const int64_t row0 = m_block * kBlockM;
  if (row0 >= hv.seq.len_q) return;
  const int64_t rows = std::min(kBlockM, hv.seq.len_q - row0);

  load_query_tile(p, t, hv, row0, rows);
  std::fill(t.dq, t.dq + rows * d, 0.f);
  const Range keys = hv.mask.keys_of_rows({row0, row0 + rows});
  for (int64_t n_block = keys.begin / kBlockN; !keys.empty() && n_block <= (keys.end - 1) / kBlockN; ++n_block) {
    const int64_t key0 = n_block * kBlockN;
    const TileCoords c{row0, rows, key0, std::min(kBlockN, hv.seq.len_k - key0)};
    load_key_tile(p, t, hv, key0, c.cols, /*with_k=*/true);
    recompute_p_and_ds(p, t, hv, c);
    matmul_acc(t.dq, d, as_stored(t.ds, kBlockN), t.k, d, rows, d, c.cols);  // dQ += dS·K
  }
  store_tile(hv.dq, row0, rows, d, t.dq, d);
}

}  // namespace

Status backward(const BwdParams& p) {
  const int64_t n_blocks = num_blocks(p.seqlen_k, kBlockN), m_blocks = num_blocks(p.seqlen_q, kBlockM);
  const int64_t key_tasks = p.batch * p.heads_kv * n_blocks;
  const int64_t query_tasks = p.batch * p.heads_q * m_blocks;
  const int64_t most_tasks = std::max(key_tasks, query_tasks);
  if (most_tasks == 0) return Status::success();
  const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), most_tasks));
  ThreadScratch scratch(threads, BackwardTiles::floats(p.hdim_qk, p.hdim_v));

#pragma omp parallel num_threads(threads)
  {
    ThreadScratch::Carver carver(scratch.of_thread(omp_get_thread_num()));
    const BackwardTiles tiles = BackwardTiles::carve(carver, p.hdim_qk, p.hdim_v);
    // Pass 1, first key blocks first: under a causal mask they are seen by the most query rows.
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < key_tasks; ++task) {
      const int64_t bh = task / n_blocks;
      dkdv_block(p, tiles, bh / p.heads_kv, bh % p.heads_kv, task % n_blocks);
    }
    // Pass 2, last query blocks first: they see the most keys.
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < query_tasks; ++task) {
      const int64_t bh = task / m_blocks;
      dq_block(p, tiles, bh / p.heads_q, bh % p.heads_q, m_blocks - 1 - task % m_blocks);
    }
  }
  return Status::success();
}

}  // namespace flashattn::cpu
