// Unit tests of the CPU backend's building blocks against plain double-precision computations:
// exp_poly and tanh_poly at the ulp limits their header states (with special values), the row
// reductions at every tail length, the tile product matmul_acc (libxsmm or the loops) on the
// backend's operand layouts, the bf16 product matmul_acc_bf16 and the loaders that pack its operands
// (bf16 kernels where the CPU has them, and the loops), and the visible-keys rule (VisibleKeys) by
// brute force.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "api/select.hpp"
#include "backend/testing.hpp"
#include "cpu/bf16_tiles.hpp"
#include "cpu/convert.hpp"
#include "cpu/mask.hpp"
#include "cpu/matmul.hpp"
#include "cpu/row_ops.hpp"
#include "cpu/tile_math.hpp"

namespace fa_test {
namespace {

using namespace flashattn;
using cpu::exp_nonpositive;
using cpu::exp_poly;
using cpu::tanh_poly;

constexpr float kInf = std::numeric_limits<float>::infinity();

// |got − ref| in units of the float spacing at ref (ref rounded to float first).
double ulp_error(float got, double ref) {
  const float r = static_cast<float>(ref);
  const double spacing = std::nextafter(std::fabs(r), kInf) - std::fabs(r);
  return std::fabs(static_cast<double>(got) - ref) / spacing;
}

// The worst error of `check` over 2·10^5 uniform draws in [lo, hi] and 10^5 log-uniform draws of
// magnitude in [1e-6, max(|lo|, |hi|)] (both signs where the range has them): small arguments
// are where cancellation would show.
template <class Fn>
double max_ulp_error(float lo, float hi, Fn&& check) {
  double worst = 0;
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> uniform(lo, hi);
  for (int i = 0; i < 200'000; ++i) worst = std::max(worst, check(uniform(rng)));
  const float top = std::max(std::fabs(lo), std::fabs(hi));
  std::uniform_real_distribution<double> log_mag(std::log(1e-6), std::log(double(top)));
  for (int i = 0; i < 100'000; ++i) {
    const float m = static_cast<float>(std::exp(log_mag(rng)));
    if (m >= lo && m <= hi) worst = std::max(worst, check(m));
    if (-m >= lo && -m <= hi) worst = std::max(worst, check(-m));
  }
  worst = std::max(worst, check(lo));
  return std::max(worst, check(hi));
}

TEST(ExpPoly, WithinTwoUlpOverItsRange) {
  const double worst = max_ulp_error(-86.5f, 88.72f, [](float x) { return ulp_error(exp_poly(x), std::exp(double(x))); });
  EXPECT_LE(worst, 2.0) << "exp_poly's header promises 2 ulp";
  RecordProperty("max_ulp", std::to_string(worst));
}

TEST(ExpPoly, SpecialValues) {
  EXPECT_EQ(exp_poly(0.f), 1.f);
  EXPECT_EQ(exp_poly(-kInf), 0.f);
  EXPECT_EQ(exp_poly(kInf), kInf);
  EXPECT_TRUE(std::isnan(exp_poly(std::nanf(""))));
  EXPECT_EQ(exp_poly(-87.f), 0.f);    // below the range: 0, as documented
  EXPECT_EQ(exp_poly(-1000.f), 0.f);
  EXPECT_EQ(exp_poly(89.f), kInf);    // above log(FLT_MAX)
  EXPECT_TRUE(std::isfinite(exp_poly(88.72f)));
  EXPECT_GT(exp_poly(-86.5f), 0.f);
}

// The softmax's exp (x = score − row max ≤ 0): exp_poly's value bitwise on its whole domain.
TEST(ExpNonpositive, EqualsExpPolyWherePromised) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> x_of(-100.f, 88.7f);
  int differ = 0;
  for (int i = 0; i < 200000; ++i) {
    const float x = x_of(rng);
    if (exp_nonpositive(x) != exp_poly(x)) ++differ;
  }
  EXPECT_EQ(differ, 0);
  EXPECT_EQ(exp_nonpositive(0.f), 1.f);
  EXPECT_EQ(exp_nonpositive(-kInf), 0.f);
  EXPECT_TRUE(std::isnan(exp_nonpositive(std::nanf(""))));
  EXPECT_EQ(exp_nonpositive(-87.f), 0.f);
  EXPECT_EQ(exp_poly(-86.5f), exp_nonpositive(-86.5f));
}

TEST(TanhPoly, WithinThreeUlp) {
  const auto check = [](float x) { return ulp_error(tanh_poly(x), std::tanh(double(x))); };
  EXPECT_LE(max_ulp_error(-10.f, 10.f, check), 3.0) << "tanh_poly's header promises 3 ulp";
  EXPECT_LE(max_ulp_error(-1e-3f, 1e-3f, check), 3.0) << "near 0, where 1 - 2/(e^2x + 1) would cancel";
  EXPECT_LE(max_ulp_error(0.6f, 0.65f, check), 3.0) << "around the switch at 0.625";
}

TEST(TanhPoly, SpecialValues) {
  EXPECT_EQ(tanh_poly(0.f), 0.f);
  EXPECT_EQ(tanh_poly(kInf), 1.f);
  EXPECT_EQ(tanh_poly(-kInf), -1.f);
  EXPECT_EQ(tanh_poly(50.f), 1.f);
  EXPECT_EQ(tanh_poly(-50.f), -1.f);
  EXPECT_TRUE(std::isnan(tanh_poly(std::nanf(""))));
}

// Every length from 0 to a few lanes' worth past two vectors, so that every tail length of the
// 16-lane loops is covered; values random, with ±inf and NaN where the contract names them.
TEST(RowOps, EveryTailLength) {
  std::mt19937 rng(99);
  std::normal_distribution<float> normal;
  for (int64_t n = 0; n <= 3 * cpu::kLanes + 5; ++n) {
    std::vector<float> x(n), y(n);
    for (int64_t j = 0; j < n; ++j) x[j] = normal(rng), y[j] = normal(rng);
    double max = -INFINITY, sum = 0, dot = 0, abs_sum = 0, abs_dot = 0;
    for (int64_t j = 0; j < n; ++j) {
      max = std::max(max, double(x[j]));
      sum += x[j], abs_sum += std::fabs(x[j]);
      dot += double(x[j]) * y[j], abs_dot += std::fabs(double(x[j]) * y[j]);
    }
    const double u = std::numeric_limits<float>::epsilon() / 2;
    EXPECT_EQ(cpu::row_max(x.data(), n), static_cast<float>(max)) << "n = " << n;
    EXPECT_LE(std::fabs(cpu::row_sum(x.data(), n) - sum), (n + 1) * u * abs_sum + 1e-30) << "n = " << n;
    EXPECT_LE(std::fabs(cpu::row_dot(x.data(), y.data(), n) - dot), (n + 2) * u * abs_dot + 1e-30) << "n = " << n;
    std::vector<float> e = x;
    cpu::exp_shifted(e.data(), n, 0.5f);
    for (int64_t j = 0; j < n; ++j) EXPECT_LE(ulp_error(e[j], std::exp(double(x[j] - 0.5f))), 2.0) << "n " << n << " j " << j;
    std::vector<float> s = x;
    cpu::scale_row(s.data(), n, 0.25f);
    for (int64_t j = 0; j < n; ++j) EXPECT_EQ(s[j], x[j] * 0.25f);
    if (n > 0) {  // the last element (in the tail) decides the max; masked −inf entries never do
      x[n - 1] = 100.f;
      EXPECT_EQ(cpu::row_max(x.data(), n), 100.f) << "n = " << n;
      x.assign(n, -kInf);
      EXPECT_EQ(cpu::row_max(x.data(), n), -kInf) << "n = " << n;
      EXPECT_EQ(cpu::row_sum(x.data(), n), -kInf) << "n = " << n;
    }
  }
  EXPECT_EQ(cpu::row_max(nullptr, 0), -kInf);
  EXPECT_EQ(cpu::row_sum(nullptr, 0), 0.f);
}

// matmul_acc, whatever runs it (cpu::matmul_engine()), against a double-precision product: C += A·B
// into a C that already holds values, for A as stored, A transposed (the backward's Pᵀ·dO, dSᵀ·Q) and
// A with no unit stride (the loops' fallback), on full tiles, edge tiles and leading dimensions wider
// than the tile. Each element is a k-term sum plus C's old value, so its error is at most
// (k + 1)·u·(|C| + Σ|a·b|).
TEST(MatmulAcc, MatchesDoublePrecisionOnTileLayouts) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  struct Shape { int64_t m, n, k; };
  const Shape shapes[] = {{64, 64, 64}, {64, 128, 64}, {64, 64, 128}, {37, 64, 64}, {64, 23, 128}, {5, 7, 3}, {1, 1, 1}};
  enum class Layout { stored, transposed, strided };
  for (const Shape& sh : shapes) {
    for (Layout layout : {Layout::stored, Layout::transposed, Layout::strided}) {
      const int64_t ld_a = (layout == Layout::stored ? sh.k : sh.m) + 3, ldb = sh.n + 5, ldc = sh.n + 2;
      std::vector<float> a_buf(2 * (sh.m + 3) * (sh.k + 3)), b(sh.k * ldb), c(sh.m * ldc);
      for (float& x : a_buf) x = normal(rng);
      for (float& x : b) x = normal(rng);
      for (float& x : c) x = normal(rng);
      const cpu::MatA a = layout == Layout::stored       ? cpu::as_stored(a_buf.data(), ld_a)
                          : layout == Layout::transposed ? cpu::transposed(a_buf.data(), ld_a)
                                                         : cpu::MatA{a_buf.data(), 2 * (sh.k + 3), 2};
      const std::vector<float> c0 = c;
      cpu::matmul_acc(c.data(), ldc, a, b.data(), ldb, sh.m, sh.n, sh.k);
      const double u = std::numeric_limits<float>::epsilon() / 2;
      for (int64_t i = 0; i < sh.m; ++i) {
        for (int64_t j = 0; j < sh.n; ++j) {
          double ref = c0[i * ldc + j], mag = std::fabs(ref);
          for (int64_t kk = 0; kk < sh.k; ++kk) {
            const double term = double(a(i, kk)) * b[kk * ldb + j];
            ref += term, mag += std::fabs(term);
          }
          ASSERT_LE(std::fabs(c[i * ldc + j] - ref), (sh.k + 1) * u * mag)
              << cpu::matmul_engine() << ", m n k " << sh.m << " " << sh.n << " " << sh.k << ", layout "
              << int(layout) << ", element " << i << "," << j;
        }
      }
      for (int64_t i = 0; i < sh.m; ++i)  // the padding between rows of C is never written
        for (int64_t j = sh.n; j < ldc; ++j) ASSERT_EQ(c[i * ldc + j], c0[i * ldc + j]);
    }
  }
}

// matmul_acc_bf16 against a double-precision product of the same bf16 values: A plain with a wide
// leading dimension, B in row pairs packed by pack_pairs_bf16 (rounding a float tile) and by
// load_pairs (from bf16 rows), C already holding values; odd k padded to even with zeros as the
// backend does. Shapes of full and edge tiles. Run by whatever the CPU offers (bf16 kernels or the
// loops), and by the loops.
TEST(MatmulAccBf16, MatchesDoublePrecisionOnPackedOperands) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  struct Shape { int64_t m, n, k; };
  const Shape shapes[] = {{64, 64, 64}, {64, 128, 64}, {128, 64, 128}, {37, 64, 63}, {64, 23, 7}, {5, 7, 1}, {1, 1, 2}};
  for (const Shape& sh : shapes) {
    const int64_t k_even = cpu::round_up_even(sh.k), lda = k_even + 6, ldb = sh.n + 4, ldc = sh.n + 2;
    std::vector<float> a_f(sh.m * sh.k), b_f(sh.k * sh.n), c(sh.m * ldc);
    for (float& x : a_f) x = normal(rng);
    for (float& x : b_f) x = normal(rng);
    for (float& x : c) x = normal(rng);
    std::vector<uint16_t> a(sh.m * lda, 0xffff), b_rows(sh.k * sh.n);  // 0xffff: NaN where A is not written
    cpu::round_tile_bf16(a.data(), lda, a_f.data(), sh.k, sh.m, sh.k, k_even);
    for (size_t i = 0; i < b_f.size(); ++i) b_rows[i] = float_to_bf16(b_f[i]);
    std::vector<uint32_t> b_packed(k_even / 2 * ldb, 0xffffffffu), b_loaded(k_even / 2 * ldb, 0xffffffffu);
    cpu::pack_pairs_bf16(b_packed.data(), ldb, b_f.data(), sh.n, sh.k, sh.n);
    cpu::load_pairs(b_loaded.data(), ldb, cpu::InRows{b_rows.data(), DType::bf16, 0, sh.n}, 0, sh.k, sh.n);
    for (int64_t r = 0; r < k_even / 2; ++r)
      for (int64_t j = 0; j < sh.n; ++j) ASSERT_EQ(b_packed[r * ldb + j], b_loaded[r * ldb + j]) << r << "," << j;

    const std::vector<float> c0 = c;
    for (const bool loops : {false, true}) {
      c = c0;
      if (loops)
        cpu::detail::matmul_acc_bf16_loops(c.data(), ldc, a.data(), lda, b_packed.data(), ldb, sh.m, sh.n, k_even);
      else
        cpu::matmul_acc_bf16(c.data(), ldc, a.data(), lda, b_packed.data(), ldb, sh.m, sh.n, k_even);
      const double u = std::numeric_limits<float>::epsilon() / 2;
      for (int64_t i = 0; i < sh.m; ++i) {
        for (int64_t j = 0; j < sh.n; ++j) {
          double ref = c0[i * ldc + j], mag = std::fabs(ref);
          for (int64_t kk = 0; kk < sh.k; ++kk) {
            const double term = double(bf16_to_float(a[i * lda + kk])) * bf16_to_float(b_rows[kk * sh.n + j]);
            ref += term, mag += std::fabs(term);
          }
          ASSERT_LE(std::fabs(c[i * ldc + j] - ref), (sh.k + 1) * u * mag)
              << (loops ? "loops" : cpu::matmul_engine()) << ", m n k " << sh.m << " " << sh.n << " " << sh.k
              << ", element " << i << "," << j;
        }
        for (int64_t j = sh.n; j < ldc; ++j) ASSERT_EQ(c[i * ldc + j], c0[i * ldc + j]);  // padding untouched
      }
    }
  }
}

