// The C ABI (flashattn_c, a shared library): a forward and a backward through fa_forward /
// fa_backward checked against the reference, and status codes and messages that round-trip.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "flashattn/flashattn_c.h"
#include "support/c_abi.hpp"
#include "support/check.hpp"
#include "support/kvcache_problem.hpp"

namespace fa_test {
namespace {

using namespace flashattn;

// The options live beside the args (fa_args points at them).
fa_args args_to_c(const BackwardArgs& b, fa_options* o) {
  to_c(b.options, o);
  fa_args a;
  fa_args_init(&a);
  a.options = o;
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
    args = args_to_c(p.backward_args(host), &options);
  }
  DeviceMirror host{Backend::host()};
  Problem p;
  fa_options options;
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
  options.softcap = -3.f;
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
  args = args_to_c(p.backward_args(host), &options);
  args.q.dtype = 77;
  EXPECT_EQ(fa_forward(&args, msg, sizeof msg), static_cast<int>(StatusCode::invalid_argument));
  EXPECT_NE(std::strstr(msg, "q: dtype"), nullptr) << msg;
}

TEST_F(CApi, PathAndCudaAvailability) {
  EXPECT_STREQ(fa_forward_path(&args), "cpu");
  EXPECT_STREQ(fa_backward_path(&args), "cpu");
  EXPECT_EQ(fa_cuda_available() != 0, cuda_available());
  EXPECT_NE(std::strstr(fa_families(), "cpu"), nullptr) << fa_families();
}

TEST(Families, EachNamesItsDevice) {
  for (const std::string& name : families()) EXPECT_TRUE(family_device(name).has_value()) << name;
  EXPECT_EQ(family_device("cpu"), Device::cpu);
  EXPECT_EQ(family_device("sm80"), Device::cuda);  // listed (and refusing) in a build without CUDA too
  EXPECT_FALSE(family_device("tpu").has_value());
}

TEST_F(CApi, PathRestrictsTheFamily) {
  args.path = "cpu";
  EXPECT_EQ(fa_forward(&args, msg, sizeof msg), 0) << msg;
  args.path = "sm80";  // a CUDA family, given host tensors
  EXPECT_EQ(fa_forward(&args, msg, sizeof msg), static_cast<int>(StatusCode::not_supported));
  EXPECT_NE(std::strstr(msg, "path = \"sm80\""), nullptr) << msg;
  args.path = "tpu";
  EXPECT_EQ(fa_forward(&args, msg, sizeof msg), static_cast<int>(StatusCode::invalid_argument));
  EXPECT_NE(std::strstr(msg, "path = \"tpu\" is not a kernel family"), nullptr) << msg;
}

// A caller compiled against layout 1 of fa_args (before `path`): the library reads only the bytes
// it declares and gives `path` its default, whatever lies in memory after them.
TEST_F(CApi, OlderSmallerArgsStruct) {
  struct {
    fa_args args;
    unsigned char beyond[64];
  } caller;
  std::memset(&caller, 0xA5, sizeof caller);  // garbage where the newer fields would be
  std::memcpy(&caller.args, &args, FA_ARGS_SIZE_V1);
  caller.args.struct_size = FA_ARGS_SIZE_V1;
  for (HostTensor* t : {&p.out, &p.lse}) t->poison();
  for (HostTensor* t : {&p.q, &p.k, &p.v, &p.cu_q, &p.cu_k, &p.out, &p.lse}) t->snapshot();
  ASSERT_EQ(fa_forward(&caller.args, msg, sizeof msg), 0) << msg;
  expect_forward_matches(p);
  EXPECT_STREQ(fa_forward_path(&caller.args), "cpu");
}

// A caller compiled against layout 2 (before `block_table`): the forward reads packed keys, whatever
// lies in memory after the struct it declares.
TEST_F(CApi, LayoutTwoArgsStruct) {
  struct {
    fa_args args;
    unsigned char beyond[64];
  } caller;
  std::memset(&caller, 0xA5, sizeof caller);
  std::memcpy(&caller.args, &args, FA_ARGS_SIZE_V2);
  caller.args.struct_size = FA_ARGS_SIZE_V2;
  for (HostTensor* t : {&p.out, &p.lse}) t->poison();
  for (HostTensor* t : {&p.q, &p.k, &p.v, &p.cu_q, &p.cu_k, &p.out, &p.lse}) t->snapshot();
  ASSERT_EQ(fa_forward(&caller.args, msg, sizeof msg), 0) << msg;
  expect_forward_matches(p);
}

// fa_args.block_table: the paged varlen forward through the C ABI, against the reference on the
// gathered keys; the backward refuses it by name.
TEST_F(CApi, PagedForward) {
  Rng rng;
  Problem pp = make_problem(p.c.paged(3), rng);
  fa_args a = args_to_c(pp.backward_args(host), &options);
  a.k = to_c(host.view(pp.k_pages));
  a.v = to_c(host.view(pp.v_pages));
  a.block_table = to_c(host.view(pp.block_table));
  for (HostTensor* t : {&pp.out, &pp.lse}) t->poison();
  for (HostTensor* t : {&pp.q, &pp.k_pages, &pp.v_pages, &pp.block_table, &pp.cu_q, &pp.cu_k, &pp.out, &pp.lse}) t->snapshot();
  ASSERT_EQ(fa_forward(&a, msg, sizeof msg), 0) << msg;
  expect_forward_matches(pp);
  EXPECT_STREQ(fa_forward_path(&a), "cpu");
  EXPECT_EQ(fa_backward(&a, msg, sizeof msg), static_cast<int>(StatusCode::not_supported));
  EXPECT_NE(std::strstr(msg, "block_table"), nullptr) << msg;
}

// fa_args.zero_rows_outside_sequences (layout 4): the packed rows after the last sequence come back
// 0 in out, dq, dk and dv; a layout-3 caller, whose struct ends before the field, leaves them
// untouched (still the poison) even with the bytes beyond its struct set.
TEST_F(CApi, ZeroRowsOutsideSequences) {
  Rng rng;
  Problem pe = make_problem(p.c.extra(4), rng);
  for (const bool layout4 : {true, false}) {
    fa_args a = args_to_c(pe.backward_args(host), &options);
    a.zero_rows_outside_sequences = 1;
    if (!layout4) a.struct_size = FA_ARGS_SIZE_V3;
    for (HostTensor* t : {&pe.out, &pe.lse, &pe.dq, &pe.dk, &pe.dv}) t->poison();
    ASSERT_EQ(fa_forward(&a, msg, sizeof msg), 0) << msg;
    ASSERT_EQ(fa_backward(&a, msg, sizeof msg), 0) << msg;
    const auto expect_rows = [&](const char* name, const HostTensor& t, int64_t first, int64_t heads) {
      for (int64_t row = first; row < first + 4; ++row) {
        for (int64_t h = 0; h < heads; ++h) {
          for (int64_t d = 0; d < 64; ++d) {
            const double x = t.get({row, h, d});
            ASSERT_TRUE(layout4 ? x == 0.0 : std::isnan(x)) << name << " row " << row << " h " << h << ": " << x;
          }
        }
      }
    };
    expect_rows("out", pe.out, 29, 4);
    expect_rows("dq", pe.dq, 29, 4);
    expect_rows("dk", pe.dk, 34, 2);
    expect_rows("dv", pe.dv, 34, 2);
  }
}

// A newer caller's larger struct is accepted while the fields this library does not know are zero,
// refused by name when one is set; a struct_size below the first layout (unset) is refused.
TEST_F(CApi, StructSizeIsChecked) {
  struct {
    fa_args args;
    unsigned char newer[16];
  } caller{};
  caller.args = args;
  caller.args.struct_size = sizeof caller;
  EXPECT_EQ(fa_forward(&caller.args, msg, sizeof msg), 0) << msg;
  caller.newer[3] = 1;
  EXPECT_EQ(fa_forward(&caller.args, msg, sizeof msg), static_cast<int>(StatusCode::not_supported));
  EXPECT_NE(std::strstr(msg, "does not know"), nullptr) << msg;
  args.struct_size = 0;
  EXPECT_EQ(fa_forward(&args, msg, sizeof msg), static_cast<int>(StatusCode::invalid_argument));
  EXPECT_NE(std::strstr(msg, "fa_args.struct_size = 0"), nullptr) << msg;
  args.struct_size = sizeof(fa_args);
  options.struct_size = 3;
  EXPECT_EQ(fa_forward(&args, msg, sizeof msg), static_cast<int>(StatusCode::invalid_argument));
  EXPECT_NE(std::strstr(msg, "fa_options.struct_size = 3"), nullptr) << msg;
}

TEST_F(CApi, NullOptionsAreTheDefaults) {
  Rng rng;
  Problem plain = make_problem(Case::padded(2, 33, 47, 2, 1, 64), rng);  // default scale, no mask, no cap
  fa_options unused;
  fa_args a = args_to_c(plain.backward_args(host), &unused);
  a.options = nullptr;
  for (HostTensor* t : {&plain.out, &plain.lse}) t->poison();
  for (HostTensor* t : {&plain.q, &plain.k, &plain.v, &plain.out, &plain.lse}) t->snapshot();
  ASSERT_EQ(fa_forward(&a, msg, sizeof msg), 0) << msg;
  expect_forward_matches(plain);
}

fa_kvcache_args kvcache_to_c(const KVCacheArgs& k, fa_options* o) {
  to_c(k.options, o);
  fa_kvcache_args a;
  fa_kvcache_args_init(&a);
  a.options = o;
  a.q = to_c(k.q);
  a.k_cache = to_c(k.k_cache);
  a.v_cache = to_c(k.v_cache);
  a.cache_seqlens = to_c(k.cache_seqlens);
  a.block_table = to_c(k.block_table);
  a.cache_batch_idx = to_c(k.cache_batch_idx);
  a.cache_leftpad = to_c(k.cache_leftpad);
  a.k_new = to_c(k.k_new);
  a.v_new = to_c(k.v_new);
  a.rotary_cos = to_c(k.rotary_cos);
  a.rotary_sin = to_c(k.rotary_sin);
  a.rotary_interleaved = k.rotary_interleaved;
  a.out = to_c(k.out);
  a.lse = to_c(k.lse);
  a.num_splits = k.num_splits;
  return a;
}

// The KV-cache call through the C ABI: a paged cache with an append and rotary (which needs the
// workspace), against the reference; then a bad page index's message, unchanged.
TEST(CApiKVCache, PagedAppendRotaryMatchesReference) {
  Rng rng;
  KVProblem kp = make_kv_problem(
      KVCase::decode({7, 0, 40}, 48, 4, 2, 64).paged(16).append(2).rotate(Rotary::half_split).causal_mask().q_rows(2), rng);
  const KVExpected e = expect_of(kp);
  DeviceMirror host{Backend::host()};
  fa_options o;
  fa_kvcache_args a = kvcache_to_c(kp.args(host), &o);
  char msg[512] = "untouched";
  std::size_t bytes = 0;
  ASSERT_EQ(fa_kvcache_workspace_size(&a, &bytes, msg, sizeof msg), 0) << msg;
  EXPECT_GT(bytes, 0u);
  std::vector<unsigned char> workspace(bytes);
  a.workspace = workspace.data();
  a.workspace_bytes = bytes;
  EXPECT_STREQ(fa_kvcache_path(&a), "cpu");
  for (HostTensor* t : {&kp.out, &kp.lse}) t->poison();
  for (HostTensor* t : {&kp.q, &kp.k_new, &kp.v_new, &kp.rotary_cos, &kp.rotary_sin, &kp.cache_seqlens, &kp.block_table,
                        &kp.out, &kp.lse, &kp.k_cache, &kp.v_cache}) {
    t->snapshot();
  }
  ASSERT_EQ(fa_kvcache_forward(&a, msg, sizeof msg), 0) << msg;
  EXPECT_STREQ(msg, "");
  expect_kvcache_matches(kp, e);

  kp.block_table.set({2, 1}, 1000);
  EXPECT_EQ(fa_kvcache_forward(&a, msg, sizeof msg), static_cast<int>(StatusCode::invalid_argument));
  EXPECT_EQ(std::string(msg), kvcache_forward(kp.args(host)).message);
  EXPECT_NE(std::strstr(msg, "block_table[2][1] = 1000"), nullptr) << msg;
  EXPECT_EQ(fa_kvcache_forward(nullptr, msg, sizeof msg), static_cast<int>(StatusCode::invalid_argument));
  a.struct_size = 5;
  EXPECT_EQ(fa_kvcache_forward(&a, msg, sizeof msg), static_cast<int>(StatusCode::invalid_argument));
  EXPECT_NE(std::strstr(msg, "fa_kvcache_args.struct_size = 5"), nullptr) << msg;
}

// Layout 2 of fa_kvcache_args: cache_leftpad reaches the call (a left-padded cache against the
// reference, padding rows NaN); a caller compiled against layout 1 (struct_size = the layout-1 size)
// gets no left padding: its call reads the padding rows, which are NaN here.
TEST(CApiKVCache, LeftPaddedCache) {
  Rng rng;
  KVProblem kp = make_kv_problem(KVCase::decode({9, 30}, 64, 4, 2, 64).left_padded({20, 3}).append(1), rng);
  const KVExpected e = expect_of(kp);
  DeviceMirror host{Backend::host()};
  fa_options o;
  fa_kvcache_args a = kvcache_to_c(kp.args(host), &o);
  for (HostTensor* t : {&kp.out, &kp.lse}) t->poison();
  for (HostTensor* t : {&kp.q, &kp.k_new, &kp.v_new, &kp.cache_seqlens, &kp.cache_leftpad, &kp.out, &kp.lse, &kp.k_cache,
                        &kp.v_cache}) {
    t->snapshot();
  }
  char msg[512] = "untouched";
  ASSERT_EQ(fa_kvcache_forward(&a, msg, sizeof msg), 0) << msg;
  expect_kvcache_matches(kp, e);

  a.struct_size = FA_KVCACHE_ARGS_SIZE_V1;
  ASSERT_EQ(fa_kvcache_forward(&a, msg, sizeof msg), 0) << msg;
  EXPECT_TRUE(std::isnan(kp.out.get({0, 0, 0, 0}))) << "a layout-1 caller's call attends from row 0 (the NaN padding)";
}

}  // namespace
}  // namespace fa_test
