#include "cpu/reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>
#include <type_traits>

#include "cpu/convert.hpp"
#include "cpu/score.hpp"

namespace flashattn::reference {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A [.., rows, heads, dim] tensor as the params describe it, on the query or the key side.
struct RowsDesc {
  const void* data;
  DType dtype;
  int64_t batch_stride, row_stride, head_stride;
  int64_t heads, dim;
  bool q_side;
};

// Calls f(packed_row, element_offset_of_row) for every row of every sequence, where the element
// offset is that of (b, i, head 0, 0) in the params' indexing (see params.hpp).
template <class F>
void for_each_row(const FwdParams& p, const Layout& L, const RowsDesc& t, F&& f) {
  for (int64_t b = 0; b < L.batch; ++b) {
    const Sequence& s = L.seqs[b];
    const int64_t begin = t.q_side ? s.q_begin : s.k_begin;
    const int64_t len = t.q_side ? s.q_len : s.k_len;
    const int64_t row_offset = p.is_varlen() ? begin : 0;
    for (int64_t i = 0; i < len; ++i) f(begin + i, b * t.batch_stride + (row_offset + i) * t.row_stride);
  }
}

// Reads a tensor into packed [total rows][heads][dim] of T (exact: every dtype fits in float).
template <class T>
std::vector<T> gather(const FwdParams& p, const Layout& L, const RowsDesc& t) {
  const int64_t total = t.q_side ? L.total_q : L.total_k;
  std::vector<T> g(static_cast<size_t>(total * t.heads * t.dim), static_cast<T>(kNaN));
  for_each_row(p, L, t, [&](int64_t row, int64_t offset) {
    T* dst = &g[static_cast<size_t>(row * t.heads * t.dim)];
    for (int64_t h = 0; h < t.heads; ++h) {
      for (int64_t d = 0; d < t.dim; ++d) {
        dst[h * t.dim + d] = load_as_float(t.data, t.dtype, offset + h * t.head_stride + d);
      }
    }
  });
  return g;
}

RowsDesc q_desc(const FwdParams& p) {
  return {p.q, p.dtype, p.q_batch_stride, p.q_row_stride, p.q_head_stride, p.heads_q, p.hdim_qk, true};
}
RowsDesc k_desc(const FwdParams& p) {
  return {p.k, p.dtype, p.k_batch_stride, p.k_row_stride, p.k_head_stride, p.heads_kv, p.hdim_qk, false};
}
RowsDesc v_desc(const FwdParams& p) {
  return {p.v, p.dtype, p.v_batch_stride, p.v_row_stride, p.v_head_stride, p.heads_kv, p.hdim_v, false};
}

// The inputs, gathered into packed arrays of the compute type T: double for Precision::f64, float
// for Precision::same (which also rounds to the dtype where an application's tensors would).
template <class T>
struct Problem {
  static constexpr bool kSame = std::is_same_v<T, float>;
  Layout L;
  std::vector<T> q, k, v, dout;
  cpu::ScoreRule<T> scores;  // the score-level options (cpu/score.hpp)
  MaskParams mask;
  DType dtype = DType::f32;

  // Inputs filled in by the caller (the KV-cache oracle builds its own q, k, v).
  Problem(const Layout& layout, DType dtype_, const AttentionOptions& options) : L(layout) {
    scores = cpu::score_rule<T>(options);
    mask = mask_of(options);
    dtype = dtype_;
  }

  Problem(const FwdParams& p, const Layout& layout) : L(layout) {
    q = gather<T>(p, L, q_desc(p));
    k = gather<T>(p, L, k_desc(p));
    v = gather<T>(p, L, v_desc(p));
    scores = cpu::score_rule<T>(p.options);
    mask = mask_of(p.options);
    dtype = p.dtype;
  }

  // To the dtype's precision, where the same-precision computation stores a dtype tensor.
  T rnd(T x) const {
    if constexpr (kSame) return round_to(dtype, x);
    return x;
  }
  const T* q_row(int64_t row, int64_t h) const { return &q[static_cast<size_t>((row * L.heads_q + h) * L.hdim_qk)]; }
  const T* k_row(int64_t row, int64_t h) const { return &k[static_cast<size_t>((row * L.heads_kv + h) * L.hdim_qk)]; }
  const T* v_row(int64_t row, int64_t h) const { return &v[static_cast<size_t>((row * L.heads_kv + h) * L.hdim_v)]; }
  const T* do_row(int64_t row, int64_t h) const { return &dout[static_cast<size_t>((row * L.heads_q + h) * L.hdim_v)]; }
  int64_t kv_head(int64_t h) const { return h / (L.heads_q / L.heads_kv); }