// The bf16 loaders' layouts, element by element, on a strided bf16 block with odd row counts: the
// transpose (plain, with its zero column), the pairs of the transpose, and the rounding (nearest
// even, NaN kept).
TEST(Bf16Tiles, LayoutsAndRounding) {
  const int64_t rows = 5, cols = 6, stride = 9;
  std::vector<uint16_t> src(rows * stride);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint16_t>(0x3f00 + i);
  const cpu::InRows in{src.data(), DType::bf16, 0, stride};
  std::vector<uint16_t> t(cols * 8, 0xabcd);
  cpu::load_transposed_bf16(t.data(), 8, in, 0, rows, cols);
  for (int64_t c = 0; c < cols; ++c) {
    for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(t[c * 8 + r], src[r * stride + c]);
    EXPECT_EQ(t[c * 8 + rows], 0) << "the odd row count's pad column";
  }
  std::vector<uint32_t> tp(cols / 2 * cpu::kBlockM);
  cpu::load_pairs_transposed(tp.data(), in, 0, rows, cols);
  for (int64_t w = 0; w < cols / 2; ++w)
    for (int64_t r = 0; r < rows; ++r)
      EXPECT_EQ(tp[w * cpu::kBlockM + r], src[r * stride + 2 * w] | uint32_t{src[r * stride + 2 * w + 1]} << 16);

  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float values[] = {1.f, 1.00390625f, 1.01171875f, -2.5f, nan, inf, -inf, 0.f, 3.0e38f, 1e-40f};
  const int64_t n = sizeof(values) / sizeof(values[0]);
  std::vector<uint16_t> rounded(n + 1, 0xabcd);
  cpu::round_tile_bf16(rounded.data(), n + 1, values, n, 1, n, n + 1);
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(values[i])) {
      EXPECT_TRUE(std::isnan(bf16_to_float(rounded[i])));
    } else {
      EXPECT_EQ(rounded[i], float_to_bf16(values[i])) << values[i];
    }
  }
  EXPECT_EQ(rounded[n], 0);
}

