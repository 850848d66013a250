// CPU backward: FlashAttention's backward by recomputation. P is never stored: each tile recomputes
// S = Q·Kᵀ (score.hpp: transformed, masked) and P = exp(S − LSE) from the forward's LSE, then
//   dV += Pᵀ·dO,   dP = dO·Vᵀ,   dS = P∘(dP − D) ∘ the score transform's slope,   D = rowsum(dO∘O),
//   dQ += dS·K·scale,   dK += dSᵀ·Q·scale:
// the five products of the FLOP count, once each. Tiles are transposed as in the forward
// (tile_math.hpp): Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ, dV += Pᵀ·dO, dK += dSᵀ·Q and dQᵀ += Kᵀ·dSᵀ read K, V, Q and
// dO as stored (in place when they are float); only Qᵀ and dOᵀ are made, once per query block.
// Race-free without atomics, hence deterministic: a task is (batch, kv head, split); it owns the dK,
// dV rows of its key blocks (every split-th block) and sums them over every query head of its GQA
// group and every query block that sees them. Its dQ contributions go to the split's own fp32
// accumulator, and a last pass adds the splits in order. Splits exist only to give every thread a
// task when there are fewer (batch, kv head) pairs than threads. Memory: O(N) per thread (the
// head's transposed Q, dO and its dK, dV accumulators) and the fp32 dQ accumulators.
// Two sets of products run this loop (bf16_tiles.hpp's bf16_products decides per call): float
// (FloatProducts: bf16 / f16 inputs widened to float tiles) and bf16 (Bf16Products: bf16 operands
// packed for the CPU's bf16 dot products, P and dS rounded to bf16 before their products).
#include <omp.h>

#include <algorithm>
#include <vector>

#include "cpu/bf16_tiles.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/mask.hpp"
#include "cpu/matmul.hpp"
#include "cpu/row_ops.hpp"
#include "cpu/score.hpp"
#include "cpu/tile.hpp"

namespace flashattn::cpu {
namespace {

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

// Whether the products can read a tensor's rows in place (float, rows at least `cols` apart);
// otherwise they read a widened copy.
bool in_place(const InRows& rows, int64_t cols) { return rows.dtype == DType::f32 && rows.row_stride >= cols; }

// Rows from row0 on of a tensor, as the products read them: in place, or in its widened copy
// `widened` [len][cols] (filled by widen_all, or per key block by prepare_keys).
RowBlock rows_from(const InRows& src, const float* widened, int64_t row0, int64_t cols) {
  if (in_place(src, cols)) return {static_cast<const float*>(src.data) + src.at(row0), src.row_stride};
  return {widened + row0 * cols, cols};
}
void widen_all(float* widened, const InRows& src, int64_t len, int64_t cols) {
  if (!in_place(src, cols)) load_tile(widened, cols, src, 0, len, cols);
}

// One thread's buffers, for sequences of up to len_q queries and len_k keys. Each set of products
// takes its own operands; the accumulators and the score tiles are shared.
struct BackwardScratch {
  float* delta = nullptr;  // [len_q]                  D = rowsum(dO∘O)
  float* dk = nullptr;     // [len_k][d]   dK accumulator
  float* dv = nullptr;     // [len_k][dv]  dV accumulator
  float* st = nullptr;     // [kBlockN][kBlockM]  scores, then P (transposed)
  float* dst = nullptr;    // [kBlockN][kBlockM]  dP, then dS·scale (transposed)
  float* rows = nullptr;   // [kBlockM][max(d, dv)]  staging rows (O for D; the dQ pass's output rows)
  // Float products.
  float* qt = nullptr;     // [m_blocks][d][kBlockM]   query blocks, transposed
  float* dot = nullptr;    // [m_blocks][dv][kBlockM]  dO blocks, transposed
  float* q = nullptr;      // [len_q][d]   Q widened to float (bf16, f16 inputs; also k, v, dout)
  float* dout = nullptr;   // [len_q][dv]  (bf16 products: [kBlockM][dv], one block's rows for D)
  float* k = nullptr;      // [len_k][d]
  float* v = nullptr;      // [len_k][dv]
  // bf16 products: the B operands in row pairs (words), the A operands plain.
  uint32_t* qt_pairs = nullptr;   // [m_blocks][d / 2][kBlockM]      Qᵀ (Sᵀ = K·Qᵀ)
  uint32_t* dot_pairs = nullptr;  // [m_blocks][dv / 2][kBlockM]     dOᵀ (dPᵀ = V·dOᵀ)
  uint32_t* q_pairs = nullptr;    // [m_blocks][kBlockM / 2][d]      Q (dK += dSᵀ·Q)
  uint32_t* do_pairs = nullptr;   // [m_blocks][kBlockM / 2][dv]     dO (dV += Pᵀ·dO)
  uint16_t* kt = nullptr;         // [n_blocks][d][kBlockN]          Kᵀ per key block (dQᵀ += Kᵀ·dSᵀ)
  uint16_t* pt = nullptr;         // [kBlockN][kBlockM]              Pᵀ (dV)
  uint16_t* dst_bf16 = nullptr;   // [kBlockN][kBlockM]              dSᵀ·scale (dK)
  uint32_t* ds_pairs = nullptr;   // [kBlockN / 2][kBlockM]          the same in pairs (dQᵀ)

