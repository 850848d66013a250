// Invalid arguments: one test per rule of src/api/validate.cpp. Each asserts the StatusCode, that
// the message names the argument (and the value at fault), and that supports() and the workspace
// query give the same answer as the call itself (they share one selection).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "support/check.hpp"

namespace fa_test {
namespace {

using namespace flashattn;

::testing::AssertionResult mentions(const std::string& message, const std::vector<std::string>& parts) {
  for (const auto& part : parts) {
    if (message.find(part) == std::string::npos) {
      return ::testing::AssertionFailure() << "message \"" << message << "\" does not mention \"" << part << "\"";
    }
  }
  return ::testing::AssertionSuccess();
}

// The call fails with `code` and a message mentioning each of `parts`; supports() and the workspace
// query agree (unless `queries_agree` is false: they cannot see a workspace that is too small).
template <class Args>
void expect_rejected(const Args& a, StatusCode code, const std::vector<std::string>& parts, bool queries_agree = true) {
  Status call;
  std::size_t bytes = 1;
  Status ws;
  if constexpr (std::is_same_v<Args, ForwardArgs>) {
    call = forward(a);
    ws = forward_workspace_size(a, &bytes);
  } else {
    call = backward(a);
    ws = backward_workspace_size(a, &bytes);
  }
  EXPECT_EQ(call.code, code) << call.message;
  EXPECT_TRUE(mentions(call.message, parts));
  if (!queries_agree) return;
  const Status s = supports(a);
  EXPECT_EQ(s.code, call.code) << "supports() disagrees with the call: " << s.message;
  EXPECT_EQ(s.message, call.message);
  EXPECT_EQ(ws.code, call.code) << "the workspace query disagrees with the call: " << ws.message;
}

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    Rng rng;
    p = make_problem(Case::padded(2, 5, 7, 4, 2, 64), rng);
    vp = make_problem(Case::varlen({3, 0, 4}, {5, 2, 6}, 4, 2, 64), rng);
    fwd = p.forward_args(host);
    bwd = p.backward_args(host);
    vfwd = vp.forward_args(host);
  }
  DeviceMirror host{Backend::host()};
  Problem p, vp;
  ForwardArgs fwd, vfwd;
  BackwardArgs bwd;
};

constexpr auto kInvalid = StatusCode::invalid_argument;
constexpr auto kUnsupported = StatusCode::not_supported;

TEST_F(BadInput, ValidArgumentsAreAccepted) {
  EXPECT_TRUE(supports(fwd).ok()) << supports(fwd).message;
  EXPECT_TRUE(supports(bwd).ok()) << supports(bwd).message;
  EXPECT_TRUE(supports(vfwd).ok()) << supports(vfwd).message;
  EXPECT_EQ(forward_path(fwd), "cpu");
  EXPECT_EQ(backward_path(bwd), "cpu");
}

// ---- null data pointers ----
TEST_F(BadInput, NullQ) { fwd.q.data = nullptr; expect_rejected(fwd, kInvalid, {"q:", "null", "[2, 5, 4, 64]"}); }
TEST_F(BadInput, NullK) { fwd.k.data = nullptr; expect_rejected(fwd, kInvalid, {"k:", "null"}); }
TEST_F(BadInput, NullV) { fwd.v.data = nullptr; expect_rejected(fwd, kInvalid, {"v:", "null"}); }
TEST_F(BadInput, NullOut) { fwd.out.data = nullptr; expect_rejected(fwd, kInvalid, {"out:", "null"}); }
TEST_F(BadInput, NullLse) { fwd.lse.data = nullptr; expect_rejected(fwd, kInvalid, {"lse:", "null"}); }
TEST_F(BadInput, NullDout) { bwd.dout.data = nullptr; expect_rejected(bwd, kInvalid, {"dout:", "null"}); }
TEST_F(BadInput, NullDq) { bwd.dq.data = nullptr; expect_rejected(bwd, kInvalid, {"dq:", "null"}); }
TEST_F(BadInput, NullDk) { bwd.dk.data = nullptr; expect_rejected(bwd, kInvalid, {"dk:", "null"}); }
TEST_F(BadInput, NullDv) { bwd.dv.data = nullptr; expect_rejected(bwd, kInvalid, {"dv:", "null"}); }
TEST_F(BadInput, NullLseInBackward) { bwd.lse.data = nullptr; expect_rejected(bwd, kInvalid, {"lse:", "null"}); }
TEST_F(BadInput, NullOutInBackward) { bwd.out.data = nullptr; expect_rejected(bwd, kInvalid, {"out:", "null"}); }
TEST_F(BadInput, NullCuSeqlens) {
  vfwd.cu_seqlens_k.data = nullptr;
  expect_rejected(vfwd, kInvalid, {"cu_seqlens_k:", "null"});
}