// The choice of products: bf16 only for bf16 inputs with even head dims and rows that do not
// overlap; a test can force either side.
TEST(Bf16Products, ChosenOnlyWhereTheyApply) {
  namespace knobs = flashattn::testing;
  const knobs::CpuProducts before = knobs::cpu_products();
  FwdParams p;
  p.dtype = DType::bf16, p.hdim_qk = 64, p.hdim_v = 64, p.k_row_stride = 64, p.v_row_stride = 64;
  knobs::set_cpu_products(knobs::CpuProducts::bf16);
  EXPECT_TRUE(cpu::bf16_products(p));
  p.hdim_v = 63;
  EXPECT_FALSE(cpu::bf16_products(p));
  p.hdim_v = 64, p.k_row_stride = 32;
  EXPECT_FALSE(cpu::bf16_products(p));
  p.k_row_stride = 64, p.dtype = DType::f16;
  EXPECT_FALSE(cpu::bf16_products(p));
  p.dtype = DType::bf16;
  knobs::set_cpu_products(knobs::CpuProducts::f32);
  EXPECT_FALSE(cpu::bf16_products(p));
  knobs::set_cpu_products(knobs::CpuProducts::automatic);
  EXPECT_EQ(cpu::bf16_products(p), cpu::bf16_products_native());
  knobs::set_cpu_products(before);
}

