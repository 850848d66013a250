#include "support/check.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace fa_test {

using namespace flashattn;

::testing::AssertionResult rule_holds(const std::string& tensor, const reference::ErrorReport& r, int64_t dim) {
  static const bool verbose = std::getenv("FLASHATTN_TEST_VERBOSE") != nullptr;
  if (verbose) std::printf("[  ERROR   ] %s: %s\n", tensor.c_str(), r.describe(dim).c_str());
  if (r.ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << tensor << " breaks the error rule " << r.describe(dim);
}

::testing::AssertionResult lse_close(const std::vector<double>& got, const std::vector<double>& same,
                                     const std::vector<double>& ref, const std::vector<int64_t>& rows, int64_t heads) {
  double same_err = 0, max_ref = 0;
  for (int64_t row : rows) {
    for (int64_t h = 0; h < heads; ++h) {
      const size_t i = static_cast<size_t>(row * heads + h);
      if (std::isfinite(ref[i])) {
        max_ref = std::max(max_ref, std::abs(ref[i]));
        if (std::isfinite(same[i])) same_err = std::max(same_err, std::abs(same[i] - ref[i]));
      }
    }
  }
  const double tol = 2 * same_err + kLseAtol * (1 + max_ref);
  int64_t bad = 0;
  double worst = 0;
  std::ostringstream first;
  for (int64_t row : rows) {
    for (int64_t h = 0; h < heads; ++h) {
      const size_t i = static_cast<size_t>(row * heads + h);
      const double g = got[i], x = ref[i];
      bool ok;
      if (std::isnan(x)) {
        ok = std::isnan(g);
      } else if (std::isinf(x)) {
        ok = g == x;  // a fully masked row: exactly +inf
      } else {
        ok = std::isfinite(g) && std::abs(g - x) <= tol;
        if (std::isfinite(g)) worst = std::max(worst, std::abs(g - x));
      }
      if (!ok && bad++ == 0) first << "packed row " << row << ", head " << h << ": got " << g << ", ref " << x;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "lse: " << bad << " entries off (tolerance " << tol << ", max finite error "
                                       << worst << "); first at " << first.str();
}

namespace {
Rng sampling_rng() { return Rng(test_seed() ^ 0x9e3779b97f4a7c15ull); }
}  // namespace

std::vector<int64_t> compared_q_rows(const Problem& p) {
  if (p.c.sample_q <= 0) return {};
  Rng rng = sampling_rng();
  return reference::sample_rows(p.c.total_q(), p.c.sample_q, rng.next());
}

std::vector<int64_t> compared_k_rows(const Problem& p) {
  if (p.c.sample_k <= 0) return {};
  Rng rng = sampling_rng();
  rng.next();
  return reference::sample_rows(p.c.total_k(), p.c.sample_k, rng.next());
}

::testing::AssertionResult all_finite(const std::string& tensor, const std::vector<double>& x,
                                      const std::vector<int64_t>& rows, int64_t width) {
  for (int64_t row : rows) {
    for (int64_t c = 0; c < width; ++c) {
      const double v = x[static_cast<size_t>(row * width + c)];
      if (!std::isfinite(v)) {
        return ::testing::AssertionFailure() << tensor << ": " << v << " at packed row " << row << ", column " << c;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

namespace {

// Calls f(b, i, begin + i) for every row i of sequence b, q or k side.
template <class F>
void for_each_seq_row(const Problem& p, bool q_side, F&& f) {
  const Case& c = p.c;
  int64_t begin = 0;
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t len = c.is_varlen() ? (q_side ? c.lens_q[b] : c.lens_k[b]) : (q_side ? c.seqlen_q : c.seqlen_k);
    for (int64_t i = 0; i < len; ++i) f(b, i, begin + i);
    begin += len;
  }
}

}  // namespace

void store_packed(HostTensor& t, const Problem& p, bool q_side, const std::vector<double>& packed) {
  const int r = t.rank();
  const int64_t heads = t.shape(r - 2), dim = t.shape(r - 1);
  for_each_seq_row(p, q_side, [&](int64_t b, int64_t i, int64_t row) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t d = 0; d < dim; ++d) {
        const double x = packed[static_cast<size_t>((row * heads + h) * dim + d)];
        if (p.c.is_varlen()) {
          t.set({row, h, d}, x);
        } else {
          t.set({b, i, h, d}, x);
        }
      }
    }
  });
}

void store_packed_lse(HostTensor& lse, const Problem& p, const std::vector<double>& packed) {
  const int64_t heads = p.c.heads_q;
  for_each_seq_row(p, true, [&](int64_t b, int64_t i, int64_t row) {
    for (int64_t h = 0; h < heads; ++h) {
      const double x = packed[static_cast<size_t>(row * heads + h)];
      if (p.c.is_varlen()) {
        lse.set({h, row}, x);
      } else {
        lse.set({b, h, i}, x);
      }
    }
  });
}

namespace {

void expect_untouched(const char* name, const HostTensor& t) {
  EXPECT_TRUE(t.unchanged()) << name << ": an input was modified by the call";
}

void expect_gaps_intact(const char* name, const HostTensor& t) {
  EXPECT_EQ(t.gap_bytes_changed(), 0) << name << ": bytes outside the view were written";
}

}  // namespace

void expect_forward_matches(const Problem& p) {
  const FwdParams hp = p.host_forward_params();
  const std::vector<int64_t> rows = compared_q_rows(p);
  const std::vector<int64_t>* sample = p.c.sample_q > 0 ? &rows : nullptr;
  reference::ForwardResult ref, same;
  ASSERT_TRUE(reference::forward(hp, reference::Precision::f64, &ref, sample).ok());
  ASSERT_TRUE(reference::forward(hp, reference::Precision::same, &same, sample).ok());
  const std::vector<double> out = reference::read_out(hp);
  EXPECT_TRUE(rule_holds("out", reference::check_error_rule(out, same.out, ref.out, ref.q_rows,
                                                             hp.heads_q * hp.hdim_v, hp.dtype, -1, ref.out_terms),
                         hp.hdim_v));
  if (p.c.with_lse) {
    EXPECT_TRUE(lse_close(reference::read_lse(hp), same.lse, ref.lse, ref.q_rows, hp.heads_q));
    expect_gaps_intact("lse", p.lse);
  }
  expect_gaps_intact("out", p.out);
  expect_untouched("q", p.q);
  if (p.c.is_paged()) {
    expect_untouched("k (paged)", p.k_pages);
    expect_untouched("v (paged)", p.v_pages);
    expect_untouched("block_table", p.block_table);
  } else {
    expect_untouched("k", p.k);
    expect_untouched("v", p.v);
  }
  if (p.c.is_varlen()) {
    expect_untouched("cu_seqlens_q", p.cu_q);
    expect_untouched("cu_seqlens_k", p.cu_k);
  }
}

void expect_backward_matches(const Problem& p) {
  const BwdParams hp = p.host_backward_params();
  const std::vector<int64_t> qr = compared_q_rows(p), kr = compared_k_rows(p);
  const std::vector<int64_t>* q_sample = p.c.sample_q > 0 ? &qr : nullptr;
  const std::vector<int64_t>* k_sample = p.c.sample_k > 0 ? &kr : nullptr;
  reference::BackwardResult ref, same;
  ASSERT_TRUE(reference::backward(hp, reference::Precision::f64, &ref, q_sample, k_sample).ok());
  ASSERT_TRUE(reference::backward(hp, reference::Precision::same, &same, q_sample, k_sample).ok());
  const DType dt = hp.dtype;
  EXPECT_TRUE(rule_holds("dq", reference::check_error_rule(reference::read_dq(hp), same.dq, ref.dq, ref.q_rows,
                                                            hp.heads_q * hp.hdim_qk, dt, -1, ref.dq_terms),
                         hp.hdim_qk));
  EXPECT_TRUE(rule_holds("dk", reference::check_error_rule(reference::read_dk(hp), same.dk, ref.dk, ref.k_rows,
                                                            hp.heads_kv * hp.hdim_qk, dt, -1, ref.dk_terms),
                         hp.hdim_qk));
  EXPECT_TRUE(rule_holds("dv", reference::check_error_rule(reference::read_dv(hp), same.dv, ref.dv, ref.k_rows,
                                                            hp.heads_kv * hp.hdim_v, dt, -1, ref.dv_terms),
                         hp.hdim_v));
  expect_gaps_intact("dq", p.dq);
  expect_gaps_intact("dk", p.dk);
  expect_gaps_intact("dv", p.dv);
  for (auto [name, t] : {std::pair{"q", &p.q}, {"k", &p.k}, {"v", &p.v}, {"out", &p.out}, {"lse", &p.lse},
                         {"dout", &p.dout}}) {
    expect_untouched(name, *t);
  }
}

}  // namespace fa_test