// ---- missing tensors ----
TEST_F(BadInput, MissingOut) { fwd.out = TensorView{}; expect_rejected(fwd, kInvalid, {"out:", "missing"}); }
TEST_F(BadInput, MissingLseInBackward) { bwd.lse = TensorView{}; expect_rejected(bwd, kInvalid, {"lse:", "missing"}); }
TEST_F(BadInput, MissingDout) { bwd.dout = TensorView{}; expect_rejected(bwd, kInvalid, {"dout:", "missing"}); }
TEST_F(BadInput, MissingDk) { bwd.dk = TensorView{}; expect_rejected(bwd, kInvalid, {"dk:", "missing"}); }

// ---- rank ----
TEST_F(BadInput, QRankThreeWithoutCuSeqlens) {
  fwd.q.rank = 3;
  expect_rejected(fwd, kInvalid, {"q:", "rank 3", "expected 4"});
}
TEST_F(BadInput, KWrongRank) { fwd.k.rank = 2; expect_rejected(fwd, kInvalid, {"k:", "rank 2", "expected 4"}); }
TEST_F(BadInput, QRankFourWithCuSeqlens) {
  vfwd.q = fwd.q;
  expect_rejected(vfwd, kInvalid, {"q:", "rank 4", "expected 3"});
}
TEST_F(BadInput, LseWrongRank) { fwd.lse.rank = 2; expect_rejected(fwd, kInvalid, {"lse:", "rank 2", "expected 3"}); }

// ---- shapes ----
TEST_F(BadInput, KBatchMismatch) { fwd.k.shape[0] = 3; expect_rejected(fwd, kInvalid, {"k:", "shape [3, 7, 2, 64]", "batch"}); }
TEST_F(BadInput, VSeqlenMismatch) { fwd.v.shape[1] = 6; expect_rejected(fwd, kInvalid, {"v:", "shape [2, 6, 2, 64]", "[2, 7, 2, 64]"}); }
TEST_F(BadInput, VHeadsMismatch) { fwd.v.shape[2] = 4; expect_rejected(fwd, kInvalid, {"v:", "[2, 7, 4, 64]"}); }
TEST_F(BadInput, KHeadDimMismatch) { fwd.k.shape[3] = 32; expect_rejected(fwd, kInvalid, {"k:", "[2, 7, 2, 32]"}); }
TEST_F(BadInput, OutShapeMismatch) { fwd.out.shape[1] = 4; expect_rejected(fwd, kInvalid, {"out:", "[2, 4, 4, 64]", "[2, 5, 4, 64]"}); }
TEST_F(BadInput, LseShapeMismatch) { fwd.lse.shape[2] = 7; expect_rejected(fwd, kInvalid, {"lse:", "[2, 4, 7]", "[2, 4, 5]"}); }
TEST_F(BadInput, DqShapeMismatch) { bwd.dq.shape[3] = 32; expect_rejected(bwd, kInvalid, {"dq:", "[2, 5, 4, 32]"}); }
TEST_F(BadInput, DkShapeMismatch) { bwd.dk.shape[1] = 8; expect_rejected(bwd, kInvalid, {"dk:", "[2, 8, 2, 64]"}); }
TEST_F(BadInput, DvShapeMismatch) { bwd.dv.shape[2] = 1; expect_rejected(bwd, kInvalid, {"dv:", "[2, 7, 1, 64]"}); }
TEST_F(BadInput, DoutShapeMismatch) { bwd.dout.shape[0] = 1; expect_rejected(bwd, kInvalid, {"dout:", "[1, 5, 4, 64]"}); }
TEST_F(BadInput, VarlenKRowsDifferFromV) { vfwd.v.shape[0] = 12; expect_rejected(vfwd, kInvalid, {"v:", "[12, 2, 64]"}); }

