// The error check: the call's outputs against the float64 reference, with the field's rule
//   max|got - ref| <= 2 * max|same - ref| + atol
// where `same` is the naive computation in the inputs' precision (src/cpu/reference.hpp).
// Above kFullCheckEntries score entries it checks sampled rows only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config.hpp"
#include "cpu/reference.hpp"
#include "problem.hpp"

namespace fa_cli {

// Score entries (batch * heads * seqlen_q * seqlen_k) up to which every row is checked.
constexpr double kFullCheckEntries = 67108864.0;  // 2^26
// Rows sampled above it: query rows (out, lse, dq) and key rows (dk, dv), all heads of each.
constexpr int64_t kSampledRows = 256;

struct TensorCheck {
  std::string name;  // out, lse, dq, dk, dv
  int64_t dim = 1;   // elements per head in a row (for describing the worst element)
  flashattn::reference::ErrorReport error;
};

struct CheckResult {
  bool ran = false;
  bool sampled = false;
  int64_t q_rows = 0, total_q = 0;  // query rows checked, of all
  int64_t k_rows = 0, total_k = 0;  // key rows checked (backward)
  std::vector<TensorCheck> tensors;
  bool ok = true;
  double seconds = 0;
};

// One output against the float64 reference by the error rule: `got` (the call's), `same` (the naive
// computation in the inputs' precision) and `f64` over the checked `rows` of `width` entries each;
// `terms`, the sums' lengths where the rule's tolerance grows with them (0: none).
TensorCheck check_tensor(const char* name, int64_t dim, const std::vector<double>& got,
                         const std::vector<double>& same, const std::vector<double>& f64,
                         const std::vector<int64_t>& rows, int64_t width, flashattn::DType dtype, double terms = 0);

// Checks the host copies of the outputs (out, lse; and dq, dk, dv when config.backward). A failing
// reference call (never expected: the same args already ran) comes back as its Status.
flashattn::Status check_outputs(const Layout& layout, const RunConfig& config, const Tensors& host,
                                CheckResult* result);

}  // namespace fa_cli