  // S of (query, key) rows; *slope = dS/d(q·k·scale) (ScoreRule).
  T score(const T* qr, const T* kr, T* slope) const {
    T acc[4] = {0, 0, 0, 0};  // four partial sums, as a blocked dot product would
    int64_t d = 0;
    for (; d + 4 <= L.hdim_qk; d += 4) {
      for (int u = 0; u < 4; ++u) acc[u] += qr[d + u] * kr[d + u];
    }
    for (; d < L.hdim_qk; ++d) acc[0] += qr[d] * kr[d];
    return scores((acc[0] + acc[1]) + (acc[2] + acc[3]), slope);
  }
};

template <class T>
T dot(const T* a, const T* b, int64_t n) {
  T acc = 0;
  for (int64_t d = 0; d < n; ++d) acc += a[d] * b[d];
  return acc;
}

double unit_roundoff(DType dtype);

template <class T>
T abs_dot(const T* a, const T* b, int64_t n) {
  T acc = 0;
  for (int64_t d = 0; d < n; ++d) acc += std::abs(a[d] * b[d]);
  return acc;
}

template <class T>
T square_dot(const T* a, const T* b, int64_t n) {
  T acc = 0;
  for (int64_t d = 0; d < n; ++d) acc += (a[d] * b[d]) * (a[d] * b[d]);
  return acc;
}

// One query row of one head: out (hdim_v, rounded in the same precision) and lse. With `terms`
// (hdim_v entries, float64 only), Σⱼ pⱼ·(|x|ⱼ + |max| + 1)·|vⱼ| per column, |x|ⱼ = |scale|·Σ|q∘kⱼ|:
// the size of float32's error in out, whose exponents carry the scores' rounding (large logits
// amplify it).
template <class T>
void forward_row(const Problem<T>& P, const Sequence& seq, int64_t i, int64_t h, std::vector<T>& s, T* out, T* lse,
                 T* terms = nullptr) {
  int64_t lo, hi;
  key_range(seq, i, P.mask, &lo, &hi);
  const int64_t dv = P.L.hdim_v;
  if (lo > hi) {  // fully masked: out 0, lse +inf (exp(S − lse) = 0 in the backward)
    std::fill(out, out + dv, T(0));
    if (terms != nullptr) std::fill(terms, terms + dv, T(0));
    *lse = std::numeric_limits<T>::infinity();
    return;
  }
  const T* qr = P.q_row(seq.q_begin + i, h);
  const int64_t hk = P.kv_head(h);
  s.resize(static_cast<size_t>(hi - lo + 1));
  T row_max = -std::numeric_limits<T>::infinity(), unused;
  for (int64_t j = lo; j <= hi; ++j) {
    T x = P.score(qr, P.k_row(seq.k_begin + j, hk), &unused);
    s[j - lo] = x;
    if (x > row_max) row_max = x;  // NaN scores never win; they reach out through exp below
  }
  T row_sum = 0;
  for (T& x : s) {
    x = std::exp(x - row_max);
    row_sum += x;
  }
  *lse = row_max + std::log(row_sum);
  std::fill(out, out + dv, T(0));
  for (int64_t j = lo; j <= hi; ++j) {
    const T p = P.rnd(s[j - lo] / row_sum);
    const T* vr = P.v_row(seq.k_begin + j, hk);
    for (int64_t d = 0; d < dv; ++d) out[d] += p * vr[d];
  }
  for (int64_t d = 0; d < dv; ++d) out[d] = P.rnd(out[d]);
  if (terms == nullptr) return;
  std::fill(terms, terms + dv, T(0));
  for (int64_t j = lo; j <= hi; ++j) {
    const T* kr = P.k_row(seq.k_begin + j, hk);
    const T size = std::abs(P.scores.scale) * abs_dot(qr, kr, P.L.hdim_qk) + std::abs(row_max) + 1;
    const T p = s[j - lo] / row_sum;
    const T* vr = P.v_row(seq.k_begin + j, hk);
    for (int64_t d = 0; d < dv; ++d) terms[d] += p * size * std::abs(vr[d]);
  }
}

std::vector<int64_t> rows_to_compute(const std::vector<int64_t>* wanted, int64_t total, bool q_side, const Layout& L) {
  std::vector<int64_t> rows;
  auto covered = [&](int64_t r) { return r >= 0 && r < total && (q_side ? L.seq_of_q_row(r) : L.seq_of_k_row(r)) >= 0; };
  if (wanted == nullptr) {
    for (int64_t r = 0; r < total; ++r) {
      if (covered(r)) rows.push_back(r);
    }
    return rows;
  }
  for (int64_t r : *wanted) {
    if (covered(r)) rows.push_back(r);
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

Status check_host(const FwdParams& p) {
  if (p.device != Device::cpu) return Status::invalid("reference: tensors must be in host memory (device cpu)");
  return Status::success();
}

template <class T>
void forward_impl(const Problem<T>& P, const std::vector<int64_t>& rows, ForwardResult* r) {
  const Layout& L = P.L;
  const int64_t n = static_cast<int64_t>(rows.size()) * L.heads_q;
  constexpr bool kTerms = std::is_same_v<T, double>;  // only the float64 run sizes the error
  double out_terms = 0;
#pragma omp parallel reduction(max : out_terms)
  {
    std::vector<T> s, out(static_cast<size_t>(L.hdim_v)), terms(static_cast<size_t>(L.hdim_v));
#pragma omp for schedule(dynamic, 4)
    for (int64_t w = 0; w < n; ++w) {
      const int64_t row = rows[w / L.heads_q], h = w % L.heads_q;
      const Sequence& seq = L.seqs[L.seq_of_q_row(row)];
      T lse;
      forward_row(P, seq, row - seq.q_begin, h, s, out.data(), &lse, kTerms ? terms.data() : nullptr);
      double* o = &r->out[static_cast<size_t>((row * L.heads_q + h) * L.hdim_v)];
      for (int64_t d = 0; d < L.hdim_v; ++d) o[d] = out[d];
      r->lse[static_cast<size_t>(row * L.heads_q + h)] = lse;
      if constexpr (kTerms) {
        for (int64_t d = 0; d < L.hdim_v; ++d) out_terms = std::max<double>(out_terms, terms[d]);
      }
    }
  }
  r->out_terms = out_terms;
}

// Pass 1 of the backward: lse and D = rowsum(dO∘O) of every (query row, head), row·heads_q + h.
// D_terms = Σ|dO∘O| (float32's cancellation in dP − D) + the expected error of D from O stored in
// the dtype, √Σ(dO∘O)² · u/u₃₂ (the backward is given O rounded; its rounding reaches dS through
// D, amplified where dP − D cancels: few visible keys), both in units of u₃₂ / kCancellationUlps.
template <class T>
struct RowStatistics {
  std::vector<T> lse, D, D_terms;
};

template <class T>
RowStatistics<T> row_statistics(const Problem<T>& P) {
  const Layout& L = P.L;
  const int64_t Hq = L.heads_q, dv = L.hdim_v;
  const size_t nqh = static_cast<size_t>(L.total_q * Hq);
  RowStatistics<T> st{std::vector<T>(nqh, T(0)), std::vector<T>(nqh, T(0)), std::vector<T>(nqh, T(0))};
  const double dtype_rounding = unit_roundoff(P.dtype) / unit_roundoff(DType::f32) / kCancellationUlps;
  const std::vector<int64_t> all_q = rows_to_compute(nullptr, L.total_q, true, L);
  const int64_t n = static_cast<int64_t>(all_q.size()) * Hq;
#pragma omp parallel
  {
    std::vector<T> s, out(static_cast<size_t>(dv));
#pragma omp for schedule(dynamic, 4)
    for (int64_t w = 0; w < n; ++w) {
      const int64_t row = all_q[w / Hq], h = w % Hq;
      const Sequence& seq = L.seqs[L.seq_of_q_row(row)];
      forward_row(P, seq, row - seq.q_begin, h, s, out.data(), &st.lse[row * Hq + h]);
      st.D[row * Hq + h] = dot(P.do_row(row, h), out.data(), dv);
      if constexpr (std::is_same_v<T, double>) {
        st.D_terms[row * Hq + h] = abs_dot(P.do_row(row, h), out.data(), dv) +
                                   dtype_rounding * std::sqrt(square_dot(P.do_row(row, h), out.data(), dv));
      }
    }
  }
  return st;
}

// dS of (query row i of `seq`, head h) and key column j, and P; false where masked. *ds_terms:
// P·(Σ|dO∘v| + Σ|dO∘O|)·|slope|, the size of dS's cancelling parts.
template <class T>
bool grad_entry(const Problem<T>& P, const RowStatistics<T>& st, const Sequence& seq, int64_t i, int64_t h,
                int64_t j, T* p, T* ds, T* ds_terms) {
  int64_t lo, hi;
  key_range(seq, i, P.mask, &lo, &hi);
  if (j < lo || j > hi) return false;
  const int64_t Hq = P.L.heads_q, dv = P.L.hdim_v;
  const int64_t qrow = seq.q_begin + i, krow = seq.k_begin + j, hk = P.kv_head(h);
  const T lse = st.lse[qrow * Hq + h], D = st.D[qrow * Hq + h];
  T slope;
  const T x = P.score(P.q_row(qrow, h), P.k_row(krow, hk), &slope);
  *p = P.rnd(std::exp(x - lse));
  const T dp = dot(P.do_row(qrow, h), P.v_row(krow, hk), dv);
  *ds = P.rnd(*p * (dp - D) * slope);
  if (ds_terms != nullptr) {  // and P's own error, from the rounding of its exponent
    const T exponent = std::abs(P.scores.scale) * abs_dot(P.q_row(qrow, h), P.k_row(krow, hk), P.L.hdim_qk) +
                       std::abs(lse) + 1;
    *ds_terms = *p * (abs_dot(P.do_row(qrow, h), P.v_row(krow, hk), dv) + st.D_terms[qrow * Hq + h] +
                      std::abs(dp - D) * exponent) * std::abs(slope);
  }
  return true;
}

// dq of the sampled query rows, a row of S each; returns dq_terms (only the float64 run computes
// the *_terms of BackwardResult).
template <class T>
double dq_of_rows(const Problem<T>& P, const RowStatistics<T>& st, const std::vector<int64_t>& q_rows,
                  BackwardResult* r) {
  constexpr bool kTerms = std::is_same_v<T, double>;
  const Layout& L = P.L;
  const int64_t Hq = L.heads_q, dqk = L.hdim_qk;
  double dq_terms = 0;
  const int64_t n = static_cast<int64_t>(q_rows.size()) * Hq;
#pragma omp parallel reduction(max : dq_terms)
  {
    std::vector<T> acc(static_cast<size_t>(dqk)), terms(static_cast<size_t>(dqk));
#pragma omp for schedule(dynamic, 4)
    for (int64_t w = 0; w < n; ++w) {
      const int64_t row = q_rows[w / Hq], h = w % Hq;
      const Sequence& seq = L.seqs[L.seq_of_q_row(row)];
      std::fill(acc.begin(), acc.end(), T(0));
      std::fill(terms.begin(), terms.end(), T(0));
      for (int64_t j = 0; j < seq.k_len; ++j) {
        T p, ds, ds_terms;
        if (!grad_entry(P, st, seq, row - seq.q_begin, h, j, &p, &ds, kTerms ? &ds_terms : nullptr)) continue;
        const T* kr = P.k_row(seq.k_begin + j, P.kv_head(h));
        for (int64_t d = 0; d < dqk; ++d) acc[d] += ds * kr[d];
        if constexpr (kTerms) {
          for (int64_t d = 0; d < dqk; ++d) terms[d] += ds_terms * std::abs(kr[d]);
        }
      }
      double* o = &r->dq[static_cast<size_t>((row * Hq + h) * dqk)];
      for (int64_t d = 0; d < dqk; ++d) o[d] = P.rnd(acc[d] * P.scores.scale);
      for (int64_t d = 0; d < dqk; ++d) dq_terms = std::max<double>(dq_terms, terms[d] * std::abs(P.scores.scale));
    }
  }
  return dq_terms;
}

// dk and dv of the sampled key rows, a column of S each over the kv head's query heads; sets
// dk_terms and dv_terms.
template <class T>
void dk_dv_of_rows(const Problem<T>& P, const RowStatistics<T>& st, const std::vector<int64_t>& k_rows,
                   BackwardResult* r) {
  constexpr bool kTerms = std::is_same_v<T, double>;
  const Layout& L = P.L;
  const int64_t dqk = L.hdim_qk, dv = L.hdim_v;
  const int64_t Hkv = L.heads_kv, group = L.heads_q / Hkv;
  double dk_terms = 0, dv_terms = 0;
  const int64_t n = static_cast<int64_t>(k_rows.size()) * Hkv;
#pragma omp parallel reduction(max : dk_terms, dv_terms)
  {
    std::vector<T> acc_k(static_cast<size_t>(dqk)), acc_v(static_cast<size_t>(dv));
    std::vector<T> terms_k(static_cast<size_t>(dqk)), terms_v(static_cast<size_t>(dv));
#pragma omp for schedule(dynamic, 4)
    for (int64_t w = 0; w < n; ++w) {
      const int64_t krow = k_rows[w / Hkv], hk = w % Hkv;
      const Sequence& seq = L.seqs[L.seq_of_k_row(krow)];
      std::fill(acc_k.begin(), acc_k.end(), T(0));
      std::fill(acc_v.begin(), acc_v.end(), T(0));
      std::fill(terms_k.begin(), terms_k.end(), T(0));
      std::fill(terms_v.begin(), terms_v.end(), T(0));
      for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        for (int64_t i = 0; i < seq.q_len; ++i) {
          T p, ds, ds_terms;
          if (!grad_entry(P, st, seq, i, h, krow - seq.k_begin, &p, &ds, kTerms ? &ds_terms : nullptr)) continue;
          const T* qr = P.q_row(seq.q_begin + i, h);
          const T* dor = P.do_row(seq.q_begin + i, h);
          for (int64_t d = 0; d < dqk; ++d) acc_k[d] += ds * qr[d];
          for (int64_t d = 0; d < dv; ++d) acc_v[d] += p * dor[d];
          if constexpr (kTerms) {
            for (int64_t d = 0; d < dqk; ++d) terms_k[d] += ds_terms * std::abs(qr[d]);
            for (int64_t d = 0; d < dv; ++d) terms_v[d] += p * std::abs(dor[d]);
          }
        }
      }
      double* ok = &r->dk[static_cast<size_t>((krow * Hkv + hk) * dqk)];
      double* ov = &r->dv[static_cast<size_t>((krow * Hkv + hk) * dv)];
      for (int64_t d = 0; d < dqk; ++d) ok[d] = P.rnd(acc_k[d] * P.scores.scale);
      for (int64_t d = 0; d < dv; ++d) ov[d] = P.rnd(acc_v[d]);
      for (int64_t d = 0; d < dqk; ++d) dk_terms = std::max<double>(dk_terms, terms_k[d] * std::abs(P.scores.scale));
      for (int64_t d = 0; d < dv; ++d) dv_terms = std::max<double>(dv_terms, terms_v[d]);
    }
  }
  r->dk_terms = dk_terms;
  r->dv_terms = dv_terms;
}

// The backward: pass 1 recomputes lse and D of every query row; then dq of the sampled query rows
// and dk, dv of the sampled key rows.
template <class T>
void backward_impl(const Problem<T>& P, const std::vector<int64_t>& q_rows, const std::vector<int64_t>& k_rows,
                   BackwardResult* r) {
  const RowStatistics<T> st = row_statistics(P);
  r->dq_terms = dq_of_rows(P, st, q_rows, r);
  dk_dv_of_rows(P, st, k_rows, r);
}

std::vector<double> read_rows(const FwdParams& p, const RowsDesc& t) {
  const Layout L = layout_of(p);
  return gather<double>(p, L, t);
}

double unit_roundoff(DType dtype) {
  switch (dtype) {
    case DType::f16: return std::ldexp(1.0, -11);
    case DType::bf16: return std::ldexp(1.0, -8);
    default: return std::ldexp(1.0, -24);
  }
}

}  // namespace

const char* to_string(Precision precision) { return precision == Precision::f64 ? "f64" : "same"; }

namespace {

// The sequence whose packed rows [begin, begin + len) (members of Sequence) hold `row`, or -1.
int64_t seq_holding(const std::vector<Sequence>& seqs, int64_t row, int64_t Sequence::*begin, int64_t Sequence::*len) {
  auto it = std::upper_bound(seqs.begin(), seqs.end(), row, [&](int64_t r, const Sequence& s) { return r < s.*begin; });
  if (it == seqs.begin()) return -1;
  --it;
  return row < (*it).*begin + (*it).*len ? it - seqs.begin() : -1;
}

}  // namespace

int64_t Layout::seq_of_q_row(int64_t row) const { return seq_holding(seqs, row, &Sequence::q_begin, &Sequence::q_len); }

int64_t Layout::seq_of_k_row(int64_t row) const { return seq_holding(seqs, row, &Sequence::k_begin, &Sequence::k_len); }

Layout layout_of(const FwdParams& p) {
  Layout L;
  L.batch = p.batch;
  L.total_q = p.total_q;
  L.total_k = p.total_k;
  L.heads_q = p.heads_q;
  L.heads_kv = p.heads_kv;
  L.hdim_qk = p.hdim_qk;
  L.hdim_v = p.hdim_v;
  L.seqs.resize(static_cast<size_t>(p.batch));
  for (int64_t b = 0; b < p.batch; ++b) {
    Sequence& s = L.seqs[b];
    if (p.is_varlen()) {
      s.q_begin = p.cu_seqlens_q[b];
      s.q_len = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
      s.k_begin = p.cu_seqlens_k[b];
      s.k_len = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
    } else {
      s.q_begin = b * p.seqlen_q;
      s.q_len = p.seqlen_q;
      s.k_begin = b * p.seqlen_k;
      s.k_len = p.seqlen_k;
    }
  }
  return L;
}

void key_range(const Sequence& seq, int64_t i, const MaskParams& mask, int64_t* lo, int64_t* hi) {
  const int64_t diag = seq.k_len - seq.q_len;  // bottom-right alignment
  *lo = mask.window_left >= 0 ? std::max<int64_t>(0, i + diag - mask.window_left) : 0;
  *hi = mask.window_right >= 0 ? std::min<int64_t>(seq.k_len - 1, i + diag + mask.window_right) : seq.k_len - 1;
}

Status forward(const FwdParams& p, Precision precision, ForwardResult* r, const std::vector<int64_t>* q_rows) {
  Status st = check_host(p);
  if (!st.ok()) return st;
  if (p.is_paged()) {  // an oracle apart from the backends: it reads packed keys only
    return Status::invalid("reference: paged k, v (block_table); run it on the keys gathered into packed rows");
  }
  r->layout = layout_of(p);
  const Layout& L = r->layout;
  r->q_rows = rows_to_compute(q_rows, L.total_q, true, L);
  r->out.assign(static_cast<size_t>(L.total_q * L.heads_q * L.hdim_v), kNaN);
  r->lse.assign(static_cast<size_t>(L.total_q * L.heads_q), kNaN);
  if (precision == Precision::f64) {
    forward_impl(Problem<double>(p, L), r->q_rows, r);
  } else {
    forward_impl(Problem<float>(p, L), r->q_rows, r);
  }
  return Status::success();
}

Status backward(const BwdParams& p, Precision precision, BackwardResult* r, const std::vector<int64_t>* q_rows,
                const std::vector<int64_t>* k_rows) {
  Status st = check_host(p);
  if (!st.ok()) return st;
  r->layout = layout_of(p);
  const Layout& L = r->layout;
  r->q_rows = rows_to_compute(q_rows, L.total_q, true, L);
  r->k_rows = rows_to_compute(k_rows, L.total_k, false, L);
  r->dq.assign(static_cast<size_t>(L.total_q * L.heads_q * L.hdim_qk), kNaN);
  r->dk.assign(static_cast<size_t>(L.total_k * L.heads_kv * L.hdim_qk), kNaN);
  r->dv.assign(static_cast<size_t>(L.total_k * L.heads_kv * L.hdim_v), kNaN);
  const RowsDesc dout{p.dout, p.dtype, p.do_batch_stride, p.do_row_stride, p.do_head_stride, p.heads_q, p.hdim_v, true};
  if (precision == Precision::f64) {
    Problem<double> P(p, L);
    P.dout = gather<double>(p, L, dout);
    backward_impl(P, r->q_rows, r->k_rows, r);
  } else {
    Problem<float> P(p, L);
    P.dout = gather<float>(p, L, dout);
    backward_impl(P, r->q_rows, r->k_rows, r);
  }
  return Status::success();
}

// ---- the KV-cache call ----------------------------------------------------------------------

namespace {

// Cache rows cached before the call (from row 0), and the first row of sequence b's keys.
int64_t cached_keys(const KVCacheParams& p, int64_t b) { return p.cache_seqlens ? p.cache_seqlens[b] : p.seqlen_k; }
int64_t first_key_row(const KVCacheParams& p, int64_t b) { return p.cache_leftpad ? p.cache_leftpad[b] : 0; }

// Element offset of key t of sequence b, kv head h, in one side of the cache: params.hpp's
// addressing, spelled out here apart from the CPU backend's row addressing.
int64_t cache_offset(const KVCacheParams& p, int64_t b, int64_t t, int64_t h, int64_t batch_stride, int64_t row_stride,
                     int64_t head_stride) {
  if (p.block_table != nullptr) {
    const int64_t page = p.block_table[b * p.block_table_batch_stride + t / p.page_size];
    return page * batch_stride + (t % p.page_size) * row_stride + h * head_stride;
  }
  const int64_t cache_row = p.cache_batch_idx != nullptr ? p.cache_batch_idx[b] : b;
  return cache_row * batch_stride + t * row_stride + h * head_stride;
}

// x[0, rotary_dim) turned to position pos, in T (flashattn.hpp's rotary rule).
template <class T>
void rotate(T* x, const KVCacheParams& p, int64_t pos) {
  const int64_t half = p.rotary_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const T c = load_as_float(p.rotary_cos, p.dtype, pos * p.rotary_row_stride + i);
    const T s = load_as_float(p.rotary_sin, p.dtype, pos * p.rotary_row_stride + i);
    T& x0 = p.rotary_interleaved ? x[2 * i] : x[i];
    T& x1 = p.rotary_interleaved ? x[2 * i + 1] : x[i + half];
    const T a = x0, b = x1;
    x0 = a * c - b * s;
    x1 = a * s + b * c;
  }
}

// Every sequence's logical keys (or values) for kv head h: its cached rows read from the cache (from
// row cache_leftpad[b] on), then its new rows (rotated at their cache rows when `rotary`), stored in
// the dtype as the cache holds them. Packed
// [total_k][heads_kv][dim]; *appended gets the new rows alone, [batch][seqlen_new][heads_kv][dim].
template <class T>
std::vector<T> logical_rows(const KVCacheParams& p, const Layout& L, const void* cache, int64_t bs, int64_t rs,
                            int64_t hs, const void* fresh, int64_t fbs, int64_t frs, int64_t fhs, int64_t dim,
                            bool rotary, std::vector<double>* appended) {
  std::vector<T> rows(static_cast<size_t>(L.total_k * L.heads_kv * dim));
  appended->assign(static_cast<size_t>(p.batch * p.seqlen_new * L.heads_kv * dim), kNaN);
  std::vector<T> x(static_cast<size_t>(dim));
  for (int64_t b = 0; b < p.batch; ++b) {
    const Sequence& seq = L.seqs[b];
    const int64_t first = first_key_row(p, b), cached = cached_keys(p, b) - first;  // logical keys cached
    for (int64_t t = 0; t < seq.k_len; ++t) {
      for (int64_t h = 0; h < L.heads_kv; ++h) {
        const bool is_new = t >= cached;
        const int64_t at = is_new ? b * fbs + (t - cached) * frs + h * fhs : cache_offset(p, b, first + t, h, bs, rs, hs);
        for (int64_t d = 0; d < dim; ++d) x[d] = load_as_float(is_new ? fresh : cache, p.dtype, at + d);
        if (is_new && rotary) rotate(x.data(), p, first + t);
        T* dst = &rows[static_cast<size_t>(((seq.k_begin + t) * L.heads_kv + h) * dim)];
        for (int64_t d = 0; d < dim; ++d) dst[d] = round_to(p.dtype, static_cast<float>(x[d]));  // stored in the dtype
        if (!is_new) continue;
        double* out = &(*appended)[static_cast<size_t>(((b * p.seqlen_new + t - cached) * L.heads_kv + h) * dim)];
        for (int64_t d = 0; d < dim; ++d) out[d] = dst[d];
      }
    }
  }
  return rows;
}

// q, rotated at cached_keys(b) (+ i when the mask is causal or a window); the same-precision run
// rounds it to the dtype, as an application's rotated tensor would be.
template <class T>
std::vector<T> rotated_queries(const KVCacheParams& p, const Layout& L, bool round) {
  std::vector<T> q = gather<T>(p, L, q_desc(p));
  if (p.rotary_cos == nullptr) return q;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t i = 0; i < p.seqlen_q; ++i) {
      for (int64_t h = 0; h < L.heads_q; ++h) {
        T* x = &q[static_cast<size_t>(((b * p.seqlen_q + i) * L.heads_q + h) * L.hdim_qk)];
        rotate(x, p, cached_keys(p, b) + (p.rotary_per_query() ? i : 0));
        for (int64_t d = 0; round && d < L.hdim_qk; ++d) x[d] = round_to(p.dtype, static_cast<float>(x[d]));
      }
    }
  }
  return q;
}