  static BackwardScratch carve(ThreadScratch::Carver& c, const BwdParams& p, bool bf16) {
    const int64_t d = p.hdim_qk, dv = p.hdim_v, len_q = p.seqlen_q, len_k = p.seqlen_k;
    const int64_t m_rows = num_blocks(len_q, kBlockM) * kBlockM, n_rows = num_blocks(len_k, kBlockN) * kBlockN;
    BackwardScratch t{c.take(len_q), c.take(len_k * d), c.take(len_k * dv), c.take(kBlockN * kBlockM),
                      c.take(kBlockN * kBlockM), c.take(kBlockM * std::max(d, dv))};
    if (bf16) {
      t.qt_pairs = c.take_words(m_rows * d / 2);
      t.dot_pairs = c.take_words(m_rows * dv / 2);
      t.q_pairs = c.take_words(m_rows / 2 * d);
      t.do_pairs = c.take_words(m_rows / 2 * dv);
      t.kt = c.take_bf16(n_rows * d);
      t.pt = c.take_bf16(kBlockN * kBlockM);
      t.dst_bf16 = c.take_bf16(kBlockN * kBlockM);
      t.ds_pairs = c.take_words(kBlockN / 2 * kBlockM);
      t.dout = c.take(kBlockM * dv);  // staging: one block of dO rows widened, for D
      return t;
    }
    const bool widen = p.dtype != DType::f32;  // (a float tensor with overlapping rows widens too: rare)
    const int64_t wq = widen || p.q_row_stride < d ? len_q : 0, wdo = widen || p.do_row_stride < dv ? len_q : 0;
    const int64_t wk = widen || p.k_row_stride < d ? len_k : 0, wv = widen || p.v_row_stride < dv ? len_k : 0;
    t.qt = c.take(m_rows * d);
    t.dot = c.take(m_rows * dv);
    t.q = c.take(wq * d);
    t.dout = c.take(wdo * dv);
    t.k = c.take(wk * d);
    t.v = c.take(wv * dv);
    return t;
  }
};

// The fp32 dQ accumulators: per split, (batch, query head) and query block, a transposed tile
// [d][kBlockM].
struct DqAccumulators {
  int64_t splits, batch, heads, m_blocks, d;
  std::vector<float> data;

  DqAccumulators(const BwdParams& p, int64_t splits_)
      : splits(splits_), batch(p.batch), heads(p.heads_q), m_blocks(num_blocks(p.seqlen_q, kBlockM)), d(p.hdim_qk),
        data(static_cast<size_t>(splits * batch * heads * m_blocks * d * kBlockM)) {}

  float* tile(int64_t split, int64_t b, int64_t h, int64_t m_block) {
    return data.data() + (((split * batch + b) * heads + h) * m_blocks + m_block) * d * kBlockM;
  }
};

// D = rowsum(dO∘O) of one query block, from the stored (rounded) O as the forward wrote it and dO as
// `dout` reads it (row by row; float).
void block_delta(float* delta, const HeadView& hv, int64_t row0, int64_t rows, int64_t dv, RowBlock dout,
                 float* staging) {
  const RowBlock out = row_block(hv.out, row0, rows, dv, staging);
  for (int64_t r = 0; r < rows; ++r) delta[row0 + r] = row_dot(dout.data + r * dout.ld, out.data + r * out.ld, dv);
}

// The five products in float: Q, K, V, dO read in place when they are float, else widened.
struct FloatProducts {
  const BwdParams& p;
  const BackwardScratch& t;