// ---- head dims and heads ----
TEST_F(BadInput, HeadDimNotMultipleOf8) {
  for (TensorView* t : {&fwd.q, &fwd.k}) t->shape[3] = 12;
  expect_rejected(fwd, kUnsupported, {"hdim_qk", "12"});
}
TEST_F(BadInput, HeadDimTooLarge) {
  for (TensorView* t : {&fwd.q, &fwd.k}) t->shape[3] = 264;
  expect_rejected(fwd, kUnsupported, {"hdim_qk", "264"});
}
TEST_F(BadInput, ValueHeadDimUnsupported) {
  for (TensorView* t : {&fwd.v, &fwd.out}) t->shape[3] = 4;
  expect_rejected(fwd, kUnsupported, {"hdim_v", "4"});
}
// Head dim 0 is refused by name (it used to fall through to a division by zero in the default
// scale), for q/k and for v, forward and backward.
TEST_F(BadInput, HeadDimZero) {
  for (TensorView* t : {&fwd.q, &fwd.k}) t->shape[3] = 0;
  expect_rejected(fwd, kUnsupported, {"hdim_qk", "= 0"});
  for (TensorView* t : {&bwd.q, &bwd.k, &bwd.dq, &bwd.dk}) t->shape[3] = 0;
  expect_rejected(bwd, kUnsupported, {"hdim_qk", "= 0"});
}
TEST_F(BadInput, ValueHeadDimZero) {
  for (TensorView* t : {&fwd.v, &fwd.out}) t->shape[3] = 0;
  expect_rejected(fwd, kUnsupported, {"hdim_v", "= 0"});
}
TEST_F(BadInput, HeadsNotDivisible) {
  for (TensorView* t : {&fwd.k, &fwd.v}) t->shape[2] = 3;
  expect_rejected(fwd, kInvalid, {"heads_q = 4", "heads_kv = 3"});
}
TEST_F(BadInput, ZeroKvHeads) {
  for (TensorView* t : {&fwd.k, &fwd.v}) t->shape[2] = 0;
  expect_rejected(fwd, kInvalid, {"heads_kv = 0"});
}

// ---- dtype and device ----
TEST_F(BadInput, KDtypeDiffersFromQ) {
  fwd.q.dtype = DType::bf16;
  fwd.k.dtype = DType::f16;
  expect_rejected(fwd, kInvalid, {"k:", "dtype f16", "expected bf16"});
}
TEST_F(BadInput, OutDtypeDiffersFromQ) { fwd.out.dtype = DType::f32; expect_rejected(fwd, kInvalid, {"out:", "dtype f32", "expected bf16"}); }
TEST_F(BadInput, QDtypeInt32) { fwd.q.dtype = DType::i32; expect_rejected(fwd, kInvalid, {"q:", "dtype i32"}); }
TEST_F(BadInput, LseNotFloat32) { fwd.lse.dtype = DType::bf16; expect_rejected(fwd, kInvalid, {"lse:", "dtype bf16", "expected f32"}); }
TEST_F(BadInput, CuSeqlensNotInt32) {
  vfwd.cu_seqlens_q.dtype = DType::f32;
  expect_rejected(vfwd, kInvalid, {"cu_seqlens_q:", "dtype f32", "expected i32"});
}
TEST_F(BadInput, KOnAnotherDevice) { fwd.k.device = Device::cuda; expect_rejected(fwd, kInvalid, {"k:", "on cuda", "expected cpu"}); }
TEST_F(BadInput, DvOnAnotherDevice) { bwd.dv.device = Device::cuda; expect_rejected(bwd, kInvalid, {"dv:", "on cuda"}); }