Layout kvcache_layout(const KVCacheParams& p) {
  Layout L = layout_of(p);
  L.total_k = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    L.seqs[b].k_begin = L.total_k;
    L.seqs[b].k_len = cached_keys(p, b) - first_key_row(p, b) + p.seqlen_new;
    L.total_k += L.seqs[b].k_len;
  }
  return L;
}

template <class T>
void kvcache_impl(const KVCacheParams& p, KVCacheResult* r) {
  const Layout& L = r->attention.layout;
  Problem<T> P(L, p.dtype, p.options);
  P.q = rotated_queries<T>(p, L, Problem<T>::kSame);
  const bool rotary = p.rotary_cos != nullptr;
  P.k = logical_rows<T>(p, L, p.k_cache, p.k_batch_stride, p.k_row_stride, p.k_head_stride, p.k_new, p.kn_batch_stride,
                        p.kn_row_stride, p.kn_head_stride, L.hdim_qk, rotary, &r->k_appended);
  P.v = logical_rows<T>(p, L, p.v_cache, p.v_batch_stride, p.v_row_stride, p.v_head_stride, p.v_new, p.vn_batch_stride,
                        p.vn_row_stride, p.vn_head_stride, L.hdim_v, false, &r->v_appended);
  forward_impl(P, r->attention.q_rows, &r->attention);
}

}  // namespace

