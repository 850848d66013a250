// The sm80 and sm90 forwards end to end through the public API on small problems (each forced with
// `path`), against a float64 host loop (the randomized suite in tests/ covers the space; these are
// the compute-sanitizer subset and a quick pinpoint): masks, GQA, varlen with empty sequences, soft
// cap, seqlen_k = 0, keys past seqlen_k holding NaN (padded: rows after each sequence; varlen: packed
// rows before and after the sequences, which must also stay unwritten in the output), and what the
// plans refuse (f32, misaligned strides). Outputs are poisoned with NaN before each call.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "flashattn/flashattn.hpp"
#include "test_util.cuh"

namespace {

using flashattn::DType;
using flashattn::Device;
using flashattn::TensorView;
using Tag = flashattn::ptx::BF16;

struct Problem {
  int batch = 2, sq = 70, sk = 90, h = 4, hk = 2, d = 64, dv = 64;
  bool causal = false;
  int64_t left = -1, right = -1;
  float softcap = 0.f;
  std::vector<int> lens_q, lens_k;  // varlen when set (batch entries)
  int kv_nan_rows = 0;  // padded batches: NaN key/value rows after each sequence's seqlen_k (in the view's
                        // batch stride, never in the view): a kernel that reads them poisons the output
  int varlen_pad = 0;   // varlen: packed rows of no sequence before cu_seqlens[0] and after cu_seqlens[batch],
                        // NaN in q, k and v; the output rows (and lse entries) there must stay NaN
  bool no_workspace = false;  // pass none where the plan's is optional (sm90: one CTA per tile then)
  bool zero_outside = false;  // zero_rows_outside_sequences: those output rows must be 0 (lse still NaN)
};

// Float64 attention of one (sequence, head); rows with no visible key: out 0, lse +inf.
void reference(const Problem& p, const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
               int q_row0, int k_row0, int sq, int sk, int h, std::vector<double>* out, std::vector<double>* lse) {
  const int hk = h / (p.h / p.hk);
  const double scale = 1.0 / std::sqrt(double(p.d));
  out->assign(size_t(sq) * p.dv, 0.0);
  lse->assign(sq, INFINITY);
  for (int i = 0; i < sq; ++i) {
    std::vector<double> s(sk, -INFINITY);
    double mx = -INFINITY;
    for (int j = 0; j < sk; ++j) {
      const int64_t diag = sk - sq;
      const int64_t right = p.causal ? 0 : p.right;
      if (right >= 0 && j > i + diag + right) continue;
      if (p.left >= 0 && j < i + diag - p.left) continue;
      double x = 0;
      for (int c = 0; c < p.d; ++c)
        x += double(q[(size_t(q_row0 + i) * p.h + h) * p.d + c]) * k[(size_t(k_row0 + j) * p.hk + hk) * p.d + c];
      x *= scale;
      if (p.softcap > 0) x = p.softcap * std::tanh(x / p.softcap);
      s[j] = x;
      mx = std::max(mx, x);
    }
    if (std::isinf(mx)) continue;
    double sum = 0;
    for (int j = 0; j < sk; ++j) sum += std::exp(s[j] - mx);
    (*lse)[i] = mx + std::log(sum);
    for (int j = 0; j < sk; ++j) {
      const double w = std::exp(s[j] - mx) / sum;
      for (int c = 0; c < p.dv; ++c) (*out)[size_t(i) * p.dv + c] += w * v[(size_t(k_row0 + j) * p.hk + hk) * p.dv + c];
    }
  }
}

TensorView view(void* data, DType dt, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(data, dt, Device::cuda, shape);
}

// Runs p on the family `path` and compares with the reference; skips where this build has no
// instance of the head dim (for sm90, also: a GPU that is not compute capability 9.0).
void run_and_check(const Problem& p, const char* path = "sm80") {
  FA_REQUIRE_DEVICE();
  const bool varlen = !p.lens_q.empty();
  const int pad = varlen ? p.varlen_pad : 0;
  std::vector<int> cu_q{pad}, cu_k{pad};
  for (int b = 0; b < p.batch; ++b) {
    cu_q.push_back(cu_q.back() + (varlen ? p.lens_q[b] : p.sq));
    cu_k.push_back(cu_k.back() + (varlen ? p.lens_k[b] : p.sk));
  }
  const int tq = cu_q.back() + pad;
  // Key rows per sequence in memory: the view's rows, then kv_nan_rows of NaN (padded batches).
  const int k_stride_rows = varlen ? 0 : p.sk + p.kv_nan_rows;
  const int tk = varlen ? cu_k.back() + pad : p.batch * k_stride_rows;
  auto k_row0 = [&](int b) { return varlen ? cu_k[b] : b * k_stride_rows; };
  std::mt19937 rng(5);
  std::vector<uint16_t> qb, kb, vb;
  std::vector<float> qv, kv, vv;
  fa_test::random_matrix<Tag>(rng, size_t(tq) * p.h * p.d, &qb, &qv);
  fa_test::random_matrix<Tag>(rng, size_t(tk) * p.hk * p.d, &kb, &kv);
  fa_test::random_matrix<Tag>(rng, size_t(tk) * p.hk * p.dv, &vb, &vv);
  auto poison_rows = [](std::vector<uint16_t>* x, int row_elems, int begin, int end) {
    for (size_t i = size_t(begin) * row_elems; i < size_t(end) * row_elems; ++i) (*x)[i] = 0x7fc1;
  };
  if (varlen) {
    for (auto [begin, end] : {std::pair{0, pad}, std::pair{cu_q.back(), tq}}) poison_rows(&qb, p.h * p.d, begin, end);
    for (auto [begin, end] : {std::pair{0, pad}, std::pair{cu_k.back(), tk}}) {
      poison_rows(&kb, p.hk * p.d, begin, end);
      poison_rows(&vb, p.hk * p.dv, begin, end);
    }
  } else {
    for (int b = 0; b < p.batch; ++b) {
      for (int j = p.sk; j < k_stride_rows; ++j) {
        const size_t row = size_t(k_row0(b) + j);
        for (size_t i = row * p.hk * p.d; i < (row + 1) * p.hk * p.d; ++i) kb[i] = 0x7fc1;
        for (size_t i = row * p.hk * p.dv; i < (row + 1) * p.hk * p.dv; ++i) vb[i] = 0x7fc1;
      }
    }
  }
  fa_test::DeviceBuffer<uint16_t> dq(qb), dk(kb), dv(vb);
  fa_test::DeviceBuffer<uint16_t> dout(std::vector<uint16_t>(size_t(tq) * p.h * p.dv, 0x7fc1));  // NaN poison
  fa_test::DeviceBuffer<float> dlse(std::vector<float>(size_t(tq) * p.h, NAN));
  fa_test::DeviceBuffer<int> dcq(cu_q), dck(cu_k);

  flashattn::ForwardArgs a;
  if (varlen) {
    a.q = view(dq.ptr, DType::bf16, {tq, p.h, p.d});
    a.k = view(dk.ptr, DType::bf16, {tk, p.hk, p.d});
    a.v = view(dv.ptr, DType::bf16, {tk, p.hk, p.dv});
    a.out = view(dout.ptr, DType::bf16, {tq, p.h, p.dv});
    a.lse = view(dlse.ptr, DType::f32, {p.h, tq});
    a.cu_seqlens_q = view(dcq.ptr, DType::i32, {p.batch + 1});
    a.cu_seqlens_k = view(dck.ptr, DType::i32, {p.batch + 1});
    a.max_seqlen_q = p.sq;
    a.max_seqlen_k = p.sk;
  } else {
    a.q = view(dq.ptr, DType::bf16, {p.batch, p.sq, p.h, p.d});
    a.k = view(dk.ptr, DType::bf16, {p.batch, p.sk, p.hk, p.d});
    a.v = view(dv.ptr, DType::bf16, {p.batch, p.sk, p.hk, p.dv});
    a.k.stride[0] = int64_t(k_stride_rows) * p.hk * p.d;
    a.v.stride[0] = int64_t(k_stride_rows) * p.hk * p.dv;
    a.out = view(dout.ptr, DType::bf16, {p.batch, p.sq, p.h, p.dv});
    a.lse = view(dlse.ptr, DType::f32, {p.batch, p.h, p.sq});
  }
  a.options.causal = p.causal;
  a.options.window_left = p.left;
  a.options.window_right = p.right;
  a.options.softcap = p.softcap;
  a.path = path;
  a.zero_rows_outside_sequences = p.zero_outside;
  const flashattn::Status sup = flashattn::supports(a);
  if (sup.code == flashattn::StatusCode::not_supported && sup.message.find("FLASHATTN_HEADDIMS") != std::string::npos) {
    GTEST_SKIP() << sup.message;  // this build did not compile the head dim
  }
  ASSERT_EQ(flashattn::forward_path(a), path) << sup.message;
  std::size_t ws_bytes = 0;
  ASSERT_TRUE(flashattn::forward_workspace_size(a, &ws_bytes).ok());
  // Poisoned: the call must initialize what it reads there (the sm90 scheduler's tile counter).
  fa_test::DeviceBuffer<uint8_t> ws(std::vector<uint8_t>(std::max<std::size_t>(ws_bytes, 1), 0xAB));
  if (!p.no_workspace) {
    a.workspace = ws.ptr;
    a.workspace_bytes = ws_bytes;
  }
  const flashattn::Status st = flashattn::forward(a);
  ASSERT_TRUE(st.ok()) << st.message;
  FA_CUDA_OK(cudaDeviceSynchronize());
  const auto out = dout.download();
  const auto lse = dlse.download();
  for (int b = 0; b < p.batch; ++b) {
    const int sq = cu_q[b + 1] - cu_q[b], sk = cu_k[b + 1] - cu_k[b];
    for (int h = 0; h < p.h; ++h) {
      std::vector<double> ro, rl;
      reference(p, qv, kv, vv, cu_q[b], k_row0(b), sq, sk, h, &ro, &rl);
      for (int i = 0; i < sq; ++i) {
        const size_t row = size_t(cu_q[b]) + i;
        const float got_lse = varlen ? lse[size_t(h) * tq + row] : lse[(size_t(b) * p.h + h) * p.sq + i];
        if (std::isinf(rl[i])) {
          ASSERT_TRUE(std::isinf(got_lse) && got_lse > 0) << "b " << b << " h " << h << " row " << i << ": lse " << got_lse;
        } else {
          ASSERT_NEAR(got_lse, rl[i], 2e-3 * (1 + std::fabs(rl[i]))) << "lse b " << b << " h " << h << " row " << i;
        }
        for (int c = 0; c < p.dv; ++c) {
          const float got = fa_test::from_bits<Tag>(out[(row * p.h + h) * p.dv + c]);
          ASSERT_NEAR(got, ro[size_t(i) * p.dv + c], 2e-2) << "out b " << b << " h " << h << " row " << i << " col " << c;
        }
      }
    }
  }
  // Varlen: the packed rows of no sequence are never written (out: 0 when asked for).
  const uint16_t outside = p.zero_outside ? 0 : 0x7fc1;
  for (int row = 0; row < tq; ++row) {
    if (!varlen || (row >= cu_q.front() && row < cu_q.back())) continue;
    for (int h = 0; h < p.h; ++h) {
      ASSERT_TRUE(std::isnan(lse[size_t(h) * tq + row])) << "lse written outside the sequences: row " << row << " h " << h;
      for (int c = 0; c < p.dv; ++c) {
        ASSERT_EQ(out[(size_t(row) * p.h + h) * p.dv + c], outside)
            << "out outside the sequences: row " << row << " h " << h << " col " << c;
      }
    }
  }
}

TEST(CudaFwdSmall, Plain) { run_and_check(Problem{}); }
TEST(CudaFwdSmall, CausalBottomRight) {
  Problem p;
  p.causal = true;
  p.sq = 90;
  p.sk = 50;  // rows 0..39 fully masked
  run_and_check(p);
}
TEST(CudaFwdSmall, LocalWindowHdim128) {
  Problem p;
  p.left = 7;
  p.right = 3;
  p.d = p.dv = 128;
  p.hk = 1;
  run_and_check(p);
}
TEST(CudaFwdSmall, SoftcapHdimVBelowQk) {
  Problem p;
  p.softcap = 5.f;
  p.d = 192;
  p.dv = 128;
  run_and_check(p);
}
TEST(CudaFwdSmall, VarlenWithEmptySequences) {
  Problem p;
  p.batch = 4;
  p.lens_q = {70, 0, 33, 5};
  p.lens_k = {90, 12, 0, 130};
  p.sq = 70;
  p.sk = 130;
  p.causal = true;
  run_and_check(p);
}
// sm80 on the varlen problem of CudaFwdSm90.Varlen* (NaN in the packed rows of no sequence).
TEST(CudaFwdSmall, VarlenNanOutsideSequences) {
  Problem p;
  p.batch = 6;
  p.lens_q = {77, 0, 300, 1, 129, 45};
  p.lens_k = {93, 17, 261, 0, 130, 300};
  p.sq = 300;
  p.sk = 300;
  p.d = p.dv = 128;
  p.varlen_pad = 5;
  run_and_check(p);
}
TEST(CudaFwdSmall, VarlenZeroOutsideSequences) {
  Problem p;
  p.batch = 3;
  p.lens_q = {77, 0, 45};
  p.lens_k = {93, 17, 30};
  p.sq = 77;
  p.sk = 93;
  p.varlen_pad = 5;
  p.zero_outside = true;
  run_and_check(p);
}
TEST(CudaFwdSmall, NoKeys) {
  Problem p;
  p.sk = 0;
  run_and_check(p);
}

TEST(CudaFwdSmall, RefusesF32AndMisalignedStrides) {
  FA_REQUIRE_DEVICE();
  fa_test::DeviceBuffer<float> buf(1 << 16);
  flashattn::ForwardArgs a;
  a.q = view(buf.ptr, DType::f32, {1, 16, 2, 64});
  a.k = a.q;
  a.v = a.q;
  a.out = a.q;
  flashattn::Status st = flashattn::supports(a);
  EXPECT_EQ(st.code, flashattn::StatusCode::not_supported) << st.message;
  EXPECT_NE(st.message.find("f32"), std::string::npos) << st.message;

  fa_test::DeviceBuffer<uint16_t> h(1 << 16);
  a.q = view(h.ptr, DType::bf16, {1, 16, 2, 64});
  a.q.stride[1] = 2 * 64 + 4;  // row stride not a multiple of 8 elements
  a.k = view(h.ptr, DType::bf16, {1, 16, 2, 64});
  a.v = a.k;
  a.out = a.k;
  st = flashattn::supports(a);
  EXPECT_EQ(st.code, flashattn::StatusCode::not_supported) << st.message;
  EXPECT_NE(st.message.find("stride"), std::string::npos) << st.message;
  a.q = view(h.ptr + 1, DType::bf16, {1, 16, 2, 64});  // 2-byte aligned base
  st = flashattn::supports(a);
  EXPECT_EQ(st.code, flashattn::StatusCode::not_supported) << st.message;
  EXPECT_NE(st.message.find("aligned"), std::string::npos) << st.message;
}

// ---- the sm90 forward (Hopper, sm_90a), forced with path = "sm90" -----------------------------------
// Sequence lengths off the 128 × 128 (D = 256: 128 × 64) tiles; K/V with NaN rows past seqlen_k.

void run_sm90(Problem p) {
  FA_REQUIRE_SM90();
  if (p.lens_q.empty() && p.kv_nan_rows == 0) p.kv_nan_rows = 8;
  run_and_check(p, "sm90");
}

TEST(CudaFwdSm90, PlainGqaHdim128) {
  Problem p;
  p.sq = 200;
  p.sk = 333;
  p.d = p.dv = 128;
  run_sm90(p);
}
TEST(CudaFwdSm90, CausalHdim128) {
  Problem p;
  p.causal = true;
  p.sq = p.sk = 517;
  p.h = p.hk = 2;
  p.d = p.dv = 128;
  run_sm90(p);
}
TEST(CudaFwdSm90, CausalHdim128NoWorkspace) {  // the counter's workspace is optional
  Problem p;
  p.causal = true;
  p.sq = p.sk = 517;
  p.h = p.hk = 2;
  p.d = p.dv = 128;
  p.no_workspace = true;
  run_sm90(p);
}
TEST(CudaFwdSm90, MisalignedWorkspaceIsRefused) {  // the tile counter is an int: never a misaligned atomic
  FA_REQUIRE_SM90();
  fa_test::DeviceBuffer<uint16_t> h(1 << 16);
  fa_test::DeviceBuffer<float> lse(1 << 10);
  fa_test::DeviceBuffer<uint8_t> ws(64);
  flashattn::ForwardArgs a;
  a.q = view(h.ptr, DType::bf16, {1, 128, 2, 64});
  a.k = a.q;
  a.v = a.q;
  a.out = view(h.ptr + (1 << 15), DType::bf16, {1, 128, 2, 64});
  a.lse = view(lse.ptr, DType::f32, {1, 2, 128});
  a.options.causal = true;
  a.path = "sm90";
  a.workspace = ws.ptr + 1;
  a.workspace_bytes = 8;
  const flashattn::Status st = flashattn::forward(a);
  EXPECT_EQ(st.code, flashattn::StatusCode::invalid_argument) << st.message;
  EXPECT_NE(st.message.find("workspace"), std::string::npos) << st.message;
}
TEST(CudaFwdSm90, CausalBottomRightShortQueries) {
  Problem p;
  p.causal = true;
  p.sq = 77;
  p.sk = 1000;
  p.d = p.dv = 128;
  run_sm90(p);
}
TEST(CudaFwdSm90, CausalFullyMaskedRows) {
  Problem p;
  p.causal = true;
  p.sq = 300;
  p.sk = 170;  // rows 0..129 see no key: out 0, lse +inf
  p.d = p.dv = 128;
  run_sm90(p);
}
TEST(CudaFwdSm90, WindowSoftcapHdimVBelowQk) {
  Problem p;
  p.left = 100;
  p.right = 20;
  p.softcap = 5.f;
  p.sq = 260;
  p.sk = 390;
  p.d = 128;
  p.dv = 64;
  run_sm90(p);
}
TEST(CudaFwdSm90, Hdim64) {
  Problem p;
  p.sq = 150;
  p.sk = 131;
  p.causal = true;
  run_sm90(p);
}
// The tile order's sections (fwd_launch.cuh's section_heads: as many heads as keep their K and V
// within 16 MB) with a shorter last one: 2 heads per section at these key lengths, over 3 and 5
// heads. The tile decode divides by the last section's head count there (fwd_tile.cuh).
TEST(CudaFwdSm90, SectionsWithAShortLastCausalHdim64) {
  Problem p;
  p.batch = 1;
  p.h = p.hk = 3;
  p.sq = 300;
  p.sk = 24000;  // 24000 · (64 + 64) · 2 B = 6.1 MB per head: 2 heads per section
  p.causal = true;
  run_sm90(p);
}
TEST(CudaFwdSm90, SectionsWithAShortLastHdim128) {
  Problem p;
  p.batch = 1;
  p.h = 5;
  p.hk = 5;
  p.sq = 200;
  p.sk = 12000;  // 12000 · (128 + 128) · 2 B = 6.1 MB per head: 2 heads per section
  p.d = p.dv = 128;
  run_sm90(p);
}
// D = 64 with a mask on long query sequences: the tall tile (three consumers, 192 rows; fwd_tall_tiles),
// with a ragged last block (2100 = 10 · 192 + 180), causal and a GQA window, padded and varlen.
TEST(CudaFwdSm90, TallTilesCausalHdim64) {
  Problem p;
  p.batch = 1;
  p.sq = 2100;
  p.sk = 2230;
  p.causal = true;
  run_sm90(p);
}
TEST(CudaFwdSm90, TallTilesWindowGqaHdim64) {
  Problem p;
  p.batch = 1;
  p.sq = p.sk = 2049;
  p.h = 4;
  p.hk = 1;
  p.left = 300;
  p.right = 17;
  run_sm90(p);
}
TEST(CudaFwdSm90, TallTilesVarlenCausalHdim64) {
  Problem p;
  p.batch = 2;
  p.lens_q = {2500, 1700};
  p.lens_k = {2500, 1900};
  p.sq = p.sk = 2500;
  p.causal = true;
  p.varlen_pad = 5;
  run_sm90(p);
}
TEST(CudaFwdSm90, Hdim192Gqa) {  // 128 × 112 tiles: lengths off both
  Problem p;
  p.sq = 300;
  p.sk = 250;
  p.d = p.dv = 192;
  run_sm90(p);
}
TEST(CudaFwdSm90, CausalHdim192V128) {  // DeepSeek's shape: hdim_qk 192, hdim_v 128
  Problem p;
  p.causal = true;
  p.sq = 260;
  p.sk = 333;
  p.d = 192;
  p.dv = 128;
  run_sm90(p);
}
TEST(CudaFwdSm90, Hdim256Mqa) {
  Problem p;
  p.sq = 140;
  p.sk = 203;
  p.hk = 1;
  p.d = p.dv = 256;
  run_sm90(p);
}
TEST(CudaFwdSm90, NoKeys) {
  Problem p;
  p.sk = 0;
  p.d = p.dv = 128;
  run_sm90(p);
}

// Varlen: sequences of odd lengths (an empty one, a query-only one, ones longer than the blocks), NaN
// in the packed q/k/v rows before the first and after the last sequence (5 rows each side: TMA
// boxes of the last sequence run into them), output and lse rows there must stay NaN.
Problem varlen_problem(int d) {
  Problem p;
  p.batch = 6;
  p.lens_q = {77, 0, 300, 1, 129, 45};
  p.lens_k = {93, 17, 261, 0, 130, 300};
  p.sq = 300;
  p.sk = 300;
  p.d = p.dv = d;
  p.varlen_pad = 5;
  return p;
}
TEST(CudaFwdSm90, VarlenHdim128) { run_sm90(varlen_problem(128)); }
TEST(CudaFwdSm90, VarlenCausalHdim128) {
  Problem p = varlen_problem(128);
  p.causal = true;  // per sequence bottom-right: rows of sequence 2 (300 × 261) before row 39 see nothing
  run_sm90(p);
}
TEST(CudaFwdSm90, VarlenCausalHdim64) {
  Problem p = varlen_problem(64);
  p.causal = true;
  run_sm90(p);
}
TEST(CudaFwdSm90, VarlenCausalHdim64NoWorkspace) {
  Problem p = varlen_problem(64);
  p.causal = true;
  p.no_workspace = true;
  run_sm90(p);
}
TEST(CudaFwdSm90, VarlenWindowSoftcapHdim256Mqa) {
  Problem p = varlen_problem(256);
  p.hk = 1;
  p.left = 50;
  p.right = 10;
  p.softcap = 5.f;
  run_sm90(p);
}
TEST(CudaFwdSm90, VarlenZeroOutsideSequences) {
  Problem p = varlen_problem(128);
  p.causal = true;
  p.zero_outside = true;
  run_sm90(p);
}
// Every sequence empty on the query side, or on the key side: nothing written / out 0, lse +inf.
TEST(CudaFwdSm90, VarlenEmptySides) {
  Problem p;
  p.batch = 3;
  p.lens_q = {0, 0, 9};
  p.lens_k = {4, 0, 0};
  p.sq = 9;
  p.sk = 4;
  p.d = p.dv = 128;
  p.varlen_pad = 3;
  run_sm90(p);
}

}  // namespace
