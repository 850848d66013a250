// The checks must be able to fail. A simulated backend writes the same-precision reference into
// the outputs (which must pass), then a wrong one — an output off by a little, an unwritten
// element, a write outside the view, a modified input, a mask off by one, a wrong scale, an
// ignored softcap — which must fail with a message that says so.
#include <gtest/gtest.h>
#include <gtest/gtest-spi.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "support/check.hpp"

namespace fa_test {
namespace {

using namespace flashattn;

// Messages of the failures `f` reports (intercepted: they do not fail this test).
std::vector<std::string> failures_of(const std::function<void()>& f) {
  ::testing::TestPartResultArray results;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
    f();
  }
  std::vector<std::string> messages;
  for (int i = 0; i < results.size(); ++i) messages.push_back(results.GetTestPartResult(i).message());
  return messages;
}

::testing::AssertionResult has_failure(const std::vector<std::string>& failures, const std::string& needle) {
  std::string all;
  for (const auto& m : failures) {
    if (m.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
    all += "\n  " + m;
  }
  return ::testing::AssertionFailure() << "no failure mentions \"" << needle << "\"; failures:" << all;
}

// A failure mentioning any of the needles.
::testing::AssertionResult has_failure(const std::vector<std::string>& failures, const std::vector<std::string>& needles) {
  for (const auto& needle : needles) {
    if (has_failure(failures, needle)) return ::testing::AssertionSuccess();
  }
  ::testing::AssertionResult r = ::testing::AssertionFailure() << "no failure mentions any of";
  for (const auto& needle : needles) r << " \"" << needle << "\"";
  return r;
}

// A backend that computes the same-precision naive attention of `as` (the params it was given,
// possibly altered to model a bug) and writes it as a backend would.
void simulate_forward(Problem& p, const FwdParams& as) {
  for (HostTensor* t : {&p.out, &p.lse}) t->poison();
  for (HostTensor* t : {&p.q, &p.k, &p.v, &p.out, &p.lse, &p.cu_q, &p.cu_k}) t->snapshot();
  reference::ForwardResult r;
  ASSERT_TRUE(reference::forward(as, reference::Precision::same, &r).ok());
  store_packed(p.out, p, true, r.out);
  store_packed_lse(p.lse, p, r.lse);
}

void simulate_backward(Problem& p, const BwdParams& as) {
  for (HostTensor* t : {&p.dq, &p.dk, &p.dv}) t->poison();
  for (HostTensor* t : {&p.q, &p.k, &p.v, &p.out, &p.lse, &p.dout, &p.dq, &p.dk, &p.dv}) t->snapshot();
  reference::BackwardResult r;
  ASSERT_TRUE(reference::backward(as, reference::Precision::same, &r).ok());
  store_packed(p.dq, p, true, r.dq);
  store_packed(p.dk, p, false, r.dk);
  store_packed(p.dv, p, false, r.dv);
}

const Case kCases[] = {
    Case::padded(2, 150, 97, 4, 2, 64).with(DType::bf16).causal_mask().layout(Strides::padded),
    Case::varlen({60, 0, 45}, {80, 12, 0}, 2, 1, 32, 16).with(DType::f16).window(20, 4).extra(3),
    Case::padded(1, 70, 130, 2, 2, 40).with(DType::f32).cap(3.f).layout(Strides::permuted),
};

class SimulatedBackend : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    Rng rng;
    p = make_problem(GetParam(), rng);
    simulate_forward(p, p.host_forward_params());
    simulate_backward(p, p.host_backward_params());
  }
  Problem p;
};

TEST_P(SimulatedBackend, CorrectBackendPasses) {
  expect_forward_matches(p);
  expect_backward_matches(p);
}

TEST_P(SimulatedBackend, OutputOffByTwiceTheBoundFails) {
  for (HostTensor* t : {&p.out, &p.dq, &p.dk, &p.dv}) {
    const int64_t off = t->element_offsets()[t->numel() / 2];
    const double old = t->get_at(off);
    // 2·(same-precision error) + atol is far below 5 % of the largest value
    double big = 0;
    for (int64_t o : t->element_offsets()) big = std::max(big, std::abs(t->get_at(o)));
    t->set_at(off, old + 0.05 * big);
    const auto f = failures_of([&] { t == &p.out ? expect_forward_matches(p) : expect_backward_matches(p); });
    EXPECT_TRUE(has_failure(f, "breaks the error rule"));
    EXPECT_EQ(f.size(), 1u);
    t->set_at(off, old);
  }
}