Status kvcache_forward(const KVCacheParams& p, Precision precision, KVCacheResult* r) {
  Status st = check_host(p);
  if (!st.ok()) return st;
  ForwardResult& a = r->attention;
  a.layout = kvcache_layout(p);
  a.q_rows = rows_to_compute(nullptr, a.layout.total_q, true, a.layout);
  a.out.assign(static_cast<size_t>(a.layout.total_q * a.layout.heads_q * a.layout.hdim_v), kNaN);
  a.lse.assign(static_cast<size_t>(a.layout.total_q * a.layout.heads_q), kNaN);
  if (precision == Precision::f64) {
    kvcache_impl<double>(p, r);
  } else {
    kvcache_impl<float>(p, r);
  }
  return Status::success();
}

std::vector<double> read_out(const FwdParams& p) {
  return read_rows(p, {p.out, p.dtype, p.o_batch_stride, p.o_row_stride, p.o_head_stride, p.heads_q, p.hdim_v, true});
}

std::vector<double> read_lse(const FwdParams& p) {
  const Layout L = layout_of(p);
  std::vector<double> lse(static_cast<size_t>(L.total_q * L.heads_q), kNaN);
  for (int64_t b = 0; b < L.batch; ++b) {
    const Sequence& s = L.seqs[b];
    const int64_t row_offset = p.is_varlen() ? s.q_begin : 0;
    for (int64_t i = 0; i < s.q_len; ++i) {
      for (int64_t h = 0; h < L.heads_q; ++h) {
        lse[static_cast<size_t>((s.q_begin + i) * L.heads_q + h)] =
            p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + row_offset + i];
      }
    }
  }
  return lse;
}

