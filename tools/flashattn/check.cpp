#include "check.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "api/validate.hpp"
#include "flops.hpp"
#include "progress.hpp"

namespace fa_cli {

namespace ref = flashattn::reference;
using flashattn::Status;

namespace {

// Progress of the check, weighted by each reference call's share of the work (score entries
// evaluated): a forward row costs one row of S, the backward one full forward plus its samples.
class Steps {
 public:
  Steps(bool enabled, double total_work) : progress_(enabled, "reference"), total_(total_work) {}
  void done(double work) { progress_.fraction((done_ += work) / total_); }
  void note(const std::string& what) {
    char pct[16];
    std::snprintf(pct, sizeof pct, "%.0f%% ", 100.0 * done_ / total_);
    progress_.note(pct + what);
  }

 private:
  Progress progress_;
  double total_, done_ = 0;
};

constexpr int64_t kForwardChunks = 16;  // reference calls per precision for a full forward check

// Copies the rows `from` computed into `into` (both [total_q][heads_q][..] packed).
void merge_rows(const ref::ForwardResult& from, ref::ForwardResult* into) {
  const std::size_t out_w = into->out.size() / static_cast<std::size_t>(std::max<int64_t>(1, into->layout.total_q));
  const std::size_t lse_w = into->lse.size() / static_cast<std::size_t>(std::max<int64_t>(1, into->layout.total_q));
  for (int64_t row : from.q_rows) {
    const std::size_t r = static_cast<std::size_t>(row);
    std::copy_n(&from.out[r * out_w], out_w, &into->out[r * out_w]);
    std::copy_n(&from.lse[r * lse_w], lse_w, &into->lse[r * lse_w]);
    into->q_rows.push_back(row);
  }
  into->out_terms = std::max(into->out_terms, from.out_terms);
}

// The forward reference in one precision: on the sampled rows in one call, or on all rows in
// chunks (so progress can be shown), merged into one result.
Status forward_reference(const flashattn::FwdParams& p, ref::Precision precision, const std::vector<int64_t>* rows,
                         int64_t total_q, Steps* steps, ref::ForwardResult* result) {
  if (rows != nullptr) {
    Status s = ref::forward(p, precision, result, rows);
    steps->done(static_cast<double>(rows->size()) / static_cast<double>(total_q));
    return s;
  }
  const int64_t chunk = std::max<int64_t>(1, (total_q + kForwardChunks - 1) / kForwardChunks);
  for (int64_t begin = 0; begin < total_q; begin += chunk) {
    std::vector<int64_t> part;
    for (int64_t r = begin; r < std::min(total_q, begin + chunk); ++r) part.push_back(r);
    ref::ForwardResult piece;
    Status s = ref::forward(p, precision, &piece, &part);
    if (!s.ok()) return s;
    if (begin == 0) {
      *result = std::move(piece);
    } else {
      merge_rows(piece, result);
    }
    steps->done(static_cast<double>(part.size()) / static_cast<double>(total_q));
  }
  return flashattn::Status::success();
}

}  // namespace

TensorCheck check_tensor(const char* name, int64_t dim, const std::vector<double>& got,
                         const std::vector<double>& same, const std::vector<double>& f64,
                         const std::vector<int64_t>& rows, int64_t width, flashattn::DType dtype, double terms) {
  TensorCheck t;
  t.name = name;
  t.dim = dim;
  t.error = ref::check_error_rule(got, same, f64, rows, width, dtype, -1, terms);
  return t;
}

Status check_outputs(const Layout& l, const RunConfig& c, const Tensors& host, CheckResult* r) {
  const auto t0 = std::chrono::steady_clock::now();
  *r = CheckResult{};
  r->ran = true;
  r->total_q = l.total_q;
  r->total_k = l.total_k;
  r->sampled = score_entries(l) > kFullCheckEntries;
  std::vector<int64_t> q_sample, k_sample;
  if (r->sampled) {
    q_sample = ref::sample_rows(l.total_q, kSampledRows, c.seed ^ 0x51u);
    k_sample = ref::sample_rows(l.total_k, kSampledRows, c.seed ^ 0x4bu);
  }
  const std::vector<int64_t>* q_rows = r->sampled ? &q_sample : nullptr;
  const std::vector<int64_t>* k_rows = r->sampled ? &k_sample : nullptr;
  const double q_share = r->sampled ? static_cast<double>(q_sample.size()) / l.total_q : 1.0;
  const double k_share = r->sampled ? static_cast<double>(k_sample.size()) / l.total_k : 1.0;
  const double backward_work = 1.0 + 2.0 * q_share + 2.0 * k_share;
  Steps steps(!c.quiet, 2.0 * (q_share + (c.backward ? backward_work : 0.0)));

  // The outputs as the reference reads them: validated params over the host tensors.
  flashattn::FwdParams fp;
  Status s = flashattn::to_params(forward_args(l, c, host, nullptr), &fp);
  if (!s.ok()) return s;
  ref::ForwardResult f64, same;
  s = forward_reference(fp, ref::Precision::f64, q_rows, l.total_q, &steps, &f64);
  if (s.ok()) s = forward_reference(fp, ref::Precision::same, q_rows, l.total_q, &steps, &same);
  if (!s.ok()) return s;
  r->q_rows = static_cast<int64_t>(f64.q_rows.size());
  r->tensors.push_back(check_tensor("out", l.hdim_v, ref::read_out(fp), same.out, f64.out, f64.q_rows,
                                    l.heads_q * l.hdim_v, c.dtype, f64.out_terms));
  // lse is fp32 whatever the inputs' dtype: its atol is float32's.
  r->tensors.push_back(
      check_tensor("lse", 1, ref::read_lse(fp), same.lse, f64.lse, f64.q_rows, l.heads_q, flashattn::DType::f32));

  if (c.backward) {
    flashattn::BwdParams bp;
    s = flashattn::to_params(backward_args(l, c, host, nullptr), &bp);
    if (!s.ok()) return s;
    ref::BackwardResult b64, bsame;
    if (r->sampled) steps.note("float64 backward (lse and D of every query row first)");
    s = ref::backward(bp, ref::Precision::f64, &b64, q_rows, k_rows);
    steps.done(backward_work);
    if (!s.ok()) return s;
    if (r->sampled) steps.note("same-precision backward");
    s = ref::backward(bp, ref::Precision::same, &bsame, q_rows, k_rows);
    steps.done(backward_work);
    if (!s.ok()) return s;
    r->k_rows = static_cast<int64_t>(b64.k_rows.size());
    r->tensors.push_back(check_tensor("dq", l.hdim_qk, ref::read_dq(bp), bsame.dq, b64.dq, b64.q_rows,
                                      l.heads_q * l.hdim_qk, c.dtype, b64.dq_terms));
    r->tensors.push_back(check_tensor("dk", l.hdim_qk, ref::read_dk(bp), bsame.dk, b64.dk, b64.k_rows,
                                      l.heads_kv * l.hdim_qk, c.dtype, b64.dk_terms));
    r->tensors.push_back(check_tensor("dv", l.hdim_v, ref::read_dv(bp), bsame.dv, b64.dv, b64.k_rows,
                                      l.heads_kv * l.hdim_v, c.dtype, b64.dv_terms));
  }
  for (const TensorCheck& t : r->tensors) r->ok = r->ok && t.error.ok;
  r->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return Status::success();
}

}  // namespace fa_cli
