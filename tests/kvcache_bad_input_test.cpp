// Invalid KV-cache calls: one test per rule of validate.cpp's to_params(KVCacheArgs). Each asserts
// the StatusCode, that the message names the argument and the value at fault, that supports() and
// the workspace query agree with the call, and that a refused call left the cache untouched.
// Values inside the index arrays (lengths, pages, cache rows) are checked for host tensors.
#include <gtest/gtest.h>

#include <cmath>

#include "support/check.hpp"
#include "support/kvcache_problem.hpp"

namespace fa_test {
namespace {

using namespace flashattn;

constexpr auto kInvalid = StatusCode::invalid_argument;
constexpr auto kUnsupported = StatusCode::not_supported;

::testing::AssertionResult mentions(const std::string& message, const std::vector<std::string>& parts) {
  for (const auto& part : parts) {
    if (message.find(part) == std::string::npos) {
      return ::testing::AssertionFailure() << "message \"" << message << "\" does not mention \"" << part << "\"";
    }
  }
  return ::testing::AssertionSuccess();
}

class KVBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    Rng rng;
    // paged: 3 sequences of 5, 0, 9 cached keys, 2 appended, pages of 4 (3 pages each), rotary
    p = make_kv_problem(KVCase::decode({5, 0, 9}, 12, 4, 2, 64).paged(4).append(2).rotate(Rotary::interleaved), rng);
    c = make_kv_problem(KVCase::decode({5, 0, 9}, 12, 4, 2, 64).append(1).indexed(), rng);
    paged = p.args(host);
    contiguous = c.args(host);
  }

  // The call fails with `code` naming `parts`; the queries agree; nothing was appended.
  void expect_rejected(const KVCacheArgs& a, StatusCode code, const std::vector<std::string>& parts) {
    for (KVProblem* x : {&p, &c}) x->k_cache.snapshot(), x->v_cache.snapshot();
    const Status call = kvcache_forward(a);
    EXPECT_EQ(call.code, code) << call.message;
    EXPECT_TRUE(mentions(call.message, parts));
    const Status s = supports(a);
    EXPECT_EQ(s.code, call.code) << "supports() disagrees with the call: " << s.message;
    EXPECT_EQ(s.message, call.message);
    std::size_t bytes = 1;
    EXPECT_EQ(kvcache_workspace_size(a, &bytes).code, call.code);
    EXPECT_EQ(kvcache_path(a), "");
    for (KVProblem* x : {&p, &c}) {
      EXPECT_TRUE(x->k_cache.unchanged()) << "a refused call wrote k_cache";
      EXPECT_TRUE(x->v_cache.unchanged()) << "a refused call wrote v_cache";
    }
  }

  DeviceMirror host{Backend::host()};
  KVProblem p, c;
  KVCacheArgs paged, contiguous;
};

TEST_F(KVBadInput, ValidArgumentsAreAccepted) {
  EXPECT_TRUE(supports(paged).ok()) << supports(paged).message;
  EXPECT_TRUE(supports(contiguous).ok()) << supports(contiguous).message;
  EXPECT_EQ(kvcache_path(paged), "cpu");
  std::size_t bytes = 0;
  ASSERT_TRUE(kvcache_workspace_size(paged, &bytes).ok());
  EXPECT_EQ(bytes, 3u * 1 * 4 * 64 * 2) << "the rotated q, in bf16";
  ASSERT_TRUE(kvcache_workspace_size(contiguous, &bytes).ok());
  EXPECT_EQ(bytes, 0u) << "no rotary, no workspace";
}

TEST_F(KVBadInput, WorkspaceTooSmall) {
  std::size_t bytes = 0;
  ASSERT_TRUE(kvcache_workspace_size(paged, &bytes).ok());
  std::vector<unsigned char> ws(bytes);
  paged.workspace = ws.data();
  paged.workspace_bytes = bytes - 1;
  const Status s = kvcache_forward(paged);
  EXPECT_EQ(s.code, kInvalid);
  EXPECT_TRUE(mentions(s.message, {"workspace_bytes = " + std::to_string(bytes - 1)}));
  paged.workspace = nullptr;
  paged.workspace_bytes = bytes;
  EXPECT_TRUE(mentions(kvcache_forward(paged).message, {"workspace", "null"}));
}