// The mask rule by brute force: row i of len_q sees key j of len_k iff
//   i + diag − left ≤ j ≤ i + diag + right, diag = len_k − len_q, a side < 0 unbounded.
bool sees(int64_t i, int64_t j, int64_t len_q, int64_t len_k, int64_t left, int64_t right) {
  const int64_t diag = len_k - len_q;
  if (j < 0 || j >= len_k) return false;
  if (right >= 0 && j > i + diag + right) return false;
  if (left >= 0 && j < i + diag - left) return false;
  return true;
}

// With g rows per query (a GQA group's heads packed, attend_decode.hpp) row i is query i / g.
TEST(VisibleKeys, MatchesTheRuleByBruteForce) {
  int64_t checked = 0;
  for (int64_t g : {1, 3}) {
  for (int64_t len_q = 0; len_q <= 9; ++len_q) {
    for (int64_t len_k = 0; len_k <= 9; ++len_k) {
      for (int64_t left = -1; left <= 10; ++left) {
        for (int64_t right = -1; right <= 10; ++right) {
          const cpu::VisibleKeys mask(MaskParams{false, left, right}, len_q, len_k, g);
          const int64_t len_rows = len_q * g;
          const auto sees_row = [&](int64_t i, int64_t j) { return sees(i / g, j, len_q, len_k, left, right); };
          const std::string where = "g " + std::to_string(g) + " len_q " + std::to_string(len_q) + " len_k " + std::to_string(len_k) + " left " +
                                    std::to_string(left) + " right " + std::to_string(right);
          // keys_of_row: exactly the visible keys (they are one range).
          for (int64_t i = 0; i < len_rows; ++i) {
            const cpu::Range keys = mask.keys_of_row(i);
            for (int64_t j = -1; j <= len_k; ++j) {
              const bool in = !keys.empty() && j >= keys.begin && j < keys.end;
              ASSERT_EQ(in, sees_row(i, j)) << where << " row " << i << " key " << j;
            }
            std::vector<float> row(len_k, 1.f);
            mask.mask_row(row.data(), i, 0, len_k);
            for (int64_t j = 0; j < len_k; ++j) ASSERT_EQ(row[j] == 1.f, sees_row(i, j)) << where;
          }
          // keys_of_rows and rows_of_keys over every range: the hull of what the rows see, and
          // every row that sees a key of the range (nothing the backward's dK/dV pass would miss),
          // and no row beyond the hull of those.
          for (int64_t a = 0; a <= len_rows; ++a) {
            for (int64_t b = a; b <= len_rows; ++b) {
              int64_t lo = len_k, hi = -1;
              for (int64_t i = a; i < b; ++i)
                for (int64_t j = 0; j < len_k; ++j)
                  if (sees_row(i, j)) lo = std::min(lo, j), hi = std::max(hi, j);
              const cpu::Range keys = mask.keys_of_rows({a, b});
              if (hi < 0) {
                ASSERT_TRUE(keys.empty() || keys.begin >= len_k || keys.end <= 0) << where << " rows " << a << ".." << b;
              } else {
                ASSERT_EQ(keys.begin, lo) << where << " rows " << a << ".." << b;
                ASSERT_EQ(keys.end, hi + 1) << where << " rows " << a << ".." << b;
              }
            }
          }
          for (int64_t a = 0; a <= len_k; ++a) {
            for (int64_t b = a; b <= len_k; ++b) {
              int64_t lo = len_rows, hi = -1;
              for (int64_t i = 0; i < len_rows; ++i)
                for (int64_t j = a; j < b; ++j)
                  if (sees_row(i, j)) lo = std::min(lo, i), hi = std::max(hi, i);
              const cpu::Range rows = mask.rows_of_keys({a, b});
              if (hi < 0) {
                for (int64_t i = std::max<int64_t>(rows.begin, 0); i < std::min(rows.end, len_rows); ++i)
                  for (int64_t j = a; j < b; ++j) ASSERT_FALSE(sees_row(i, j)) << where;
              } else {
                ASSERT_EQ(rows.begin, lo) << where << " keys " << a << ".." << b;
                ASSERT_EQ(rows.end, hi + 1) << where << " keys " << a << ".." << b;
              }
              ++checked;
            }
          }
        }
      }
    }
  }
  }
  EXPECT_GT(checked, 200000);
}