  // Per task: K and V of the task's key blocks, widened when they are not float.
  void prepare_keys(const HeadView& first_head, int64_t split, int64_t splits) const {
    const int64_t d = p.hdim_qk, dv = p.hdim_v, len_k = first_head.seq.len_k;
    for (int64_t key0 = split * kBlockN; key0 < len_k; key0 += splits * kBlockN) {
      const int64_t cols = std::min(kBlockN, len_k - key0);
      if (!in_place(first_head.k, d)) load_tile(t.k + key0 * d, d, first_head.k, key0, cols, d);
      if (!in_place(first_head.v, dv)) load_tile(t.v + key0 * dv, dv, first_head.v, key0, cols, dv);
    }
  }

  // Per query head: Qᵀ and dOᵀ of every query block, D, and the widened Q and dO when they are not
  // read in place.
  void prepare_queries(const HeadView& hv) const {
    const int64_t d = p.hdim_qk, dv = p.hdim_v, len_q = hv.seq.len_q;
    widen_all(t.q, hv.q, len_q, d);
    widen_all(t.dout, hv.dout, len_q, dv);
    for (int64_t row0 = 0; row0 < len_q; row0 += kBlockM) {
      const int64_t rows = std::min(kBlockM, len_q - row0), m_block = row0 / kBlockM;
      const RowBlock q = rows_from(hv.q, t.q, row0, d), dout = rows_from(hv.dout, t.dout, row0, dv);
      transpose_into_tile(t.qt + m_block * d * kBlockM, q.data, q.ld, rows, d);
      transpose_into_tile(t.dot + m_block * dv * kBlockM, dout.data, dout.ld, rows, dv);
      block_delta(t.delta, hv, row0, rows, dv, dout, t.rows);
    }
  }

  // One (query block, key block) step: recompute Pᵀ and dSᵀ, then dV += Pᵀ·dO, dK += dSᵀ·Q (into the
  // task's accumulators at the key block's rows) and dQᵀ += Kᵀ·dSᵀ (into the query block's tile).
  void step(const HeadView& hv, const TileCoords& c, float* dq_t) const {
    const int64_t d = p.hdim_qk, dv = p.hdim_v, m_block = c.row0 / kBlockM;
    const RowBlock k = rows_from(hv.k, t.k, c.key0, d), v = rows_from(hv.v, t.v, c.key0, dv);
    score_tile(t.st, k, t.qt + m_block * d * kBlockM, d, c, p.options, hv.mask);
    clear_tile(t.dst, c.cols, c.rows);
    matmul_acc(t.dst, kBlockM, as_stored(v.data, v.ld), t.dot + m_block * dv * kBlockM, kBlockM, c.cols, c.rows, dv);  // dPᵀ
    probs_and_dscores(t.st, t.dst, c.cols, c.rows, hv.lse + c.row0, t.delta + c.row0, score_chain(p.options));

    const RowBlock q = rows_from(hv.q, t.q, c.row0, d), dout = rows_from(hv.dout, t.dout, c.row0, dv);
    matmul_acc(t.dv + c.key0 * dv, dv, as_stored(t.st, kBlockM), dout.data, dout.ld, c.cols, dv, c.rows);  // dV += Pᵀ·dO
    matmul_acc(t.dk + c.key0 * d, d, as_stored(t.dst, kBlockM), q.data, q.ld, c.cols, d, c.rows);         // dK += dSᵀ·Q
    matmul_acc(dq_t, kBlockM, transposed(k.data, k.ld), t.dst, kBlockM, d, c.rows, c.cols);              // dQᵀ += Kᵀ·dSᵀ
  }
};

// The same five products on bf16 operands (bf16 inputs only): K and V are read in place as the
// products' A; Qᵀ, dOᵀ, Q and dO of every query block are packed in pairs once per query head, Kᵀ once
// per task; P and dS are rounded to bf16 per step. Reductions of odd length run one longer on zeros.
struct Bf16Products {
  const BwdParams& p;
  const BackwardScratch& t;

  // Per task: Kᵀ of the task's key blocks.
  void prepare_keys(const HeadView& first_head, int64_t split, int64_t splits) const {
    const int64_t d = p.hdim_qk, len_k = first_head.seq.len_k;
    for (int64_t key0 = split * kBlockN; key0 < len_k; key0 += splits * kBlockN)
      load_transposed_bf16(t.kt + key0 * d, kBlockN, first_head.k, key0, std::min(kBlockN, len_k - key0), d);
  }