// ---- q, caches: ranks, dtypes, devices, shapes ----
TEST_F(KVBadInput, QRankThree) { paged.q.rank = 3; expect_rejected(paged, kInvalid, {"q:", "rank 3", "expected 4"}); }
TEST_F(KVBadInput, QDtypeInt32) { paged.q.dtype = DType::i32; expect_rejected(paged, kInvalid, {"q:", "dtype i32"}); }
TEST_F(KVBadInput, MissingKCache) { paged.k_cache = TensorView{}; expect_rejected(paged, kInvalid, {"k_cache:", "rank 0"}); }
TEST_F(KVBadInput, KCacheDtype) { paged.k_cache.dtype = DType::f16; expect_rejected(paged, kInvalid, {"k_cache:", "dtype f16", "expected bf16"}); }
TEST_F(KVBadInput, VCacheDevice) { paged.v_cache.device = Device::cuda; expect_rejected(paged, kInvalid, {"v_cache:", "on cuda"}); }
TEST_F(KVBadInput, VCachePagesDiffer) { paged.v_cache.shape[0] -= 1; expect_rejected(paged, kInvalid, {"v_cache:", "num_pages"}); }
TEST_F(KVBadInput, KCacheHeadDimDiffers) { contiguous.k_cache.shape[3] = 32; expect_rejected(contiguous, kInvalid, {"k_cache:", "hdim_qk of q"}); }
TEST_F(KVBadInput, VCacheHeadsDiffer) { contiguous.v_cache.shape[2] = 4; expect_rejected(contiguous, kInvalid, {"v_cache:", "heads_kv of k_cache"}); }
TEST_F(KVBadInput, HeadsNotDivisible) {
  for (TensorView* t : {&contiguous.k_cache, &contiguous.v_cache, &contiguous.k_new, &contiguous.v_new}) t->shape[2] = 3;
  expect_rejected(contiguous, kInvalid, {"heads_q = 4", "heads_kv = 3"});
}
TEST_F(KVBadInput, HeadDimUnsupported) {
  for (TensorView* t : {&contiguous.q, &contiguous.k_cache, &contiguous.k_new}) t->shape[3] = 12;
  expect_rejected(contiguous, kUnsupported, {"hdim_qk", "12"});
}
TEST_F(KVBadInput, CacheBatchBelowBatch) {
  contiguous.cache_batch_idx = TensorView{};
  contiguous.k_cache.shape[0] = contiguous.v_cache.shape[0] = 2;
  expect_rejected(contiguous, kInvalid, {"k_cache:", "batch_cache = 2", "batch = 3"});
}
TEST_F(KVBadInput, OutShape) { paged.out.shape[3] = 32; expect_rejected(paged, kInvalid, {"out:", "[3, 1, 4, 32]", "[3, 1, 4, 64]"}); }
TEST_F(KVBadInput, MissingOut) { paged.out = TensorView{}; expect_rejected(paged, kInvalid, {"out:", "missing"}); }
TEST_F(KVBadInput, LseShape) { paged.lse.shape[1] = 2; expect_rejected(paged, kInvalid, {"lse:", "[3, 2, 1]", "[batch, heads_q, seqlen_q]"}); }
TEST_F(KVBadInput, LseDtype) { paged.lse.dtype = DType::bf16; expect_rejected(paged, kInvalid, {"lse:", "dtype bf16", "expected f32"}); }

// ---- block_table, cache_seqlens, cache_batch_idx ----
TEST_F(KVBadInput, BlockTableDtype) { paged.block_table.dtype = DType::f32; expect_rejected(paged, kInvalid, {"block_table:", "dtype f32", "expected i32"}); }
TEST_F(KVBadInput, BlockTableRank) { paged.block_table.rank = 1; expect_rejected(paged, kInvalid, {"block_table:", "rank 1", "expected 2"}); }
TEST_F(KVBadInput, BlockTableBatch) { paged.block_table.shape[0] = 2; expect_rejected(paged, kInvalid, {"block_table:", "batch = 3"}); }
TEST_F(KVBadInput, BlockTableWithBatchIdx) {
  paged.cache_batch_idx = contiguous.cache_batch_idx;
  expect_rejected(paged, kInvalid, {"cache_batch_idx:", "block_table"});
}
TEST_F(KVBadInput, PagedWithoutCacheSeqlens) { paged.cache_seqlens = TensorView{}; expect_rejected(paged, kInvalid, {"cache_seqlens:", "missing", "paged"}); }
TEST_F(KVBadInput, PageSizeZero) {
  paged.k_cache.shape[1] = paged.v_cache.shape[1] = 0;
  expect_rejected(paged, kInvalid, {"page_size = 0", ">= 1"});
}
TEST_F(KVBadInput, CacheSeqlensSize) { paged.cache_seqlens.shape[0] = 2; expect_rejected(paged, kInvalid, {"cache_seqlens:", "[2]", "[batch of q]"}); }
TEST_F(KVBadInput, CacheSeqlensDtype) { paged.cache_seqlens.dtype = DType::f32; expect_rejected(paged, kInvalid, {"cache_seqlens:", "dtype f32"}); }
TEST_F(KVBadInput, CacheBatchIdxSize) { contiguous.cache_batch_idx.shape[0] = 4; expect_rejected(contiguous, kInvalid, {"cache_batch_idx:", "[4]"}); }