// f16_to_float on every half against the value by its definition (branch-free, so widen_f16's
// loop vectorizes), and widen_f16 (the CPU's VCVTPH2PS where it has F16C, else that loop) against
// it bitwise (NaN as NaN: the instruction quiets signaling ones); float_to_f16 rounds every finite
// half back to itself.
TEST(F16, EveryHalfConvertsExactly) {
  std::vector<uint16_t> halves(65536);
  for (uint32_t h = 0; h < 65536; ++h) halves[h] = static_cast<uint16_t>(h);
  std::vector<float> widened(65536);
  cpu::widen_f16(widened.data(), halves.data(), 65536);
  for (uint32_t h = 0; h < 65536; ++h) {
    const int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    const double sign = (h & 0x8000) ? -1 : 1;
    const float v = f16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(v)) {
      ASSERT_TRUE(std::isnan(widened[h])) << std::hex << h;
    } else {
      ASSERT_EQ(float_to_bits(widened[h]), float_to_bits(v)) << std::hex << h;
    }
    if (exp == 0x1f) {
      ASSERT_TRUE(man == 0 ? std::isinf(v) && (v < 0) == (sign < 0) : std::isnan(v)) << std::hex << h;
      continue;
    }
    const double want = sign * (exp == 0 ? std::ldexp(man, -24) : std::ldexp(1024 + man, exp - 25));
    ASSERT_EQ(static_cast<double>(v), want) << std::hex << h;
    ASSERT_EQ(std::signbit(v), sign < 0) << std::hex << h;
    ASSERT_EQ(float_to_f16(v), h) << std::hex << h;
  }
}