std::vector<double> read_dq(const BwdParams& p) {
  return read_rows(p, {p.dq, p.dtype, p.dq_batch_stride, p.dq_row_stride, p.dq_head_stride, p.heads_q, p.hdim_qk, true});
}
std::vector<double> read_dk(const BwdParams& p) {
  return read_rows(p, {p.dk, p.dtype, p.dk_batch_stride, p.dk_row_stride, p.dk_head_stride, p.heads_kv, p.hdim_qk, false});
}
std::vector<double> read_dv(const BwdParams& p) {
  return read_rows(p, {p.dv, p.dtype, p.dv_batch_stride, p.dv_row_stride, p.dv_head_stride, p.heads_kv, p.hdim_v, false});
}

std::vector<int64_t> sample_rows(int64_t total, int64_t n, uint64_t seed) {
  std::vector<int64_t> rows;
  if (total <= 0 || n <= 0) return rows;
  if (n >= total) {
    for (int64_t r = 0; r < total; ++r) rows.push_back(r);
    return rows;
  }
  rows.push_back(0);
  if (n >= 2) rows.push_back(total - 1);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> pick(0, total - 1);
  while (static_cast<int64_t>(rows.size()) < n) {
    int64_t r = pick(rng);
    if (std::find(rows.begin(), rows.end(), r) == rows.end()) rows.push_back(r);
  }
  std::sort(rows.begin(), rows.end());
  return rows;
}