// ---- values inside the index arrays (host tensors) ----
TEST_F(KVBadInput, NegativeCacheSeqlen) {
  p.cache_seqlens.set({1}, -3);
  expect_rejected(paged, kInvalid, {"cache_seqlens[1] = -3", "negative"});
}
TEST_F(KVBadInput, LengthBeyondCapacity) {
  p.cache_seqlens.set({2}, 11);  // + 2 appended > 12
  expect_rejected(paged, kInvalid, {"cache_seqlens[2] = 11", "seqlen_new = 2", "capacity of 12", "max_pages * page_size"});
}
TEST_F(KVBadInput, LengthBeyondContiguousCapacity) {
  c.cache_seqlens.set({0}, 12);
  expect_rejected(contiguous, kInvalid, {"cache_seqlens[0] = 12", "capacity of 12", "seqlen_cache"});
}
TEST_F(KVBadInput, PageIndexBeyondPool) {
  const int64_t pages = p.k_cache.shape(0);
  p.block_table.set({0, 1}, static_cast<double>(pages));
  expect_rejected(paged, kInvalid, {"block_table[0][1] = " + std::to_string(pages), "outside the pages [0, " + std::to_string(pages) + ")"});
}
TEST_F(KVBadInput, NegativePageIndex) {
  p.block_table.set({2, 0}, -1);
  expect_rejected(paged, kInvalid, {"block_table[2][0] = -1"});
}
TEST_F(KVBadInput, UnusedPageEntriesAreNotRead) {
  // sequence 1 holds 0 + 2 keys: one page; its other entries may hold anything
  p.block_table.set({1, 2}, 1 << 30);
  EXPECT_TRUE(supports(paged).ok()) << supports(paged).message;
}
TEST_F(KVBadInput, BatchIdxOutOfRange) {
  c.cache_batch_idx.set({2}, 5);  // the cache has 5 rows
  expect_rejected(contiguous, kInvalid, {"cache_batch_idx[2] = 5", "[0, 5)"});
}
// cache_leftpad: int32 [batch], contiguous caches only, 0 ≤ pad ≤ cache_seqlens.
class KVBadLeftpad : public KVBadInput {
 protected:
  HostTensor pads{DType::i32, {3}};
  TensorView with_pads(std::vector<int32_t> values) {
    pads.fill_i32(values);
    return host.view(pads);
  }
};
TEST_F(KVBadLeftpad, WithBlockTable) {
  paged.cache_leftpad = with_pads({0, 0, 0});
  expect_rejected(paged, kUnsupported, {"cache_leftpad:", "block_table", "contiguous caches only"});
}
TEST_F(KVBadLeftpad, Size) {
  contiguous.cache_leftpad = with_pads({0, 0, 0});
  contiguous.cache_leftpad.shape[0] = 2;
  expect_rejected(contiguous, kInvalid, {"cache_leftpad:", "[2]", "[batch of q]"});
}
TEST_F(KVBadLeftpad, Dtype) {
  contiguous.cache_leftpad = with_pads({0, 0, 0});
  contiguous.cache_leftpad.dtype = DType::f32;
  expect_rejected(contiguous, kInvalid, {"cache_leftpad:", "dtype f32"});
}
TEST_F(KVBadLeftpad, BeyondCacheSeqlens) {
  contiguous.cache_leftpad = with_pads({0, 1, 3});  // sequence 1 holds 0 rows
  expect_rejected(contiguous, kInvalid, {"cache_leftpad[1] = 1", "[0, cache_seqlens[1] = 0]"});
}
TEST_F(KVBadLeftpad, Negative) {
  contiguous.cache_leftpad = with_pads({-2, 0, 0});
  expect_rejected(contiguous, kInvalid, {"cache_leftpad[0] = -2"});
}
TEST_F(KVBadLeftpad, WithinBoundsRuns) {
  contiguous.cache_leftpad = with_pads({5, 0, 9});  // every sequence entirely padding: no keys but the new one
  EXPECT_TRUE(supports(contiguous).ok()) << supports(contiguous).message;
}

