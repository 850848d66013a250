// The float64 reference checked on its own, before it judges any backend: against a hand
// computation, against an independent materialized implementation (full S matrix per head, the
// mask written from the public header's formula, D = rowsum(P∘dP)), across layouts, and for
// consistency of row sampling and of its same-precision mode. Its gradients are checked by finite
// differences in finite_difference_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "support/check.hpp"

namespace fa_test {
namespace {

using namespace flashattn;
constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- an independent naive implementation: materializes S for each (batch, head) -----------------
struct Naive {
  std::vector<double> out, lse, dq, dk, dv;  // the reference's packed layout
};

Naive materialized(const Problem& p) {
  const Case& c = p.c;
  const int64_t Hq = c.heads_q, Hkv = c.heads_kv, D = c.hdim_qk, Dv = c.hdim_v, tq = c.total_q(), tk = c.total_k();
  const double scale = c.softmax_scale ? *c.softmax_scale : 1.f / std::sqrt(static_cast<float>(D));
  Naive n;
  n.out.assign(tq * Hq * Dv, std::nan(""));
  n.lse.assign(tq * Hq, std::nan(""));
  n.dq.assign(tq * Hq * D, std::nan(""));
  n.dk.assign(tk * Hkv * D, 0.0);
  n.dv.assign(tk * Hkv * Dv, 0.0);
  int64_t qb = 0, kb = 0;
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t lq = c.is_varlen() ? c.lens_q[b] : c.seqlen_q, lk = c.is_varlen() ? c.lens_k[b] : c.seqlen_k;
    auto at = [&](const HostTensor& t, int64_t row, int64_t begin, int64_t h, int64_t d) {
      return c.is_varlen() ? t.get({begin + row, h, d}) : t.get({b, row, h, d});
    };
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / (Hq / Hkv);
      std::vector<std::vector<double>> S(lq, std::vector<double>(lk)), T(lq, std::vector<double>(lk, 0.0)),
          P(lq, std::vector<double>(lk, 0.0)), dP(lq, std::vector<double>(lk, 0.0));
      std::vector<std::vector<bool>> allowed(lq, std::vector<bool>(lk));
      for (int64_t i = 0; i < lq; ++i) {
        for (int64_t j = 0; j < lk; ++j) {
          const int64_t right = c.causal ? 0 : c.window_right;
          bool ok = true;
          if (right >= 0 && j > i + lk - lq + right) ok = false;
          if (c.window_left >= 0 && j < i + lk - lq - c.window_left) ok = false;
          allowed[i][j] = ok;
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += at(p.q, i, qb, h, d) * at(p.k, j, kb, hk, d);
          s *= scale;
          if (c.softcap > 0) {
            T[i][j] = std::tanh(s / c.softcap);
            s = c.softcap * T[i][j];
          }
          S[i][j] = s;
        }
      }
      for (int64_t i = 0; i < lq; ++i) {
        double m = -kInf;
        for (int64_t j = 0; j < lk; ++j) {
          if (allowed[i][j]) m = std::max(m, S[i][j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < lk; ++j) {
          if (allowed[i][j]) sum += std::exp(S[i][j] - m);
        }
        const int64_t row = qb + i;
        n.lse[row * Hq + h] = sum > 0 ? m + std::log(sum) : kInf;
        for (int64_t j = 0; j < lk; ++j) P[i][j] = allowed[i][j] ? std::exp(S[i][j] - m) / sum : 0.0;
        for (int64_t e = 0; e < Dv; ++e) {
          double o = 0;
          for (int64_t j = 0; j < lk; ++j) o += P[i][j] * at(p.v, j, kb, hk, e);
          n.out[(row * Hq + h) * Dv + e] = o;
        }
        // backward of loss = Σ out∘dout
        double Di = 0;
        for (int64_t j = 0; j < lk; ++j) {
          for (int64_t e = 0; e < Dv; ++e) dP[i][j] += at(p.dout, i, qb, h, e) * at(p.v, j, kb, hk, e);
          Di += P[i][j] * dP[i][j];
        }
        for (int64_t d = 0; d < D; ++d) n.dq[(row * Hq + h) * D + d] = 0;
        for (int64_t j = 0; j < lk; ++j) {
          double dS = P[i][j] * (dP[i][j] - Di);
          if (c.softcap > 0) dS *= 1 - T[i][j] * T[i][j];
          for (int64_t d = 0; d < D; ++d) {
            n.dq[(row * Hq + h) * D + d] += scale * dS * at(p.k, j, kb, hk, d);
            n.dk[((kb + j) * Hkv + hk) * D + d] += scale * dS * at(p.q, i, qb, h, d);
          }
          for (int64_t e = 0; e < Dv; ++e) n.dv[((kb + j) * Hkv + hk) * Dv + e] += P[i][j] * at(p.dout, i, qb, h, e);
        }
      }
    }
    qb += lq;
    kb += lk;
  }
  return n;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b, const std::vector<int64_t>& rows,
                    int64_t width) {
  double m = 0;
  for (int64_t r : rows) {
    for (int64_t c = 0; c < width; ++c) {
      const double x = a[r * width + c], y = b[r * width + c];
      if (x == y) continue;  // equal infinities
      m = std::max(m, std::isnan(x - y) ? kInf : std::abs(x - y));
    }
  }
  return m;
}

class ReferenceVsMaterialized : public ::testing::TestWithParam<Case> {};

TEST_P(ReferenceVsMaterialized, ForwardAndBackwardAgree) {
  Rng rng;
  Problem p = make_problem(GetParam(), rng);
  const BwdParams hp = p.host_backward_params();
  reference::ForwardResult f;
  reference::BackwardResult g;
  ASSERT_TRUE(reference::forward(hp, reference::Precision::f64, &f).ok());
  ASSERT_TRUE(reference::backward(hp, reference::Precision::f64, &g).ok());
  const Naive n = materialized(p);
  const Case& c = p.c;
  constexpr double kTol = 1e-11;
  EXPECT_LE(max_abs_diff(f.out, n.out, f.q_rows, c.heads_q * c.hdim_v), kTol);
  EXPECT_LE(max_abs_diff(f.lse, n.lse, f.q_rows, c.heads_q), kTol);
  EXPECT_LE(max_abs_diff(g.dq, n.dq, g.q_rows, c.heads_q * c.hdim_qk), kTol);
  EXPECT_LE(max_abs_diff(g.dk, n.dk, g.k_rows, c.heads_kv * c.hdim_qk), kTol);
  EXPECT_LE(max_abs_diff(g.dv, n.dv, g.k_rows, c.heads_kv * c.hdim_v), kTol);
  EXPECT_EQ(static_cast<int64_t>(f.q_rows.size()), c.total_q() - c.extra_rows);
  EXPECT_EQ(static_cast<int64_t>(g.k_rows.size()), c.total_k() - c.extra_rows);
}

INSTANTIATE_TEST_SUITE_P(
    Reference, ReferenceVsMaterialized,
    ::testing::Values(Case::padded(2, 7, 9, 2, 2, 8).with(DType::f32),
                      Case::padded(1, 9, 5, 4, 2, 16).with(DType::bf16).causal_mask(),
                      Case::padded(1, 5, 12, 3, 1, 8, 16).with(DType::f16).causal_mask().layout(Strides::padded),
                      Case::padded(2, 11, 11, 2, 1, 8).window(3, -1).layout(Strides::permuted),
                      Case::padded(1, 13, 6, 2, 2, 8).window(-1, 1),
                      Case::padded(1, 10, 14, 2, 2, 8, 8).window(2, 3).cap(1.5f).scale(0.9f),
                      Case::padded(1, 8, 8, 1, 1, 24).cap(0.7f).causal_mask().with(DType::f32),
                      Case::varlen({3, 0, 7, 4}, {5, 6, 0, 4}, 4, 2, 8).causal_mask().extra(3),
                      Case::varlen({6, 2}, {3, 9}, 2, 1, 16, 8).window(2, 0).layout(Strides::padded).with(DType::f16)),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name(); });

// S = [0, ln 3]: P = [1/4, 3/4], lse = ln 4, out = v0/4 + 3 v1/4 (with the f32 value of ln 3).
TEST(Reference, HandComputedTwoKeys) {
  Rng rng;
  Problem p = make_problem(Case::padded(1, 1, 2, 1, 1, 8).with(DType::f32).scale(1.f), rng);
  const float ln3 = std::log(3.f);
  for (int64_t d = 0; d < 8; ++d) {
    p.q.set({0, 0, 0, d}, d == 0 ? 1.0 : 0.0);
    p.k.set({0, 0, 0, d}, 0.0);
    p.k.set({0, 1, 0, d}, d == 0 ? ln3 : 0.0);
  }
  const double e = std::exp(static_cast<double>(ln3));  // ≈ 3
  reference::ForwardResult f;
  ASSERT_TRUE(reference::forward(p.host_forward_params(), reference::Precision::f64, &f).ok());
  EXPECT_NEAR(f.lse[0], std::log1p(e), 1e-14);
  for (int64_t d = 0; d < 8; ++d) {
    const double want = (p.v.get({0, 0, 0, d}) + e * p.v.get({0, 1, 0, d})) / (1 + e);
    EXPECT_NEAR(f.out[d], want, 1e-14) << "column " << d;
  }
}

// Causal with seqlen_q > seqlen_k: the first seqlen_q − seqlen_k rows see nothing.
TEST(Reference, FullyMaskedRowsAreZeroWithInfiniteLse) {
  Rng rng;
  Problem p = make_problem(Case::padded(1, 6, 2, 1, 1, 8).causal_mask(), rng);
  const BwdParams hp = p.host_backward_params();
  for (auto precision : {reference::Precision::f64, reference::Precision::same}) {
    reference::ForwardResult f;
    reference::BackwardResult g;
    ASSERT_TRUE(reference::forward(hp, precision, &f).ok());
    ASSERT_TRUE(reference::backward(hp, precision, &g).ok());
    for (int64_t row = 0; row < 6; ++row) {
      if (row < 4) {
        EXPECT_EQ(f.lse[row], kInf) << "row " << row;
      } else {
        EXPECT_TRUE(std::isfinite(f.lse[row])) << "row " << row;
      }
      for (int64_t d = 0; d < 8; ++d) {
        if (row < 4) {
          EXPECT_EQ(f.out[row * 8 + d], 0.0);
          EXPECT_EQ(g.dq[row * 8 + d], 0.0);
        }
        EXPECT_TRUE(std::isfinite(g.dq[row * 8 + d]));
      }
    }
  }
}

// The same values in contiguous, padded and permuted storage give bitwise the same results.
TEST(Reference, LayoutsGiveIdenticalResults) {
  Rng rng;
  const Case base = Case::varlen({5, 0, 9}, {7, 3, 8}, 4, 2, 16, 8).causal_mask().extra(2);
  Problem a = make_problem(base, rng);
  for (Strides s : {Strides::padded, Strides::permuted}) {
    Problem b = make_problem(base.layout(s), rng);
    for (auto [from, to] : {std::pair{&a.q, &b.q}, {&a.k, &b.k}, {&a.v, &b.v}, {&a.dout, &b.dout}}) {
      const auto fo = from->element_offsets(), to_o = to->element_offsets();
      for (size_t i = 0; i < fo.size(); ++i) to->set_at(to_o[i], from->get_at(fo[i]));
    }
    reference::BackwardResult ga, gb;
    ASSERT_TRUE(reference::backward(a.host_backward_params(), reference::Precision::same, &ga).ok());
    ASSERT_TRUE(reference::backward(b.host_backward_params(), reference::Precision::same, &gb).ok());
    EXPECT_EQ(max_abs_diff(ga.dq, gb.dq, ga.q_rows, 4 * 16), 0.0) << to_string(s);
    EXPECT_EQ(max_abs_diff(ga.dk, gb.dk, ga.k_rows, 2 * 16), 0.0) << to_string(s);
    EXPECT_EQ(max_abs_diff(ga.dv, gb.dv, ga.k_rows, 2 * 8), 0.0) << to_string(s);
  }
}

// Sampled rows are computed exactly as in a full run; the others stay NaN.
TEST(Reference, SampledRowsEqualFullRun) {
  Rng rng;
  Problem p = make_problem(Case::varlen({40, 0, 33}, {21, 50, 64}, 4, 1, 32).window(9, 3).cap(2.f), rng);
  const BwdParams hp = p.host_backward_params();
  const std::vector<int64_t> qs = {72, 0, 5, 39, 40, 5, 999}, ks = {0, 20, 21, 70, 134, -1};
  for (auto precision : {reference::Precision::f64, reference::Precision::same}) {
    reference::ForwardResult full, part;
    reference::BackwardResult gfull, gpart;
    ASSERT_TRUE(reference::forward(hp, precision, &full).ok());
    ASSERT_TRUE(reference::forward(hp, precision, &part, &qs).ok());
    ASSERT_TRUE(reference::backward(hp, precision, &gfull).ok());
    ASSERT_TRUE(reference::backward(hp, precision, &gpart, &qs, &ks).ok());
    EXPECT_EQ(part.q_rows, (std::vector<int64_t>{0, 5, 39, 40, 72}));
    EXPECT_EQ(gpart.k_rows, (std::vector<int64_t>{0, 20, 21, 70, 134}));
    EXPECT_EQ(max_abs_diff(full.out, part.out, part.q_rows, 4 * 32), 0.0);
    EXPECT_EQ(max_abs_diff(full.lse, part.lse, part.q_rows, 4), 0.0);
    EXPECT_EQ(max_abs_diff(gfull.dq, gpart.dq, gpart.q_rows, 4 * 32), 0.0);
    EXPECT_EQ(max_abs_diff(gfull.dk, gpart.dk, gpart.k_rows, 32), 0.0);
    EXPECT_EQ(max_abs_diff(gfull.dv, gpart.dv, gpart.k_rows, 32), 0.0);
    EXPECT_TRUE(std::isnan(part.out[1 * 4 * 32])) << "row 1 was not sampled";
    EXPECT_TRUE(std::isnan(gpart.dk[1 * 32])) << "key row 1 was not sampled";
  }
}

TEST(Reference, SampleRowsKeepsEndsAndCount) {
  const auto rows = reference::sample_rows(1000, 17, 42);
  ASSERT_EQ(rows.size(), 17u);
  EXPECT_EQ(rows.front(), 0);
  EXPECT_EQ(rows.back(), 999);
  EXPECT_TRUE(std::is_sorted(rows.begin(), rows.end()));
  EXPECT_EQ(std::adjacent_find(rows.begin(), rows.end()), rows.end());
  EXPECT_EQ(reference::sample_rows(5, 17, 1).size(), 5u);
  EXPECT_TRUE(reference::sample_rows(0, 3, 1).empty());
}

// The same-precision run is near the oracle, by about the dtype's rounding, and never equal to it
// (else the error rule would degenerate to atol alone).
TEST(Reference, SamePrecisionErrorScalesWithDtype) {
  Rng rng;
  double err[3];
  const DType dtypes[3] = {DType::f32, DType::f16, DType::bf16};
  for (int t = 0; t < 3; ++t) {
    Problem p = make_problem(Case::padded(1, 100, 120, 2, 1, 64).with(dtypes[t]).causal_mask(), rng);
    const BwdParams hp = p.host_backward_params();
    reference::ForwardResult f, s;
    ASSERT_TRUE(reference::forward(hp, reference::Precision::f64, &f).ok());
    ASSERT_TRUE(reference::forward(hp, reference::Precision::same, &s).ok());
    err[t] = max_abs_diff(f.out, s.out, f.q_rows, 2 * 64);
    reference::BackwardResult gf, gs;
    ASSERT_TRUE(reference::backward(hp, reference::Precision::f64, &gf).ok());
    ASSERT_TRUE(reference::backward(hp, reference::Precision::same, &gs).ok());
    const double dq_err = max_abs_diff(gf.dq, gs.dq, gf.q_rows, 2 * 64);
    EXPECT_GT(dq_err, 0.0) << to_string(dtypes[t]);
  }
  EXPECT_GT(err[0], 0.0);
  EXPECT_LT(err[0], 1e-5);
  EXPECT_LT(err[0] * 10, err[1]);
  EXPECT_LT(err[1] * 2, err[2]);
  EXPECT_LT(err[2], 0.05);
}

TEST(Reference, RejectsDevicePointers) {
  FwdParams p;
  p.device = Device::cuda;
  reference::ForwardResult f;
  EXPECT_EQ(reference::forward(p, reference::Precision::f64, &f).code, StatusCode::invalid_argument);
}

}  // namespace
}  // namespace fa_test