  void prepare_queries(const HeadView& hv) const {
    const int64_t d = p.hdim_qk, dv = p.hdim_v, len_q = hv.seq.len_q;
    for (int64_t row0 = 0; row0 < len_q; row0 += kBlockM) {
      const int64_t rows = std::min(kBlockM, len_q - row0);
      load_pairs_transposed(t.qt_pairs + row0 * d / 2, hv.q, row0, rows, d);
      load_pairs_transposed(t.dot_pairs + row0 * dv / 2, hv.dout, row0, rows, dv);
      load_pairs(t.q_pairs + row0 / 2 * d, d, hv.q, row0, rows, d);
      load_pairs(t.do_pairs + row0 / 2 * dv, dv, hv.dout, row0, rows, dv);
      block_delta(t.delta, hv, row0, rows, dv, row_block(hv.dout, row0, rows, dv, t.dout), t.rows);
    }
  }

  void step(const HeadView& hv, const TileCoords& c, float* dq_t) const {
    const int64_t d = p.hdim_qk, dv = p.hdim_v;
    const int64_t rows_even = round_up_even(c.rows), cols_even = round_up_even(c.cols);
    // In place, never gathered (no tile): bf16_products admits only K, V rows that do not overlap.
    const Bf16Block k = bf16_block(hv.k, c.key0, c.cols, d, nullptr), v = bf16_block(hv.v, c.key0, c.cols, dv, nullptr);
    score_tile_bf16(t.st, k, t.qt_pairs + c.row0 * d / 2, d, c, p.options, hv.mask);
    clear_tile(t.dst, c.cols, c.rows);
    matmul_acc_bf16(t.dst, kBlockM, v.data, v.ld, t.dot_pairs + c.row0 * dv / 2, kBlockM, c.cols, c.rows, dv);  // dPᵀ
    probs_and_dscores(t.st, t.dst, c.cols, c.rows, hv.lse + c.row0, t.delta + c.row0, score_chain(p.options));
    round_tile_bf16(t.pt, kBlockM, t.st, kBlockM, c.cols, c.rows, rows_even);
    round_tile_bf16(t.dst_bf16, kBlockM, t.dst, kBlockM, c.cols, c.rows, rows_even);
    pack_pairs_bf16(t.ds_pairs, kBlockM, t.dst, kBlockM, c.cols, c.rows);

    matmul_acc_bf16(t.dv + c.key0 * dv, dv, t.pt, kBlockM, t.do_pairs + c.row0 / 2 * dv, dv, c.cols, dv, rows_even);
    matmul_acc_bf16(t.dk + c.key0 * d, d, t.dst_bf16, kBlockM, t.q_pairs + c.row0 / 2 * d, d, c.cols, d, rows_even);
    matmul_acc_bf16(dq_t, kBlockM, t.kt + c.key0 * d, kBlockN, t.ds_pairs, kBlockM, d, c.rows, cols_even);
  }
};

// Key blocks per sweep over the query blocks (the backward's taller tile, as the forward's
// kMaxQueryBlocksPerTask).
constexpr int64_t kKeyBlocksPerSweep = 8;

// One task: kv head h_kv of sequence b, key blocks split, split + splits, ...
template <class Products>
void backward_task(const BwdParams& p, const BackwardScratch& t, const Products& products, DqAccumulators& dq,
                   int64_t b, int64_t h_kv, int64_t split) {
  const int64_t d = p.hdim_qk, dv = p.hdim_v, group = p.group_size(), splits = dq.splits;
  const HeadView first_head(p, b, h_kv * group);
  const Sequence& seq = first_head.seq;
  const int64_t n_blocks = num_blocks(seq.len_k, kBlockN);
  if (split >= n_blocks) return;
  products.prepare_keys(first_head, split, splits);
  std::fill(t.dk, t.dk + seq.len_k * d, 0.f);
  std::fill(t.dv, t.dv + seq.len_k * dv, 0.f);

  // Key blocks go in groups of kKeyBlocksPerSweep: one sweep over the query blocks serves the whole
  // group, so each query block's tiles (Qᵀ, dOᵀ, Q, dO) are read once per group, not once per key block.
  const int64_t group_stride = kKeyBlocksPerSweep * splits;
  for (int64_t h = h_kv * group; h < (h_kv + 1) * group && seq.len_q > 0; ++h) {
    const HeadView hv(p, b, h);
    products.prepare_queries(hv);
    for (int64_t first = split; first < n_blocks; first += group_stride) {
      const int64_t last = std::min(first + group_stride - splits, (n_blocks - 1 - split) / splits * splits + split);
      const Range rows = hv.mask.rows_of_keys({first * kBlockN, std::min(seq.len_k, (last + 1) * kBlockN)});
      for (int64_t m_block = rows.begin / kBlockM; !rows.empty() && m_block <= (rows.end - 1) / kBlockM; ++m_block) {
        const int64_t row0 = m_block * kBlockM, m_rows = std::min(kBlockM, seq.len_q - row0);
        for (int64_t n_block = first; n_block <= last; n_block += splits) {
          const int64_t key0 = n_block * kBlockN, cols = std::min(kBlockN, seq.len_k - key0);
          const Range seen_by = hv.mask.rows_of_keys({key0, key0 + cols});
          if (seen_by.empty() || row0 >= seen_by.end || row0 + m_rows <= seen_by.begin) continue;
          products.step(hv, {row0, m_rows, key0, cols}, dq.tile(split, b, h, m_block));
        }
      }
    }
  }
  for (int64_t n_block = split; n_block < n_blocks; n_block += splits) {
    const int64_t key0 = n_block * kBlockN, cols = std::min(kBlockN, seq.len_k - key0);
    store_tile(first_head.dk, key0, cols, d, t.dk + key0 * d, d);
    store_tile(first_head.dv, key0, cols, dv, t.dv + key0 * dv, dv);
  }
}

// The last pass: dQ of one query block, the splits' accumulators added in order.
void store_dq_block(const BwdParams& p, const BackwardScratch& t, DqAccumulators& dq, int64_t b, int64_t h,
                    int64_t m_block) {
  const HeadView hv(p, b, h);
  const int64_t row0 = m_block * kBlockM, d = p.hdim_qk;
  if (row0 >= hv.seq.len_q) return;
  const int64_t rows = std::min(kBlockM, hv.seq.len_q - row0);
  const float* parts[64];
  for (int64_t s = 0; s < dq.splits; ++s) parts[s] = dq.tile(s, b, h, m_block);
  sum_transposed_tiles(t.rows, d, parts, dq.splits, rows, d);
  store_tile(hv.dq, row0, rows, d, t.rows, d);
}

}  // namespace

Status backward(const BwdParams& p) {
  const int64_t n_blocks = num_blocks(p.seqlen_k, kBlockN), m_blocks = num_blocks(p.seqlen_q, kBlockM);
  const int64_t kv_heads = p.batch * p.heads_kv;
  if (kv_heads == 0 || (n_blocks == 0 && m_blocks == 0)) return Status::success();
  const int64_t max_threads = omp_get_max_threads();
  // Splits of a kv head's key blocks: enough for every thread to have a task (at most 64, the
  // last pass's table), never more than there are key blocks.
  const int64_t splits = std::clamp<int64_t>(num_blocks(max_threads, kv_heads), 1, std::min<int64_t>(64, std::max<int64_t>(n_blocks, 1)));
  const int64_t tasks = kv_heads * splits, dq_tasks = p.batch * p.heads_q * m_blocks;
  const int threads = static_cast<int>(std::min(max_threads, std::max(tasks, dq_tasks)));
  const bool bf16 = bf16_products(p);
  ThreadScratch scratch(threads, ThreadScratch::floats_of<BackwardScratch>(p, bf16));
  DqAccumulators dq(p, splits);

#pragma omp parallel num_threads(threads)
  {
    ThreadScratch::Carver carver(scratch.of_thread(omp_get_thread_num()));
    const BackwardScratch t = BackwardScratch::carve(carver, p, bf16);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t bh = task / splits;
      if (bf16)
        backward_task(p, t, Bf16Products{p, t}, dq, bh / p.heads_kv, bh % p.heads_kv, task % splits);
      else
        backward_task(p, t, FloatProducts{p, t}, dq, bh / p.heads_kv, bh % p.heads_kv, task % splits);
    }
#pragma omp for schedule(static)
    for (int64_t task = 0; task < dq_tasks; ++task) {
      const int64_t bh = task / m_blocks;
      store_dq_block(p, t, dq, bh / p.heads_q, bh % p.heads_q, task % m_blocks);
    }
  }
  return Status::success();
}

}  // namespace flashattn::cpu