TEST_P(SimulatedBackend, UnwrittenElementFails) {
  for (HostTensor* t : {&p.out, &p.dq, &p.dk, &p.dv}) {
    const int64_t off = t->element_offsets()[1];  // row 0: in a sequence in every case
    const double old = t->get_at(off);
    t->set_at(off, std::numeric_limits<double>::quiet_NaN());
    const auto f = failures_of([&] { t == &p.out ? expect_forward_matches(p) : expect_backward_matches(p); });
    EXPECT_TRUE(has_failure(f, "NaN mismatches"));
    t->set_at(off, old);
  }
  p.lse.set_at(p.lse.element_offsets().front(), std::numeric_limits<double>::quiet_NaN());
  EXPECT_TRUE(has_failure(failures_of([&] { expect_forward_matches(p); }), "lse: 1 entries off"));
}

TEST_P(SimulatedBackend, WriteOutsideTheViewFails) {
  for (HostTensor* t : {&p.out, &p.lse, &p.dq, &p.dk, &p.dv}) {
    unsigned char* bytes = static_cast<unsigned char*>(t->storage());
    const size_t at = t->storage_bytes() - 1;  // the guard after the view
    bytes[at] ^= 1;
    const auto f = failures_of([&] { t == &p.out || t == &p.lse ? expect_forward_matches(p) : expect_backward_matches(p); });
    EXPECT_TRUE(has_failure(f, "bytes outside the view were written"));
    bytes[at] ^= 1;
  }
}

TEST_P(SimulatedBackend, ModifiedInputFails) {
  for (HostTensor* t : {&p.q, &p.k, &p.v, &p.dout}) {
    const int64_t off = t->element_offsets().front();
    const double old = t->get_at(off);
    t->set_at(off, old + 1);
    const auto f = failures_of([&] { t == &p.dout ? expect_backward_matches(p) : expect_forward_matches(p); });
    EXPECT_TRUE(has_failure(f, "an input was modified"));
    t->set_at(off, old);
  }
}

TEST_P(SimulatedBackend, LseErrorsFail) {
  const int64_t off = p.lse.element_offsets()[p.lse.numel() / 3];
  const double old = p.lse.get_at(off);
  p.lse.set_at(off, std::isinf(old) ? 0.0 : old + 1e-3);
  EXPECT_TRUE(has_failure(failures_of([&] { expect_forward_matches(p); }), "lse: 1 entries off"));
}

INSTANTIATE_TEST_SUITE_P(ErrorRule, SimulatedBackend, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name(); });

// Subtle kernel bugs, modelled by running the simulated backend on altered params.
class SimulatedBug : public ::testing::TestWithParam<Case> {};

// What must report the bug: by default out, and both dq and dk.
struct BugSigns {
  std::vector<std::string> forward{"out breaks the error rule"};
  std::vector<std::vector<std::string>> backward{{"dq breaks the error rule"}, {"dk breaks the error rule"}};
};

void expect_bug_caught(const Case& c, const std::function<void(FwdParams*)>& bug, bool check_backward,
                       const BugSigns& signs = {}) {
  Rng rng;
  Problem p = make_problem(c, rng);
  FwdParams fp = p.host_forward_params();
  BwdParams bp = p.host_backward_params();
  bug(&fp);
  bug(&bp);
  simulate_forward(p, fp);
  EXPECT_TRUE(has_failure(failures_of([&] { expect_forward_matches(p); }), signs.forward));
  if (!check_backward) return;
  simulate_forward(p, p.host_forward_params());  // a correct forward, a buggy backward
  simulate_backward(p, bp);
  const auto f = failures_of([&] { expect_backward_matches(p); });
  for (const auto& any_of : signs.backward) EXPECT_TRUE(has_failure(f, any_of));
}

TEST_P(SimulatedBug, CausalMaskOffByOne) {
  Case c = GetParam().causal_mask();
  expect_bug_caught(c, [](FwdParams* p) { p->options.window_right = 1; }, true);
}

TEST_P(SimulatedBug, WindowLeftOffByOne) {
  Case c = GetParam().window(17, -1);
  expect_bug_caught(c, [](FwdParams* p) { p->options.window_left = 18; }, true);
}

// In bf16 a 1 % scale moves out by about its own rounding, so on some random inputs (about 1 in 20)
// only the LSE, which moves by ~0.01 · |score|, far above its tolerance, reports it; likewise dq and
// dk may both stay within the rule (about 1 in 400). Caught means: the forward's out or LSE, and one
// of the backward's dq, dk, dv.
TEST_P(SimulatedBug, ScaleOffByOnePercent) {
  BugSigns signs;
  signs.forward = {"out breaks the error rule", "lse: "};
  signs.backward = {{"dq breaks the error rule", "dk breaks the error rule", "dv breaks the error rule"}};
  expect_bug_caught(
      GetParam(), [](FwdParams* p) { p->options.softmax_scale = *p->options.softmax_scale * 1.01f; }, true, signs);
}

