// matmul_acc on libxsmm's JIT micro-kernels when the build has them (FLASHATTN_WITH_LIBXSMM), on the
// loops of matmul.hpp otherwise. libxsmm is column-major; a row-major product C = A·B is the
// column-major Cᵀ = Bᵀ·Aᵀ over the same memory, so B goes in as libxsmm's left operand and A as its
// right one, transposed (TRANS_B) when A is read transposed.
#include "cpu/matmul.hpp"

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

}  // namespace
#endif

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

const char* matmul_engine() {
#ifdef FLASHATTN_WITH_LIBXSMM
  static const std::string name = std::string("libxsmm ") + libxsmm_get_target_arch();
  return name.c_str();
#else
  return "loops";
#endif
}

}  // namespace flashattn::cpu