TEST_F(KVBadInput, RotaryTableTooShort) {
  paged.rotary_cos.shape[0] = paged.rotary_sin.shape[0] = 10;  // sequence 2 rotates positions 9, 10
  expect_rejected(paged, kInvalid, {"rotary_cos:", "10 positions", "sequence 2", "up to 10"});
}

// ---- k_new, v_new ----
TEST_F(KVBadInput, KNewWithoutVNew) { paged.v_new = TensorView{}; expect_rejected(paged, kInvalid, {"v_new:", "missing", "both"}); }
TEST_F(KVBadInput, KNewHeads) { paged.k_new.shape[2] = 1; expect_rejected(paged, kInvalid, {"k_new:", "[3, 2, 1, 64]"}); }
TEST_F(KVBadInput, VNewRows) { paged.v_new.shape[1] = 3; expect_rejected(paged, kInvalid, {"v_new:", "seqlen_new of k_new"}); }
TEST_F(KVBadInput, KNewDtype) { paged.k_new.dtype = DType::f32; expect_rejected(paged, kInvalid, {"k_new:", "dtype f32"}); }
TEST_F(KVBadInput, AppendBeyondCapacity) {
  for (TensorView* t : {&paged.k_new, &paged.v_new}) t->shape[1] = 13;
  expect_rejected(paged, kInvalid, {"k_new:", "seqlen_new = 13", "capacity of 12"});
}
TEST_F(KVBadInput, AppendWithoutCacheSeqlens) {
  contiguous.cache_seqlens = TensorView{};
  expect_rejected(contiguous, kInvalid, {"cache_seqlens:", "missing", "k_new"});
}

// ---- rotary ----
TEST_F(KVBadInput, RotaryCosWithoutSin) { paged.rotary_sin = TensorView{}; expect_rejected(paged, kInvalid, {"rotary_sin:", "missing"}); }
TEST_F(KVBadInput, RotaryDimBeyondHeadDim) {
  paged.rotary_cos.shape[1] = paged.rotary_sin.shape[1] = 40;
  expect_rejected(paged, kInvalid, {"rotary_cos:", "rotary_dim = 80", "hdim_qk = 64"});
}
TEST_F(KVBadInput, RotaryShapesDiffer) { paged.rotary_sin.shape[1] = 16; expect_rejected(paged, kInvalid, {"rotary_sin:", "rotary_cos"}); }
TEST_F(KVBadInput, RotaryDtype) { paged.rotary_cos.dtype = DType::f32; expect_rejected(paged, kInvalid, {"rotary_cos:", "dtype f32"}); }
TEST_F(KVBadInput, RotaryRowStridesDiffer) {
  paged.rotary_sin.stride[0] = paged.rotary_cos.stride[0] / 2;
  paged.rotary_sin.shape[1] = paged.rotary_cos.shape[1] = paged.rotary_sin.stride[0];
  expect_rejected(paged, kInvalid, {"rotary_sin:", "row stride"});
}

// ---- options and splits ----
TEST_F(KVBadInput, NegativeSoftcap) { paged.options.softcap = -1.f; expect_rejected(paged, kInvalid, {"softcap = -1"}); }
TEST_F(KVBadInput, WindowRightWithCausal) {
  paged.options.causal = true;
  paged.options.window_right = 2;
  expect_rejected(paged, kInvalid, {"window_right = 2", "causal"});
}
TEST_F(KVBadInput, NegativeNumSplits) { paged.num_splits = -1; expect_rejected(paged, kInvalid, {"num_splits = -1"}); }
TEST_F(KVBadInput, UnknownPath) { paged.path = "nope"; expect_rejected(paged, kInvalid, {"path = \"nope\""}); }

}  // namespace
}  // namespace fa_test
