// matmul_acc on libxsmm's JIT micro-kernels when the build has them (FLASHATTN_WITH_LIBXSMM), on the
// loops of matmul.hpp otherwise. libxsmm is column-major; a row-major product C = A·B is the
// column-major Cᵀ = Bᵀ·Aᵀ over the same memory, so B goes in as libxsmm's left operand and A as its
// right one, transposed (TRANS_B) when A is read transposed. matmul_acc_bf16 likewise, on libxsmm's
// bf16 kernels (bf16 operands, float C) with our B as its VNNI-packed left operand.
#include "cpu/matmul.hpp"

#include <vector>

#include "cpu/convert.hpp"
#include "cpu/tile_math.hpp"

#ifdef FLASHATTN_WITH_LIBXSMM
#include <libxsmm.h>

#include <string>
#endif

namespace flashattn::cpu {

#ifdef FLASHATTN_WITH_LIBXSMM
namespace {

// The kernel for this shape, generated on first use for the running CPU and cached by libxsmm
// (thread-safe); nullptr when libxsmm declines it (the caller then runs the loops).
libxsmm_smmfunction libxsmm_kernel(int64_t ldc, MatA a, int64_t ldb, int64_t m, int64_t n, int64_t k) {
  const bool a_stored = a.col_stride == 1, a_transposed = a.row_stride == 1 && !a_stored;
  if (!a_stored && !a_transposed) return nullptr;
  const libxsmm_blasint ld_left = static_cast<libxsmm_blasint>(ldb);
  const libxsmm_blasint ld_right = static_cast<libxsmm_blasint>(a_stored ? a.row_stride : a.col_stride);
  const libxsmm_blasint ld_out = static_cast<libxsmm_blasint>(ldc);
  const float alpha = 1.f, beta = 1.f;  // C += product
  const int flags = a_stored ? LIBXSMM_GEMM_FLAG_NONE : LIBXSMM_GEMM_FLAG_TRANS_B;
  return libxsmm_smmdispatch(static_cast<libxsmm_blasint>(n), static_cast<libxsmm_blasint>(m),
                             static_cast<libxsmm_blasint>(k), &ld_left, &ld_right, &ld_out, &alpha, &beta, &flags,
                             nullptr);
}

// The bf16 kernel for this shape (libxsmm's A is our B, VNNI-packed), or nullptr.
libxsmm_bsmmfunction libxsmm_bf16_kernel(int64_t ldc, int64_t lda, int64_t ldb, int64_t m, int64_t n, int64_t k) {
  const libxsmm_blasint ld_left = static_cast<libxsmm_blasint>(ldb), ld_right = static_cast<libxsmm_blasint>(lda);
  const libxsmm_blasint ld_out = static_cast<libxsmm_blasint>(ldc);
  const float alpha = 1.f, beta = 1.f;
  const int flags = LIBXSMM_GEMM_FLAG_VNNI_A;
  return libxsmm_bsmmdispatch(static_cast<libxsmm_blasint>(n), static_cast<libxsmm_blasint>(m),
                              static_cast<libxsmm_blasint>(k), &ld_left, &ld_right, &ld_out, &alpha, &beta, &flags,
                              nullptr);
}

}  // namespace
#endif

namespace detail {

void matmul_acc_bf16_loops(float* c, int64_t ldc, const uint16_t* a, int64_t lda, const uint32_t* b_pairs,
                           int64_t ldb, int64_t m, int64_t n, int64_t k) {
  std::vector<float> a_f(static_cast<size_t>(m * k)), b_f(static_cast<size_t>(k * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t kk = 0; kk < k; ++kk) a_f[i * k + kk] = bf16_to_float(a[i * lda + kk]);
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < n; ++j) b_f[kk * n + j] = bf16_to_float(static_cast<uint16_t>(b_pairs[(kk / 2) * ldb + j] >> (16 * (kk % 2))));
  matmul_acc_loops(c, ldc, as_stored(a_f.data(), k), b_f.data(), n, m, n, k);
}

}  // namespace detail

void matmul_acc_bf16(float* c, int64_t ldc, const uint16_t* a, int64_t lda, const uint32_t* b_pairs, int64_t ldb,
                     int64_t m, int64_t n, int64_t k) {
  if (m <= 0 || n <= 0 || k <= 0) return;
#ifdef FLASHATTN_WITH_LIBXSMM
  if (bf16_products_native()) {
    if (const libxsmm_bsmmfunction kernel = libxsmm_bf16_kernel(ldc, lda, ldb, m, n, k)) {
      kernel(reinterpret_cast<const libxsmm_bfloat16*>(b_pairs), reinterpret_cast<const libxsmm_bfloat16*>(a), c);
      return;
    }
  }
#endif
  detail::matmul_acc_bf16_loops(c, ldc, a, lda, b_pairs, ldb, m, n, k);
}

bool bf16_products_native() {
#ifdef FLASHATTN_WITH_LIBXSMM
  static const bool native = [] {
    const int arch = libxsmm_get_target_archid();
    return arch >= LIBXSMM_X86_AVX512_CPX && arch < LIBXSMM_X86_ALLFEAT;
  }();
  return native;
#else
  return false;
#endif
}

void matmul_acc(float* c, int64_t ldc, MatA a, const float* b, int64_t ldb, int64_t m, int64_t n, int64_t k) {
  if (m <= 0 || n <= 0 || k <= 0) return;
#ifdef FLASHATTN_WITH_LIBXSMM
  if (const libxsmm_smmfunction kernel = libxsmm_kernel(ldc, a, ldb, m, n, k)) {
    kernel(b, a.data, c);
    return;
  }
#endif
  detail::matmul_acc_loops(c, ldc, a, b, ldb, m, n, k);
}

void transpose_into_tile(float* dst, const float* src, int64_t ld, int64_t queries, int64_t cols) {
#ifdef FLASHATTN_WITH_LIBXSMM
  // Column-major, src is cols × queries (leading dimension ld) and dst queries × cols (kBlockM).
  libxsmm_otrans(dst, src, sizeof(float), static_cast<libxsmm_blasint>(cols), static_cast<libxsmm_blasint>(queries),
                 static_cast<libxsmm_blasint>(ld), static_cast<libxsmm_blasint>(kBlockM));
#else
  transpose_into_tile_loops(dst, src, ld, queries, cols);
#endif
}

bool transpose_words_into_tile(uint32_t* dst, const void* src, int64_t ld, int64_t queries, int64_t cols) {
#ifdef FLASHATTN_WITH_LIBXSMM
  libxsmm_otrans(dst, src, sizeof(uint32_t), static_cast<libxsmm_blasint>(cols), static_cast<libxsmm_blasint>(queries),
                 static_cast<libxsmm_blasint>(ld), static_cast<libxsmm_blasint>(kBlockM));
  return true;
#else
  (void)dst, (void)src, (void)ld, (void)queries, (void)cols;
  return false;
#endif
}

const char* matmul_engine() {
#ifdef FLASHATTN_WITH_LIBXSMM
  static const std::string name =
      std::string("libxsmm ") + libxsmm_get_target_arch() + (bf16_products_native() ? "+bf16" : "");
  return name.c_str();
#else
  return "loops";
#endif
}

}  // namespace flashattn::cpu