double default_atol(DType dtype, double max_abs_ref) {
  // f32: the dtype's rounding no longer dominates; a kernel's exp/tanh approximations (a few ulp
  // each) and its summation order do, so allow 8 ulp of the magnitude (≈ 1e-6 relative).
  const double ulps = dtype == DType::f32 ? 16 : 2;
  return ulps * unit_roundoff(dtype) * (max_abs_ref + 0.3);
}

namespace {

// The elements that break the rule, once the bound is known (ErrorReport's failing_* fields).
void locate_failures(const std::vector<double>& got, const std::vector<double>& ref, const std::vector<int64_t>& rows,
                     int64_t width, ErrorReport* e) {
  e->failing_per_col.assign(static_cast<size_t>(width), 0);
  for (int64_t row : rows) {
    int64_t in_row = 0;
    for (int64_t c = 0; c < width; ++c) {
      const size_t idx = static_cast<size_t>(row * width + c);
      const double g = got[idx], x = ref[idx];
      const bool fails = std::isnan(x) || std::isnan(g) ? std::isnan(x) != std::isnan(g)
                                                        : g != x && !(std::abs(g - x) <= e->bound);
      if (!fails) continue;
      ++in_row;
      ++e->failing_per_col[static_cast<size_t>(c)];
    }
    if (in_row == 0) continue;
    e->failing += in_row;
    ++e->failing_rows;
    if (e->first_failing_row < 0) e->first_failing_row = row;
    e->last_failing_row = row;
  }
}

// "cols 0-63, 96-127" of the columns of head h (of width dim) in which some element fails.
std::string failing_columns(const std::vector<int64_t>& per_col, int64_t h, int64_t dim) {
  std::ostringstream m;
  int64_t run_start = -1;
  bool first = true;
  for (int64_t c = 0; c <= dim; ++c) {
    const bool fails = c < dim && per_col[static_cast<size_t>(h * dim + c)] > 0;
    if (fails && run_start < 0) run_start = c;
    if (!fails && run_start >= 0) {
      m << (first ? "" : ", ") << run_start;
      if (c - 1 > run_start) m << "-" << c - 1;
      first = false;
      run_start = -1;
    }
  }
  return m.str();
}

}  // namespace