// ---- sizes and strides ----
TEST_F(BadInput, NegativeSize) { fwd.q.shape[1] = -1; expect_rejected(fwd, kInvalid, {"q:", "negative size -1"}); }
TEST_F(BadInput, NegativeSizeInK) { fwd.k.shape[1] = -7; expect_rejected(fwd, kInvalid, {"k:", "negative size -7"}); }
TEST_F(BadInput, NegativeStride) { fwd.v.stride[1] = -128; expect_rejected(fwd, kInvalid, {"v:", "negative stride -128"}); }
TEST_F(BadInput, NegativeStrideInDq) { bwd.dq.stride[0] = -1; expect_rejected(bwd, kInvalid, {"dq:", "negative stride -1"}); }
TEST_F(BadInput, NonContiguousLastDim) {
  fwd.q.stride[3] = 2;
  expect_rejected(fwd, kInvalid, {"q:", "last dimension must be contiguous", "stride 2"});
}
TEST_F(BadInput, NonContiguousLastDimOfOut) {
  fwd.out.stride[3] = 0;
  expect_rejected(fwd, kInvalid, {"out:", "contiguous", "stride 0"});
}
TEST_F(BadInput, NonContiguousLse) { fwd.lse.stride[2] = 3; expect_rejected(fwd, kInvalid, {"lse:", "contiguous", "stride 3"}); }

// ---- varlen offsets ----
TEST_F(BadInput, OnlyCuSeqlensQ) {
  vfwd.cu_seqlens_k = TensorView{};
  expect_rejected(vfwd, kInvalid, {"cu_seqlens_k", "missing"});
}
TEST_F(BadInput, OnlyCuSeqlensK) {
  vfwd.cu_seqlens_q = TensorView{};
  expect_rejected(vfwd, kInvalid, {"cu_seqlens_q", "missing"});
}
TEST_F(BadInput, NonMonotonicCuSeqlens) {
  vp.cu_q.set({2}, 2);  // {0, 3, 2, 7}
  expect_rejected(vfwd, kInvalid, {"cu_seqlens_q", "not non-decreasing", "cu_seqlens_q[2] = 2"});
}
TEST_F(BadInput, CuSeqlensExceedTotalRows) {
  vp.cu_k.set({3}, 14);  // total_k is 13
  vfwd.max_seqlen_k = 7;
  expect_rejected(vfwd, kInvalid, {"cu_seqlens_k[3] = 14", "exceeds", "13"});
}
TEST_F(BadInput, NegativeFirstOffset) {
  vp.cu_q.set({0}, -1);
  expect_rejected(vfwd, kInvalid, {"cu_seqlens_q[0] = -1"});
}
TEST_F(BadInput, SequenceLongerThanMaxSeqlen) {
  vfwd.max_seqlen_q = 3;  // sequence 2 has 4 rows
  expect_rejected(vfwd, kInvalid, {"cu_seqlens_q", "sequence 2", "length 4", "max_seqlen_q = 3"});
}
TEST_F(BadInput, NegativeMaxSeqlen) { vfwd.max_seqlen_k = -2; expect_rejected(vfwd, kInvalid, {"max_seqlen_k = -2"}); }
TEST_F(BadInput, CuSeqlensLengthsDiffer) {
  vfwd.cu_seqlens_k.shape[0] = 3;
  expect_rejected(vfwd, kInvalid, {"cu_seqlens_k", "3 entries", "expected 4"});
}
TEST_F(BadInput, CuSeqlensEmpty) {
  vfwd.cu_seqlens_q.shape[0] = 0;
  vfwd.cu_seqlens_k.shape[0] = 0;
  expect_rejected(vfwd, kInvalid, {"cu_seqlens_q", "got 0"});
}
TEST_F(BadInput, CuSeqlensStrided) {
  vfwd.cu_seqlens_q.stride[0] = 2;
  expect_rejected(vfwd, kInvalid, {"cu_seqlens_q", "contiguous"});
}