// The selection rule over stand-in families (host tensors): "auto" takes the first family whose
// plan accepts the call and lets "auto" have it; a plan that declines "auto" (Plan::in_auto, the sm90
// backward per head dim) passes the call on and still runs when named; a direction out of "auto" is
// not even planned; nothing a family left in the plan reaches the next family's.
Status plan_plain(const FwdParams&, Plan* plan) {
  plan->workspace_bytes = 7;
  return Status::success();
}
Status plan_named_only(const FwdParams&, Plan* plan) {
  plan->workspace_bytes = 99;
  plan->workspace_optional = true;
  plan->in_auto = false;
  return Status::success();
}
Status plan_refusing(const FwdParams&, Plan* plan) {
  plan->workspace_alignment = 64;
  plan->in_auto = false;
  return Status::unsupported("refusing: not this call");
}
int g_planned = 0;
Status plan_counted(const FwdParams&, Plan*) {
  ++g_planned;
  return Status::success();
}
Status run_nothing(const Plan&, const FwdParams&) { return Status::success(); }

TEST(Select, PlansMayDeclineAuto) {
  const Family named_only{"named_only", Device::cpu, {plan_named_only, run_nothing}, {}, {}};
  const Family refusing{"refusing", Device::cpu, {plan_refusing, run_nothing}, {}, {}};
  const Family plain{"plain", Device::cpu, {plan_plain, run_nothing}, {}, {}};
  const std::vector<const Family*> table = {&named_only, &refusing, &plain};
  FwdParams p;
  p.device = Device::cpu;
  Plan plan;
  for (const char* path : {"auto", ""}) {
    ASSERT_TRUE(flashattn::testing::select_from(table, p, path, &plan).ok());
    EXPECT_EQ(plan.family, &plain);
    EXPECT_EQ(plan.workspace_bytes, 7u);
    EXPECT_FALSE(plan.workspace_optional);
    EXPECT_EQ(plan.workspace_alignment, 1u);
    EXPECT_TRUE(plan.in_auto);
  }
  ASSERT_TRUE(flashattn::testing::select_from(table, p, "named_only", &plan).ok());
  EXPECT_EQ(plan.family, &named_only);
  EXPECT_EQ(plan.workspace_bytes, 99u);
  // Nothing after it: the decline is the reason, and it names the path that runs the call.
  const Status s = flashattn::testing::select_from({&named_only}, p, "auto", &plan);
  EXPECT_EQ(s.code, StatusCode::not_supported);
  EXPECT_NE(s.message.find("runs this call only when named (path = \"named_only\")"), std::string::npos) << s.message;
  EXPECT_EQ(plan.family, nullptr);
  EXPECT_EQ(plan.workspace_bytes, 0u);
  // The first family's reason wins over the later ones'.
  EXPECT_EQ(flashattn::testing::select_from({&refusing, &named_only}, p, "auto", &plan).message, "refusing: not this call");
}

TEST(Select, DirectionsOutOfAutoAreNotPlanned) {
  Family out{"out", Device::cpu, {plan_counted, run_nothing}, {}, {}};
  out.forward.in_auto = false;
  const Family plain{"plain", Device::cpu, {plan_plain, run_nothing}, {}, {}};
  FwdParams p;
  p.device = Device::cpu;
  Plan plan;
  g_planned = 0;
  ASSERT_TRUE(flashattn::testing::select_from({&out, &plain}, p, "auto", &plan).ok());
  EXPECT_EQ(plan.family, &plain);
  EXPECT_EQ(g_planned, 0);
  ASSERT_TRUE(flashattn::testing::select_from({&out, &plain}, p, "out", &plan).ok());
  EXPECT_EQ(plan.family, &out);
  EXPECT_EQ(g_planned, 1);
}

}  // namespace
}  // namespace fa_test
