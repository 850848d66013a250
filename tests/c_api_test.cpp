// The C ABI (flashattn_c, a shared library): a forward and a backward through fa_forward /
// fa_backward checked against the reference, and status codes and messages that round-trip.
#include <gtest/gtest.h>

#include <cstring>

#include "flashattn/flashattn_c.h"
#include "support/check.hpp"

namespace fa_test {
namespace {

using namespace flashattn;

fa_tensor to_c(const TensorView& t) {
  fa_tensor c{};
  c.data = t.data;
  c.dtype = static_cast<int32_t>(t.dtype);
  c.device = static_cast<int32_t>(t.device);
  c.rank = t.rank;
  for (int i = 0; i < TensorView::kMaxRank; ++i) {
    c.shape[i] = t.shape[i];
    c.stride[i] = t.stride[i];
  }
  return c;
}

fa_args to_c(const BackwardArgs& b) {
  fa_args a{};
  a.q = to_c(b.q);
  a.k = to_c(b.k);
  a.v = to_c(b.v);
  a.out = to_c(b.out);
  a.lse = to_c(b.lse);
  a.dout = to_c(b.dout);
  a.dq = to_c(b.dq);
  a.dk = to_c(b.dk);
  a.dv = to_c(b.dv);
  a.cu_seqlens_q = to_c(b.cu_seqlens_q);
  a.cu_seqlens_k = to_c(b.cu_seqlens_k);
  a.max_seqlen_q = b.max_seqlen_q;
  a.max_seqlen_k = b.max_seqlen_k;
  a.has_softmax_scale = b.softmax_scale.has_value();
  a.softmax_scale = b.softmax_scale.value_or(0.f);
  a.causal = b.causal;
  a.window_left = b.window_left;
  a.window_right = b.window_right;
  a.softcap = b.softcap;
  a.deterministic = b.deterministic;
  return a;
}

class CApi : public ::testing::Test {
 protected:
  void SetUp() override {
    Rng rng;
    p = make_problem(Case::varlen({9, 0, 20}, {12, 5, 17}, 4, 2, 64).causal_mask().cap(8.f).scale(0.2f)
                         .layout(Strides::padded),
                     rng);
    args = to_c(p.backward_args(host));
  }
  DeviceMirror host{Backend::cpu};
  Problem p;
  fa_args args;
  char msg[512] = "untouched";
};

TEST_F(CApi, ForwardAndBackwardMatchReference) {
  for (HostTensor* t : {&p.out, &p.lse, &p.dq, &p.dk, &p.dv}) t->poison();
  for (HostTensor* t : {&p.q, &p.k, &p.v, &p.cu_q, &p.cu_k, &p.dout, &p.out, &p.lse, &p.dq, &p.dk, &p.dv}) t->snapshot();
  ASSERT_EQ(fa_forward(&args, msg, sizeof msg), 0) << msg;
  EXPECT_STREQ(msg, "");
  expect_forward_matches(p);
  p.out.snapshot();  // inputs of the backward from here on
  p.lse.snapshot();
  ASSERT_EQ(fa_backward(&args, msg, sizeof msg), 0) << msg;
  expect_backward_matches(p);
}

TEST_F(CApi, ErrorMessageRoundTrip) {
  args.k.data = nullptr;
  const int code = fa_forward(&args, msg, sizeof msg);
  EXPECT_EQ(code, static_cast<int>(StatusCode::invalid_argument));
  EXPECT_NE(std::strstr(msg, "k: data pointer is null"), nullptr) << msg;
  ForwardArgs f = p.forward_args(host);
  f.k.data = nullptr;
  EXPECT_EQ(std::string(msg), forward(f).message);  // the C++ message, unchanged
  EXPECT_EQ(fa_backward(&args, msg, sizeof msg), code);
  EXPECT_NE(std::strstr(msg, "k: data pointer is null"), nullptr) << msg;
}

TEST_F(CApi, UnsupportedCodeRoundTrip) {
  args.q.shape[2] = args.k.shape[2] = 12;
  EXPECT_EQ(fa_forward(&args, msg, sizeof msg), static_cast<int>(StatusCode::not_supported));
  EXPECT_NE(std::strstr(msg, "12"), nullptr) << msg;
}

TEST_F(CApi, MessageTruncatedToCapacity) {
  args.softcap = -3.f;
  char small[8];
  std::memset(small, 'x', sizeof small);
  EXPECT_EQ(fa_forward(&args, small, sizeof small), static_cast<int>(StatusCode::invalid_argument));
  EXPECT_EQ(std::strlen(small), sizeof small - 1);
  EXPECT_EQ(std::string(small), std::string("softcap = -3").substr(0, sizeof small - 1));
  EXPECT_EQ(fa_forward(&args, nullptr, 0), static_cast<int>(StatusCode::invalid_argument));  // no message wanted
}

TEST_F(CApi, NullArguments) {
  EXPECT_EQ(fa_forward(nullptr, msg, sizeof msg), static_cast<int>(StatusCode::invalid_argument));
  EXPECT_STREQ(msg, "args: null pointer");
  EXPECT_EQ(fa_backward(nullptr, msg, sizeof msg), static_cast<int>(StatusCode::invalid_argument));
  std::size_t bytes = 7;
  EXPECT_EQ(fa_forward_workspace_size(&args, nullptr, msg, sizeof msg), static_cast<int>(StatusCode::invalid_argument));
  EXPECT_STREQ(fa_forward_path(nullptr), "");
  EXPECT_EQ(fa_backward_workspace_size(&args, &bytes, msg, sizeof msg), 0) << msg;
}

TEST_F(CApi, RankAndEnumsOutOfRangeAreRejected) {
  args.q.rank = 9;
  EXPECT_EQ(fa_forward(&args, msg, sizeof msg), static_cast<int>(StatusCode::invalid_argument));
  EXPECT_NE(std::strstr(msg, "q:"), nullptr) << msg;
  args = to_c(p.backward_args(host));
  args.q.dtype = 77;
  EXPECT_EQ(fa_forward(&args, msg, sizeof msg), static_cast<int>(StatusCode::invalid_argument));
  EXPECT_NE(std::strstr(msg, "q: dtype"), nullptr) << msg;
}

TEST_F(CApi, PathAndCudaAvailability) {
  EXPECT_STREQ(fa_forward_path(&args), "cpu");
  EXPECT_STREQ(fa_backward_path(&args), "cpu");
  EXPECT_EQ(fa_cuda_available() != 0, cuda_available());
}

}  // namespace
}  // namespace fa_test