// ---- options ----
TEST_F(BadInput, WindowLeftBelowMinusOne) { fwd.options.window_left = -2; expect_rejected(fwd, kInvalid, {"window_left = -2"}); }
TEST_F(BadInput, WindowRightBelowMinusOne) { fwd.options.window_right = -5; expect_rejected(fwd, kInvalid, {"window_right = -5"}); }
TEST_F(BadInput, WindowRightWithCausal) {
  fwd.options.causal = true;
  fwd.options.window_right = 4;
  expect_rejected(fwd, kInvalid, {"window_right = 4", "causal"});
}
TEST_F(BadInput, NegativeSoftcap) { fwd.options.softcap = -1.f; expect_rejected(fwd, kInvalid, {"softcap = -1"}); }
TEST_F(BadInput, NaNSoftcap) { fwd.options.softcap = std::nanf(""); expect_rejected(fwd, kInvalid, {"softcap = nan"}); }
TEST_F(BadInput, InfiniteSoftcap) { fwd.options.softcap = INFINITY; expect_rejected(fwd, kInvalid, {"softcap = inf"}); }
TEST_F(BadInput, InfiniteSoftmaxScale) { fwd.options.softmax_scale = INFINITY; expect_rejected(fwd, kInvalid, {"softmax_scale = inf"}); }
TEST_F(BadInput, NaNSoftmaxScale) { bwd.options.softmax_scale = std::nanf(""); expect_rejected(bwd, kInvalid, {"softmax_scale = nan"}); }

// ---- paged K/V (block_table): the varlen forward only ----
// Sequences of 5, 2, 6 keys on pages of 4: block_table [3, 3] over a pool of 7 pages.
class PagedBadInput : public BadInput {
 protected:
  void SetUp() override {
    BadInput::SetUp();
    Rng rng;
    pp = make_problem(Case::varlen({3, 0, 4}, {5, 2, 6}, 4, 2, 64).paged(4), rng);
    pfwd = pp.forward_args(host);
  }
  int32_t& entry(int64_t b, int64_t j) {
    return static_cast<int32_t*>(pfwd.block_table.data)[b * pfwd.block_table.stride[0] + j];
  }
  Problem pp;
  ForwardArgs pfwd;
};

