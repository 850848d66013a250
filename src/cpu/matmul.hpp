// The one product every tile step uses: C += A · B on contiguous float tiles, with A read either as
// stored or transposed. Q·Kᵀ, P·V, dO·Vᵀ and dS·K are A·B with the right operand stored [k][n]
// (Kᵀ and Vᵀ are loaded transposed for that); Pᵀ·dO and dSᵀ·Q read A transposed.
//
// matmul_acc (matmul.cpp) runs it on libxsmm's JIT micro-kernels when the build found libxsmm: they
// are generated at run time for the CPU at hand (AVX2, AVX-512), so a build without -march=native
// keeps the speed. Without libxsmm, or for a shape it declines, the loops below run.
//
// The loops accumulate every element of C in order of k, one multiply-add (fused where the target
// has FMA) at a time: no sum is reassociated, so they vectorize along n without -ffast-math.
// libxsmm's kernels accumulate along k in registers too (bitwise equal to the loops on AVX2, see
// docs/cpu-benchmark.md). Either way a kernel depends only on the shape, so the result does not
// depend on the thread count.
#pragma once

#include <cstdint>

namespace flashattn::cpu {

// A read-only matrix operand: element (i, k) is at data[i * row_stride + k * col_stride].
// A tile stored [m][k] is {data, ld, 1}; its transpose is {data, 1, ld}.
struct MatA {
  const float* data;
  int64_t row_stride, col_stride;

  float operator()(int64_t i, int64_t k) const { return data[i * row_stride + k * col_stride]; }
  MatA rows_from(int64_t i) const { return {data + i * row_stride, row_stride, col_stride}; }
};

inline MatA as_stored(const float* tile, int64_t ld) { return {tile, ld, 1}; }
inline MatA transposed(const float* tile, int64_t ld) { return {tile, 1, ld}; }

namespace detail {

// C[m × n] += A[m × k] · B[k × n], any sizes: one row of C at a time.
inline void matmul_acc_rows(float* __restrict c, int64_t ldc, MatA a, const float* __restrict b, int64_t ldb,
                            int64_t m, int64_t n, int64_t k) {
  for (int64_t i = 0; i < m; ++i) {
    float* __restrict c_row = c + i * ldc;
    for (int64_t kk = 0; kk < k; ++kk) {
      const float a_ik = a(i, kk);
      const float* __restrict b_row = b + kk * ldb;
      for (int64_t j = 0; j < n; ++j) c_row[j] += a_ik * b_row[j];
    }
  }
}

// The register-blocked body: a kRows × kCols block of C stays in registers across the whole k loop
// (kRows rows share each load of B), so the loop is bound by FMAs instead of by stores to C.
template <int kRows, int kCols>
inline void matmul_acc_block(float* __restrict c, int64_t ldc, MatA a, const float* __restrict b, int64_t ldb,
                             int64_t k) {
  float acc[kRows][kCols];
  for (int r = 0; r < kRows; ++r)
    for (int j = 0; j < kCols; ++j) acc[r][j] = c[r * ldc + j];
  for (int64_t kk = 0; kk < k; ++kk) {
    const float* __restrict b_row = b + kk * ldb;
    for (int r = 0; r < kRows; ++r) {
      const float a_rk = a(r, kk);
      for (int j = 0; j < kCols; ++j) acc[r][j] += a_rk * b_row[j];
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int j = 0; j < kCols; ++j) c[r * ldc + j] = acc[r][j];
}

// The loops: blocks of 8 rows × 32 (then 16) columns take the register-blocked path; edges the
// row loop.
inline void matmul_acc_loops(float* c, int64_t ldc, MatA a, const float* b, int64_t ldb, int64_t m, int64_t n,
                             int64_t k) {
  constexpr int kRows = 8, kWide = 32, kNarrow = 16;
  int64_t i = 0;
  for (; i + kRows <= m; i += kRows) {
    float* c_rows = c + i * ldc;
    const MatA a_rows = a.rows_from(i);
    int64_t j = 0;
    for (; j + kWide <= n; j += kWide) matmul_acc_block<kRows, kWide>(c_rows + j, ldc, a_rows, b + j, ldb, k);
    for (; j + kNarrow <= n; j += kNarrow) matmul_acc_block<kRows, kNarrow>(c_rows + j, ldc, a_rows, b + j, ldb, k);
    if (j < n) matmul_acc_rows(c_rows + j, ldc, a_rows, b + j, ldb, kRows, n - j, k);
  }
  if (i < m) matmul_acc_rows(c + i * ldc, ldc, a.rows_from(i), b, ldb, m - i, n, k);
}

// The bf16 product (matmul_acc_bf16 below) without a bf16 kernel: both operands widened to float,
// then the loops above.
void matmul_acc_bf16_loops(float* c, int64_t ldc, const uint16_t* a, int64_t lda, const uint32_t* b_pairs,
                           int64_t ldb, int64_t m, int64_t n, int64_t k);

}  // namespace detail

// C[m × n] += A[m × k] · B[k × n]; C and B row-major with leading dimensions ldc, ldb.
void matmul_acc(float* c, int64_t ldc, MatA a, const float* b, int64_t ldb, int64_t m, int64_t n, int64_t k);

// The bf16 product: C[m × n] += A[m × k] · B[k × n] with bf16 operands and float C. A is row-major
// bf16 with leading dimension lda; B comes in row pairs (VNNI layout, what the dot-product
// instructions on bf16 pairs, vdpbf16ps, read): the 32-bit word b_pairs[(kk / 2) * ldb + j] holds
// element (kk, j) in its low half for even kk, in its high half for odd kk. k is even (callers pad
// the odd row of B and column of A with zeros). On libxsmm's bf16 kernels where the CPU has them, else on a loop that multiplies the same
// bf16 values in float (the same products, summed in another order).
void matmul_acc_bf16(float* c, int64_t ldc, const uint16_t* a, int64_t lda, const uint32_t* b_pairs, int64_t ldb,
                     int64_t m, int64_t n, int64_t k);

// Whether this CPU multiplies bf16 in bf16 (AVX512-BF16: libxsmm's target cpx or later), where the
// bf16 products above run at about twice the float ones' rate. Without it the backend widens bf16
// tiles to float and runs matmul_acc.
bool bf16_products_native();

// What runs matmul_acc, for the benchmark's record: "libxsmm <target>" (e.g. "libxsmm hsw" for
// AVX2, "libxsmm skx" for AVX-512) or "loops".
const char* matmul_engine();

}  // namespace flashattn::cpu
