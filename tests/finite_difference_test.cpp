// Gradients by finite differences: central differences, in float64, of the reference's loss
// L = Σ out∘dout on tiny f32 problems, against (1) the reference's own float64 backward and (2) the
// library's f32 backward on each backend. Steps are taken in the f32 inputs and divided by the step
// actually stored, so the rounding of the step does not enter the quotient.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "support/check.hpp"

namespace fa_test {
namespace {

using namespace flashattn;

constexpr double kStep = 1e-3;
constexpr double kReferenceTol = 1e-6;  // × (1 + max|grad|): truncation O(kStep⁴), f32 step asymmetry
constexpr double kLibraryTol = 1e-5;    // × (1 + max|grad|): f32 gradients (≈ 1e-6 seen) + truncation

// L = Σ out∘dout over the computed rows, out by the float64 reference.
double loss(const Problem& p, const std::vector<double>& dout_packed) {
  reference::ForwardResult r;
  EXPECT_TRUE(reference::forward(p.host_forward_params(), reference::Precision::f64, &r).ok());
  const int64_t width = p.c.heads_q * p.c.hdim_v;
  double l = 0;
  for (int64_t row : r.q_rows) {
    for (int64_t c = 0; c < width; ++c) l += r.out[row * width + c] * dout_packed[row * width + c];
  }
  return l;
}

std::vector<double> packed_dout(const Problem& p) {
  FwdParams hp = p.host_forward_params();
  DeviceMirror host(Backend::host());
  hp.out = p.backward_args(host).dout.data;  // dout has out's shape and strides
  return reference::read_out(hp);
}

// dL/dx for every element of `t` (q, k or v of p), in t's element order: central differences with
// steps h and h/2, combined by Richardson extrapolation (truncation error O(h⁴)).
std::vector<double> finite_differences(Problem& p, HostTensor& t) {
  const std::vector<double> dout = packed_dout(p);
  std::vector<double> g;
  for (int64_t off : t.element_offsets()) {
    const double x = t.get_at(off);
    auto central = [&](double h) {
      t.set_at(off, x + h);
      const double x_plus = t.get_at(off), l_plus = loss(p, dout);
      t.set_at(off, x - h);
      const double x_minus = t.get_at(off), l_minus = loss(p, dout);
      t.set_at(off, x);
      return (l_plus - l_minus) / (x_plus - x_minus);
    };
    g.push_back((4 * central(kStep / 2) - central(kStep)) / 3);
  }
  return g;
}

std::vector<double> values(const HostTensor& t) {
  std::vector<double> x;
  for (int64_t off : t.element_offsets()) x.push_back(t.get_at(off));
  return x;
}

::testing::AssertionResult gradients_close(const char* name, const std::vector<double>& got,
                                           const std::vector<double>& fd, double rel_tol) {
  double max_fd = 0, worst = 0;
  size_t at = 0;
  for (double x : fd) max_fd = std::max(max_fd, std::abs(x));
  const double tol = rel_tol * (1 + max_fd);
  for (size_t i = 0; i < fd.size(); ++i) {
    const double e = std::isnan(got[i]) ? INFINITY : std::abs(got[i] - fd[i]);
    if (e > worst) worst = e, at = i;
  }
  if (worst <= tol && max_fd > 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << name << ": max |grad − finite difference| = " << worst << " > " << tol
                                       << " at element " << at << " (grad " << got[at] << ", finite difference "
                                       << fd[at] << "); max |fd| " << max_fd;
}

std::vector<Case> fd_cases() {
  const DType f = DType::f32;
  return {
      Case::padded(1, 4, 5, 2, 1, 8).with(f),
      Case::padded(1, 5, 3, 1, 1, 8).with(f).causal_mask(),
      Case::padded(1, 3, 6, 2, 2, 16, 8).with(f).causal_mask().layout(Strides::padded),
      Case::padded(1, 4, 4, 1, 1, 8).with(f).cap(1.5f).scale(0.8f),
      Case::padded(1, 6, 5, 2, 1, 8).with(f).cap(2.f).window(2, 1),
      Case::padded(1, 5, 7, 2, 1, 8, 16).with(f).cap(1.f).causal_mask().scale(1.f),
      Case::varlen({3, 0, 2}, {2, 3, 4}, 2, 1, 8).with(f).causal_mask(),
      Case::padded(2, 3, 4, 4, 2, 8).with(f).window(1, 0).layout(Strides::permuted),
  };
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) { return info.param.name(); }

class ReferenceGradients : public ::testing::TestWithParam<Case> {};

TEST_P(ReferenceGradients, MatchFiniteDifferences) {
  Rng rng;
  Problem p = make_problem(GetParam(), rng);
  reference::BackwardResult g;
  ASSERT_TRUE(reference::backward(p.host_backward_params(), reference::Precision::f64, &g).ok());
  HostTensor dq = p.dq, dk = p.dk, dv = p.dv;
  store_packed(dq, p, true, g.dq);
  store_packed(dk, p, false, g.dk);
  store_packed(dv, p, false, g.dv);
  EXPECT_TRUE(gradients_close("dq", values(dq), finite_differences(p, p.q), kReferenceTol));
  EXPECT_TRUE(gradients_close("dk", values(dk), finite_differences(p, p.k), kReferenceTol));
  EXPECT_TRUE(gradients_close("dv", values(dv), finite_differences(p, p.v), kReferenceTol));
}

INSTANTIATE_TEST_SUITE_P(FiniteDifferences, ReferenceGradients, ::testing::ValuesIn(fd_cases()), case_name);

using Param = std::tuple<Backend, Case>;
class LibraryGradients : public ::testing::TestWithParam<Param> {};

TEST_P(LibraryGradients, MatchFiniteDifferences) {
  const auto& [backend, c] = GetParam();
  FA_REQUIRE_BACKEND(backend);
  Rng rng;
  Problem p = make_problem(c, rng);
  FA_RUN_OR_SKIP(run_forward(backend, p));
  FA_RUN_OR_SKIP(run_backward(backend, p));
  EXPECT_TRUE(gradients_close("dq", values(p.dq), finite_differences(p, p.q), kLibraryTol));
  EXPECT_TRUE(gradients_close("dk", values(p.dk), finite_differences(p, p.k), kLibraryTol));
  EXPECT_TRUE(gradients_close("dv", values(p.dv), finite_differences(p, p.v), kLibraryTol));
}

INSTANTIATE_TEST_SUITE_P(FiniteDifferences, LibraryGradients,
                         ::testing::Combine(::testing::ValuesIn(all_backends()), ::testing::ValuesIn(fd_cases())),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::string(to_string(std::get<0>(info.param))) + "_" + std::get<1>(info.param).name();
                         });

}  // namespace
}  // namespace fa_test