TEST_F(PagedBadInput, ValidArgumentsAreAccepted) {
  entry(1, 1) = -3;  // past sequence 1's one page: never read, so anything goes
  EXPECT_TRUE(supports(pfwd).ok()) << supports(pfwd).message;
  EXPECT_EQ(forward_path(pfwd), "cpu");
}
TEST_F(PagedBadInput, WithoutVarlen) {
  fwd.block_table = pfwd.block_table;
  expect_rejected(fwd, kInvalid, {"block_table:", "cu_seqlens", "varlen"});
}
TEST_F(PagedBadInput, InTheBackward) {
  bwd.block_table = pfwd.block_table;
  expect_rejected(bwd, kUnsupported, {"block_table:", "backward"});
}
TEST_F(PagedBadInput, BlockTableRank) { pfwd.block_table.rank = 1; expect_rejected(pfwd, kInvalid, {"block_table:", "rank 1", "expected 2"}); }
TEST_F(PagedBadInput, BlockTableDtype) {
  pfwd.block_table.dtype = DType::f32;
  expect_rejected(pfwd, kInvalid, {"block_table:", "dtype f32", "expected i32"});
}
TEST_F(PagedBadInput, BlockTableBatch) {
  pfwd.block_table.shape[0] = 2;
  expect_rejected(pfwd, kInvalid, {"block_table:", "shape [2, 3]", "batch = 3"});
}
TEST_F(PagedBadInput, PackedKeysGivenWithBlockTable) {
  pfwd.k = vfwd.k;
  expect_rejected(pfwd, kInvalid, {"k:", "rank 3", "expected 4"});
}
TEST_F(PagedBadInput, PageSizeZero) {
  pfwd.k.shape[1] = pfwd.v.shape[1] = 0;
  expect_rejected(pfwd, kInvalid, {"k: page_size = 0", ">= 1"});
}
TEST_F(PagedBadInput, ValuePagesDifferFromKeys) {
  pfwd.v.shape[1] = 3;
  expect_rejected(pfwd, kInvalid, {"v:", "[7, 3, 2, 64]", "[7, 4, 2, 64]", "num_pages, page_size"});
}
TEST_F(PagedBadInput, KeyHeadDimDiffersFromQ) {
  pfwd.k.shape[3] = 32;
  expect_rejected(pfwd, kInvalid, {"k:", "[7, 4, 2, 32]", "hdim_qk of q"});
}
TEST_F(PagedBadInput, PageBeyondThePool) {
  entry(2, 1) = 7;
  expect_rejected(pfwd, kInvalid, {"block_table[2][1] = 7", "[0, 7)", "sequence 2 uses its first 2 entries"});
}
TEST_F(PagedBadInput, NegativePage) {
  entry(0, 0) = -1;
  expect_rejected(pfwd, kInvalid, {"block_table[0][0] = -1"});
}
TEST_F(PagedBadInput, SequenceLongerThanItsPages) {
  pfwd.block_table.shape[1] = 1;  // 4 keys per sequence, sequence 0 has 5
  expect_rejected(pfwd, kInvalid, {"cu_seqlens_k: sequence 0 has length 5", "max_pages * page_size = 4"});
}
TEST_F(PagedBadInput, SequenceLongerThanMaxSeqlenK) {
  pfwd.max_seqlen_k = 5;
  expect_rejected(pfwd, kInvalid, {"cu_seqlens_k: sequence 2 has length 6", "max_seqlen_k = 5"});
}

// ---- workspace: where a backend needs one, too little is refused ----
class Workspace : public ::testing::TestWithParam<Backend> {};

TEST_P(Workspace, TooSmallIsRejected) {
  const Backend backend = GetParam();
  FA_REQUIRE_BACKEND(backend);
  Rng rng;
  Problem p = make_problem(Case::padded(2, 130, 150, 4, 2, 64), rng);
  DeviceMirror m(backend);
  BackwardArgs a = p.backward_args(m);
  std::size_t bytes = 0;
  const Status s = backward_workspace_size(a, &bytes);
  if (s.code == StatusCode::not_supported) GTEST_SKIP() << s.message;
  ASSERT_TRUE(s.ok()) << s.message;
  if (bytes == 0) GTEST_SKIP() << "the " << to_string(backend) << " backward needs no workspace here";
  a.workspace = m.scratch(bytes);
  a.workspace_bytes = bytes - 1;
  expect_rejected(a, kInvalid, {"workspace_bytes = " + std::to_string(bytes - 1), std::to_string(bytes)}, false);
  a.workspace = nullptr;
  a.workspace_bytes = bytes;
  expect_rejected(a, kInvalid, {"workspace", "null"}, false);
}

INSTANTIATE_TEST_SUITE_P(Backends, Workspace, ::testing::ValuesIn(all_backends()),
                         [](const ::testing::TestParamInfo<Backend>& info) { return info.param.family; });

}  // namespace
}  // namespace fa_test
