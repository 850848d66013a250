// The naive reference: attention computed row by row straight from the definition, in float64
// (the oracle every backend is checked against) or in the inputs' own precision (the yardstick of
// the error rule). Host memory only; tests and the CLI use it, the library never does.
//
// It reads the validated FwdParams / BwdParams (any dtype, any strides, padded or varlen batches,
// GQA/MQA, masks, the score options of cpu/score.hpp, hdim_v ≠ hdim_qk) with HOST pointers, and
// ignores the outputs they point to (out, lse, dq, dk, dv): the reference computes everything
// itself, the backward included.
//
// Results are contiguous doubles in PACKED row order: query row i of batch b is packed row
// b·seqlen_q + i (padded) or cu_seqlens_q[b] + i (varlen); key rows alike with seqlen_k / cu_seqlens_k.
//   out [total_q][heads_q][hdim_v]   lse [total_q][heads_q]   (+inf on a fully masked row)
//   dq  [total_q][heads_q][hdim_qk]  dk [total_k][heads_kv][hdim_qk]  dv [total_k][heads_kv][hdim_v]
// Rows that were not computed (not sampled, or in no sequence of a varlen batch) hold NaN; the
// result lists the rows it computed.
//
// Cost: one row of S per thread at a time (OpenMP), O(threads · seqlen_k) scratch, so large sizes
// can be checked on a sample of rows. The backward's dk, dv of one key row need P over all query
// rows, so it first computes lse and D = rowsum(dO∘O) of every query row (a full forward), then only
// the sampled query rows (dq) and key rows (dk, dv).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/params.hpp"

namespace flashattn::reference {

enum class Precision {
  // The exact function, computed in float64 from the inputs' values: the oracle.
  f64,
  // The naive computation an application would do in the inputs' dtype: scores, softmax and
  // every sum in float32 from the dtype inputs; P (and in the backward dS) rounded to the dtype
  // before each product with a dtype tensor; out, dq, dk, dv rounded to the dtype; lse in float32.
  // Its distance to f64 is the yardstick of the error rule (for f32 inputs: a float32 naive run).
  same,
};
const char* to_string(Precision precision);

// One sequence of the batch, in packed rows.
struct Sequence {
  int64_t q_begin = 0, q_len = 0;  // packed query rows [q_begin, q_begin + q_len)
  int64_t k_begin = 0, k_len = 0;  // packed key rows   [k_begin, k_begin + k_len)
};

// The batch as packed rows: what the result arrays are indexed by.
struct Layout {
  int64_t batch = 0, total_q = 0, total_k = 0;
  int64_t heads_q = 0, heads_kv = 0, hdim_qk = 0, hdim_v = 0;
  std::vector<Sequence> seqs;  // [batch]

