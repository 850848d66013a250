// Checks of a backend's results against the float64 reference, as GoogleTest assertions whose
// failure messages say what failed, by how much, and where.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cpu/reference.hpp"
#include "support/problem.hpp"

namespace fa_test {

namespace reference = flashattn::reference;

// The error rule (reference::check_error_rule) as an assertion; `dim` splits columns into heads.
// With FLASHATTN_TEST_VERBOSE set, every report is printed, passing or not.
::testing::AssertionResult rule_holds(const std::string& tensor, const reference::ErrorReport& report, int64_t dim);

// lse: +inf exactly where the reference is +inf (fully masked rows), NaN where it is NaN, else
// |got − ref| ≤ 2·max|same − ref| + kLseAtol·(1 + max|ref|), over the listed rows.
constexpr double kLseAtol = 1e-5;
::testing::AssertionResult lse_close(const std::vector<double>& got, const std::vector<double>& same,
                                     const std::vector<double>& ref, const std::vector<int64_t>& rows, int64_t heads);

// The rows a case compares: all, or a sample drawn from the test's seed.
std::vector<int64_t> compared_q_rows(const Problem& p);  // empty when all rows
std::vector<int64_t> compared_k_rows(const Problem& p);

// After run_forward: out by the error rule, lse (when requested) by lse_close, no byte outside the
// output views written, inputs unchanged.
void expect_forward_matches(const Problem& p);
// After run_backward: dq, dk, dv by the error rule, no byte outside their views written, inputs
// (q, k, v, out, lse, dout) unchanged.
void expect_backward_matches(const Problem& p);

// Writes a packed array (rows of the reference's layout) into a problem's tensor: `q_side` rows
// for out, dq ([.., rows_q, heads, dim]), else key rows for dk, dv; and the packed lse.
void store_packed(HostTensor& t, const Problem& p, bool q_side, const std::vector<double>& packed);
void store_packed_lse(HostTensor& lse, const Problem& p, const std::vector<double>& packed);

// No NaN (nor inf) among the computed rows of a packed tensor of `width` columns.
::testing::AssertionResult all_finite(const std::string& tensor, const std::vector<double>& x,
                                      const std::vector<int64_t>& rows, int64_t width);

}  // namespace fa_test