ErrorReport check_error_rule(const std::vector<double>& got, const std::vector<double>& same,
                             const std::vector<double>& ref, const std::vector<int64_t>& rows, int64_t width,
                             DType dtype, double atol, double terms) {
  ErrorReport e;
  for (int64_t row : rows) {
    for (int64_t c = 0; c < width; ++c) {
      const double x = ref[static_cast<size_t>(row * width + c)];
      if (std::isfinite(x)) e.max_ref = std::max(e.max_ref, std::abs(x));
    }
  }
  e.atol = atol >= 0 ? atol : default_atol(dtype, e.max_ref) + kCancellationUlps * unit_roundoff(DType::f32) * terms;
  bool worst_is_nan = false;
  for (int64_t row : rows) {
    for (int64_t c = 0; c < width; ++c) {
      const size_t idx = static_cast<size_t>(row * width + c);
      const double g = got[idx], s = same[idx], x = ref[idx];
      ++e.checked;
      if (std::isnan(x) || std::isnan(g)) {
        if (std::isnan(x) != std::isnan(g)) {
          if (e.nan_mismatches++ == 0) {
            e.worst_row = row, e.worst_col = c, e.worst_got = g, e.worst_ref = x;
            worst_is_nan = true;
          }
        }
        continue;
      }
      const double err = g == x ? 0.0 : std::abs(g - x);  // equal infinities: no error
      const double same_err = s == x ? 0.0 : std::abs(s - x);
      if (std::isfinite(same_err)) e.same_error = std::max(e.same_error, same_err);
      if (err > e.max_error || (std::isnan(err) && !std::isnan(e.max_error))) {
        e.max_error = err;
        if (!worst_is_nan) e.worst_row = row, e.worst_col = c, e.worst_got = g, e.worst_ref = x;
      }
    }
  }
  e.bound = 2 * e.same_error + e.atol;
  e.ok = e.nan_mismatches == 0 && e.max_error <= e.bound;
  if (!e.ok) locate_failures(got, ref, rows, width, &e);
  return e;
}