  // The sequence a packed query (key) row belongs to, or −1 for a row in none (varlen padding).
  int64_t seq_of_q_row(int64_t row) const;
  int64_t seq_of_k_row(int64_t row) const;
};
Layout layout_of(const FwdParams& params);

// The key columns [lo, hi] that query row i of `seq` may see (lo > hi: the row is fully masked).
void key_range(const Sequence& seq, int64_t i, const MaskParams& mask, int64_t* lo, int64_t* hi);

struct ForwardResult {
  Layout layout;
  std::vector<double> out;      // [total_q][heads_q][hdim_v]
  std::vector<double> lse;      // [total_q][heads_q]
  std::vector<int64_t> q_rows;  // the packed query rows computed, ascending
  // The largest Σ|term| behind an element of out, with each probability weighted by the size of its
  // exponent (scores and max): float32 rounds the exponent, and large logits amplify that. The
  // error rule's atol grows with it (check_error_rule's `terms`). Set by the float64 forward.
  double out_terms = 0;
};

struct BackwardResult {
  Layout layout;
  std::vector<double> dq;       // [total_q][heads_q][hdim_qk]
  std::vector<double> dk;       // [total_k][heads_kv][hdim_qk]
  std::vector<double> dv;       // [total_k][heads_kv][hdim_v]
  std::vector<int64_t> q_rows;  // packed query rows whose dq was computed, ascending
  std::vector<int64_t> k_rows;  // packed key rows whose dk, dv were computed, ascending
  // Per tensor, the largest Σ|term| of an element's sum with dS's cancelling parts counted apart:
  // dS = P∘(dP − D) is computed in float32 as a difference of two dot products, so where the exact
  // gradient is 0 (one visible key: dP = D) the computed one is float32 rounding of this size. The
  // error rule's atol grows with it (check_error_rule's `terms`). Set by the float64 backward.
  double dq_terms = 0, dk_terms = 0, dv_terms = 0;
};

// The forward on all query rows, or on the packed rows listed in `q_rows` (any order, duplicates
// and rows in no sequence are dropped). Fails (invalid_argument) on non-host params, and on paged
// k, v (block_table): the oracle of a paged forward is this one on the keys gathered into packed rows.
Status forward(const FwdParams& params, Precision precision, ForwardResult* result,
               const std::vector<int64_t>* q_rows = nullptr);

// The backward of loss = Σ out∘dout: dq on all query rows or those in `q_rows`, dk and dv on all
// key rows or those in `k_rows`. Uses q, k, v, dout of the params (not their out, lse).
Status backward(const BwdParams& params, Precision precision, BackwardResult* result,
                const std::vector<int64_t>* q_rows = nullptr, const std::vector<int64_t>* k_rows = nullptr);

// ---- the KV-cache call (KVCacheParams) ---------------------------------------------------------
// An oracle written apart from the CPU backend: it reads the cache as it was BEFORE the call (run
// it first, or on a copy: the library appends in place), applies the append and the rotary
// embedding itself, builds each sequence's keys and values from params.hpp's addressing (paged or
// contiguous, cache_batch_idx), and attends with the forward's row computation. The appended rows
// are what the cache holds: rotated, then rounded to the dtype (in both precisions); q is rotated
// in the precision (and rounded to the dtype by the same-precision run). Assumes no two sequences
// append into rows another one uses. Query rows are packed b·seqlen_q + i, so read_out and read_lse
// of the params read the backend's results in the same layout.
struct KVCacheResult {
  ForwardResult attention;         // out, lse, q_rows (all), out_terms; layout.seqs[b].k_len = its keys
  std::vector<double> k_appended;  // [batch][seqlen_new][heads_kv][hdim_qk]: the rows appended to k_cache
  std::vector<double> v_appended;  // [batch][seqlen_new][heads_kv][hdim_v]
};
Status kvcache_forward(const KVCacheParams& params, Precision precision, KVCacheResult* result);

// ---- reading a backend's outputs in the same packed layout (host pointers; NaN off-sequence) ----
std::vector<double> read_out(const FwdParams& params);  // [total_q][heads_q][hdim_v]
std::vector<double> read_lse(const FwdParams& params);  // [total_q][heads_q]
std::vector<double> read_dq(const BwdParams& params);   // [total_q][heads_q][hdim_qk]
std::vector<double> read_dk(const BwdParams& params);   // [total_k][heads_kv][hdim_qk]
std::vector<double> read_dv(const BwdParams& params);   // [total_k][heads_kv][hdim_v]

// `n` distinct rows of [0, total), ascending: the first and last rows always, the rest uniformly
// at random from `seed`. All rows when n ≥ total.
std::vector<int64_t> sample_rows(int64_t total, int64_t n, uint64_t seed);

// ---- the error rule (FlashAttention's) --------------------------------------------------------
// max|got − ref| ≤ 2 · max|same − ref| + atol, max-abs over the listed rows of one tensor of
// [rows][width] (width = heads · dim). Where ref is NaN, got must be NaN (and is not counted).
// atol = default_atol(dtype, max|ref|) + kCancellationUlps·u32·terms unless given: for f16 and
// bf16 twice the rounding error of the dtype at the tensor's magnitude, 2·u·(max|ref| + 0.3) with
// u the unit roundoff (an upper bound of FlashAttention's 2·|(ref + 0.3 − 0.3) − ref|); for f32,
// where rounding to the dtype no longer dominates but exp/tanh approximations and summation order
// do, 16·u·(max|ref| + 0.3). The second term (BackwardResult's *_terms; 0 for the forward) keeps
// the rule meaningful where the exact value is 0 but float32 arithmetic cannot reach it: a
// gradient that is a difference of equal dot products.
struct ErrorReport {
  bool ok = true;
  double max_error = 0;   // max |got − ref|
  double same_error = 0;  // max |same − ref|
  double atol = 0;
  double bound = 0;       // 2 · same_error + atol
  double max_ref = 0;     // max |ref|
  int64_t worst_row = -1, worst_col = -1;  // where max_error (or the first NaN mismatch) is
  double worst_got = 0, worst_ref = 0;
  int64_t nan_mismatches = 0;  // elements where exactly one of got, ref is NaN
  int64_t checked = 0;         // elements compared
  // Where the rule fails (counted only then): elements over the bound or NaN-mismatched, the rows
  // they lie in (first and last of the listed rows) and, per column of [width], how many. A kernel
  // defect tends to show as a pattern here (one head, a column range, rows from some block on).
  int64_t failing = 0, failing_rows = 0, first_failing_row = -1, last_failing_row = -1;
  std::vector<int64_t> failing_per_col;
  std::string describe(int64_t dim) const;  // "max error 1.2e-3 at row 5, head 1, col 7 (...)"
};
double default_atol(DType dtype, double max_abs_ref);
constexpr double kCancellationUlps = 4;
ErrorReport check_error_rule(const std::vector<double>& got, const std::vector<double>& same,
                             const std::vector<double>& ref, const std::vector<int64_t>& rows, int64_t width,
                             DType dtype, double atol = -1, double terms = 0);

}  // namespace flashattn::reference