TEST_P(SimulatedBug, SoftcapIgnored) {
  Case c = GetParam().cap(5.f).scale(0.5f);
  expect_bug_caught(c, [](FwdParams* p) { p->options.softcap = 0; }, true);
}

INSTANTIATE_TEST_SUITE_P(ErrorRule, SimulatedBug,
                         ::testing::Values(Case::padded(1, 200, 200, 2, 1, 64).with(DType::bf16),
                                           Case::padded(1, 300, 250, 2, 2, 128).with(DType::f16),
                                           Case::padded(1, 150, 300, 2, 2, 64).with(DType::f32)),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name(); });

TEST(ErrorRule, UnitBehaviour) {
  const std::vector<int64_t> rows{0, 1};
  const std::vector<double> ref{1.0, -2.0, 0.5, 0.25}, same{1.01, -2.0, 0.5, 0.25};
  auto check = [&](std::vector<double> got) {
    return reference::check_error_rule(got, same, ref, rows, 2, DType::bf16, 0.0);
  };
  EXPECT_TRUE(check(ref).ok);
  EXPECT_TRUE(check({1.0, -2.02, 0.5, 0.25}).ok);  // error 0.02 = 2 × 0.01
  const auto r = check({1.0, -2.0, 0.5, 0.2701});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.worst_row, 1);
  EXPECT_EQ(r.worst_col, 1);
  EXPECT_NEAR(r.bound, 0.02, 1e-12);
  EXPECT_FALSE(check({1.0, -2.0, std::nan(""), 0.25}).ok);
  EXPECT_EQ(check({1.0, -2.0, std::nan(""), 0.25}).nan_mismatches, 1);
  EXPECT_FALSE(check({1.0, -2.0, 0.5, std::numeric_limits<double>::infinity()}).ok);
  // NaN where the reference is NaN (NaN inputs) is right; a number there is not.
  const std::vector<double> nan_ref{std::nan(""), 1.0, 1.0, 1.0};
  EXPECT_TRUE(reference::check_error_rule({std::nan(""), 1.0, 1.0, 1.0}, nan_ref, nan_ref, rows, 2, DType::f16).ok);
  EXPECT_FALSE(reference::check_error_rule({0.0, 1.0, 1.0, 1.0}, nan_ref, nan_ref, rows, 2, DType::f16).ok);
  // Only the listed rows count.
  EXPECT_TRUE(reference::check_error_rule({1.0, -2.0, 9.0, 9.0}, same, ref, {0}, 2, DType::bf16, 0.0).ok);
  EXPECT_NEAR(reference::default_atol(DType::bf16, 1.7), 2 * std::ldexp(1.0, -8) * 2.0, 1e-15);
  EXPECT_NEAR(reference::default_atol(DType::f32, 0.7), 16 * std::ldexp(1.0, -24), 1e-20);
}

// A failing check says where: how many elements in which rows, and per head the failing columns
// (a defect in one warp's columns or one head shows as such a pattern).
TEST(ErrorRule, FailuresAreLocated) {
  const int64_t rows_n = 6, heads = 3, dim = 8, width = heads * dim;
  std::vector<double> ref(static_cast<size_t>(rows_n * width));
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = std::sin(0.37 * static_cast<double>(i));
  std::vector<double> got = ref;
  for (int64_t r = 2; r <= 4; ++r) {
    for (int64_t c = 3; c <= 5; ++c) got[static_cast<size_t>(r * width + 1 * dim + c)] += 0.5;  // head 1, cols 3-5
  }
  got[static_cast<size_t>(3 * width + 2 * dim + 7)] = std::nan("");                             // head 2, col 7
  got[static_cast<size_t>(5 * width + 1 * dim + 0)] += 0.5;                                     // not a listed row
  const std::vector<int64_t> rows{0, 1, 2, 3, 4};
  const auto r = reference::check_error_rule(got, ref, ref, rows, width, DType::bf16, 0.0);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.failing, 10);
  EXPECT_EQ(r.failing_rows, 3);
  EXPECT_EQ(r.first_failing_row, 2);
  EXPECT_EQ(r.last_failing_row, 4);
  const std::string d = r.describe(dim);
  EXPECT_NE(d.find("failing: 10 elements in 3 of the checked rows (packed rows 2..4), head 1 cols 3-5; head 2 cols 7"),
            std::string::npos)
      << d;
  // A passing check counts nothing and says nothing of it.
  const auto ok = reference::check_error_rule(ref, ref, ref, rows, width, DType::bf16, 0.0);
  EXPECT_TRUE(ok.ok);
  EXPECT_EQ(ok.failing, 0);
  EXPECT_EQ(ok.describe(dim).find("failing"), std::string::npos);
}

}  // namespace
}  // namespace fa_test