std::string ErrorReport::describe(int64_t dim) const {
  std::ostringstream m;
  m.precision(4);
  m << (ok ? "ok" : "FAILED") << ": max error " << max_error << " vs bound " << bound << " (= 2 x same-precision error "
    << same_error << " + atol " << atol << "), max |ref| " << max_ref << ", " << checked << " elements";
  if (worst_row >= 0) {
    m << "; worst at packed row " << worst_row << ", head " << worst_col / dim << ", col " << worst_col % dim
      << ": got " << worst_got << ", ref " << worst_ref;
  }
  if (nan_mismatches > 0) m << "; " << nan_mismatches << " NaN mismatches (first reported above)";
  if (failing > 0 && dim > 0) {
    m << "; failing: " << failing << " elements in " << failing_rows << " of the checked rows (packed rows "
      << first_failing_row << ".." << last_failing_row << ")";
    const int64_t heads = static_cast<int64_t>(failing_per_col.size()) / dim;
    int64_t listed = 0;
    for (int64_t h = 0; h < heads && listed < 8; ++h) {
      const std::string cols = failing_columns(failing_per_col, h, dim);
      if (cols.empty()) continue;
      m << (listed++ == 0 ? ", head " : "; head ") << h << " cols " << cols;
    }
  }
  return m.str();
}

}  // namespace flashattn::reference
