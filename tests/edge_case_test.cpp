// Edge cases on every backend: fully masked rows (out exactly 0, lse +inf, zero gradients, no NaN),
// empty sequences and batches, NaN inputs (NaN where the reference has NaN, no crash), scores far
// beyond exp's range.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>

#include "support/check.hpp"

namespace fa_test {
namespace {

using namespace flashattn;
constexpr double kInf = std::numeric_limits<double>::infinity();

class Edge : public ::testing::TestWithParam<Backend> {
 protected:
  // Forward and backward on the backend, both checked against the reference.
  Problem run_both(const Case& c) {
    Rng rng;
    Problem p = make_problem(c, rng);
    auto fwd = run_forward(GetParam(), p);
    if (fwd.support.code == StatusCode::not_supported) {
      skipped_ = fwd.support.message;
      return p;
    }
    EXPECT_TRUE(fwd.status.ok()) << fwd.status.message;
    expect_forward_matches(p);
    auto bwd = run_backward(GetParam(), p);
    if (bwd.support.code == StatusCode::not_supported) {
      // A family whose backward does not take the case (sm90's takes head dims 64, 128, 256): the
      // backward a user gets after its forward is the one "auto" picks, from this family's out and lse.
      bwd = run_backward(Backend::any(GetParam().device), p);
    }
    EXPECT_TRUE(bwd.status.ok()) << bwd.status.message;
    expect_backward_matches(p);
    return p;
  }

  // Rows (packed) the reference says are fully masked must have out = 0 exactly, lse = +inf,
  // dq = 0 exactly; and no output anywhere may be NaN or inf (lse of those rows aside).
  void expect_masked_rows_exact(const Problem& p, int64_t expected_masked_rows) {
    const BwdParams hp = p.host_backward_params();
    reference::ForwardResult ref;
    ASSERT_TRUE(reference::forward(hp, reference::Precision::f64, &ref).ok());
    const std::vector<double> out = reference::read_out(hp), lse = reference::read_lse(hp), dq = reference::read_dq(hp),
                              dk = reference::read_dk(hp), dv = reference::read_dv(hp);
    const int64_t H = hp.heads_q, Dv = hp.hdim_v, D = hp.hdim_qk;
    int64_t masked = 0;
    for (int64_t row : ref.q_rows) {
      if (ref.lse[row * H] != kInf) continue;
      ++masked;
      for (int64_t h = 0; h < H; ++h) {
        EXPECT_EQ(lse[row * H + h], kInf) << "lse of fully masked row " << row << ", head " << h;
        for (int64_t d = 0; d < Dv; ++d) ASSERT_EQ(out[(row * H + h) * Dv + d], 0.0) << "out row " << row;
        for (int64_t d = 0; d < D; ++d) ASSERT_EQ(dq[(row * H + h) * D + d], 0.0) << "dq row " << row;
      }
    }
    EXPECT_EQ(masked, expected_masked_rows) << "the case does not mask the rows it means to";
    reference::BackwardResult g;
    ASSERT_TRUE(reference::backward(hp, reference::Precision::f64, &g).ok());
    EXPECT_TRUE(all_finite("out", out, ref.q_rows, H * Dv));
    EXPECT_TRUE(all_finite("dq", dq, ref.q_rows, H * D));
    EXPECT_TRUE(all_finite("dk", dk, g.k_rows, hp.heads_kv * D));
    EXPECT_TRUE(all_finite("dv", dv, g.k_rows, hp.heads_kv * Dv));
  }

  std::string skipped_;
};

#define FA_SKIPPED_IF_UNSUPPORTED() \
  if (!skipped_.empty()) GTEST_SKIP() << skipped_

TEST_P(Edge, CausalWithMoreQueriesThanKeys) {
  FA_REQUIRE_BACKEND(GetParam());
  Problem p = run_both(Case::padded(2, 40, 16, 2, 1, 64).causal_mask());
  FA_SKIPPED_IF_UNSUPPORTED();
  expect_masked_rows_exact(p, 2 * 24);  // rows i < 40 − 16 of each batch see no key
}

TEST_P(Edge, WindowThatExcludesEveryKeyForSomeRows) {
  FA_REQUIRE_BACKEND(GetParam());
  Problem p = run_both(Case::padded(1, 50, 20, 2, 2, 64).window(3, 2).with(DType::f16));
  FA_SKIPPED_IF_UNSUPPORTED();
  expect_masked_rows_exact(p, 28);  // j ≤ i − 30 + 2 has no j ≥ 0 for i < 28
}

TEST_P(Edge, VarlenSequencesWithoutKeys) {
  FA_REQUIRE_BACKEND(GetParam());
  Problem p = run_both(Case::varlen({7, 5, 3}, {0, 9, 0}, 2, 1, 64).layout(Strides::padded));
  FA_SKIPPED_IF_UNSUPPORTED();
  expect_masked_rows_exact(p, 7 + 3);
}

TEST_P(Edge, NoQueries) {  // dk, dv must still be written: zeros
  FA_REQUIRE_BACKEND(GetParam());
  Problem p = run_both(Case::padded(2, 0, 33, 2, 2, 64));
  FA_SKIPPED_IF_UNSUPPORTED();
  for (const HostTensor* t : {&p.dk, &p.dv}) {
    for (int64_t off : t->element_offsets()) ASSERT_EQ(t->get_at(off), 0.0);
  }
}

TEST_P(Edge, NoKeys) {
  FA_REQUIRE_BACKEND(GetParam());
  Problem p = run_both(Case::padded(2, 17, 0, 2, 1, 64).with(DType::f16));
  FA_SKIPPED_IF_UNSUPPORTED();
  expect_masked_rows_exact(p, 2 * 17);
}

TEST_P(Edge, NoQueriesNorKeys) {
  FA_REQUIRE_BACKEND(GetParam());
  run_both(Case::padded(3, 0, 0, 2, 2, 64));
  FA_SKIPPED_IF_UNSUPPORTED();
}

TEST_P(Edge, EmptyBatch) {
  FA_REQUIRE_BACKEND(GetParam());
  run_both(Case::padded(0, 16, 16, 2, 2, 64));
  FA_SKIPPED_IF_UNSUPPORTED();
}

TEST_P(Edge, EmptyVarlenBatch) {
  FA_REQUIRE_BACKEND(GetParam());
  run_both(Case::varlen({}, {}, 2, 2, 64));
  FA_SKIPPED_IF_UNSUPPORTED();
}

TEST_P(Edge, VarlenAllSequencesEmpty) {
  FA_REQUIRE_BACKEND(GetParam());
  run_both(Case::varlen({0, 0}, {0, 0}, 2, 1, 64).extra(5));
  FA_SKIPPED_IF_UNSUPPORTED();
}

// Scores of magnitude ~100: exp(S) overflows unless the row max is subtracted first.
TEST_P(Edge, ScoresBeyondExpRange) {
  FA_REQUIRE_BACKEND(GetParam());
  Problem p = run_both(Case::padded(1, 100, 130, 2, 2, 64).with(DType::f16).stddev(3.0).scale(1.f).causal_mask());
  FA_SKIPPED_IF_UNSUPPORTED();
}

// A NaN in q spoils its (row, head) only; one in k every row that sees that key (in its kv head's
// group); one in v that column of every row that sees that key. The reference says which: there
// the backend must give NaN too. Elsewhere it must match the reference, except that a NaN in v may
// also reach rows of the same sequence that do not see that key: a tiled P·V multiplies the masked
// P = 0 by it (0·NaN = NaN), as FlashAttention's kernels do. It must never leave the sequence.
void poison_input(Problem& p, HostTensor& t, int64_t row, int64_t head, int64_t col) {
  if (p.c.is_varlen()) {
    t.set({row, head, col}, std::nan(""));
  } else {
    t.set({0, row, head, col}, std::nan(""));
  }
}

void expect_nan_where_reference_has_nan(const Problem& p, bool may_spread_in_sequence, int64_t poisoned_seq) {
  const FwdParams hp = p.host_forward_params();
  reference::ForwardResult ref, same;
  ASSERT_TRUE(reference::forward(hp, reference::Precision::f64, &ref).ok());
  ASSERT_TRUE(reference::forward(hp, reference::Precision::same, &same).ok());
  std::vector<double> out = reference::read_out(hp);
  const int64_t width = hp.heads_q * hp.hdim_v;
  int64_t required = 0, spread = 0;
  for (int64_t row : ref.q_rows) {
    for (int64_t c = 0; c < width; ++c) {
      const size_t i = static_cast<size_t>(row * width + c);
      if (std::isnan(ref.out[i])) {
        ++required;
        EXPECT_TRUE(std::isnan(out[i])) << "out: a NaN input must give NaN at packed row " << row << ", column " << c;
      } else if (std::isnan(out[i])) {
        ++spread;
        const bool allowed = may_spread_in_sequence && ref.layout.seq_of_q_row(row) == poisoned_seq;
        EXPECT_TRUE(allowed) << "out: NaN leaked to packed row " << row << ", column " << c;
        out[i] = ref.out[i];  // judged above; the rule below covers the finite rest
      }
    }
  }
  EXPECT_GT(required, 0) << "the NaN input reaches no output: the case tests nothing";
  EXPECT_TRUE(rule_holds("out", reference::check_error_rule(out, same.out, ref.out, ref.q_rows, width, hp.dtype),
                         hp.hdim_v));
  const std::vector<double> lse = reference::read_lse(hp);
  for (int64_t row : ref.q_rows) {
    for (int64_t h = 0; h < hp.heads_q; ++h) {
      const size_t i = static_cast<size_t>(row * hp.heads_q + h);
      EXPECT_EQ(std::isnan(lse[i]), std::isnan(ref.lse[i])) << "lse at packed row " << row << ", head " << h;
    }
  }
  if (spread > 0) ::testing::Test::RecordProperty("nan_spread_in_sequence", std::to_string(spread));
}

void run_with_nan(Backend backend, const Case& c, char which) {
  Rng rng;
  Problem p = make_problem(c, rng);
  HostTensor& t = which == 'q' ? p.q : (which == 'k' ? p.k : p.v);
  poison_input(p, t, 3, 1, 5);
  FA_RUN_OR_SKIP(run_forward(backend, p));
  expect_nan_where_reference_has_nan(p, which == 'v', 0);
  FA_RUN_OR_SKIP(run_backward(backend, p));  // no crash, a status; values are not compared
}

TEST_P(Edge, NaNInQuery) {
  FA_REQUIRE_BACKEND(GetParam());
  run_with_nan(GetParam(), Case::padded(1, 20, 30, 2, 2, 64).causal_mask(), 'q');
}

TEST_P(Edge, NaNInKey) {
  FA_REQUIRE_BACKEND(GetParam());
  run_with_nan(GetParam(), Case::padded(1, 20, 30, 4, 2, 64).window(8, 0).with(DType::f16), 'k');
}

TEST_P(Edge, NaNInValue) {
  FA_REQUIRE_BACKEND(GetParam());
  run_with_nan(GetParam(), Case::varlen({20, 9}, {15, 30}, 2, 2, 64).causal_mask(), 'v');
}

// NaN keys and values of another sequence, and of the packed rows after the last one, must not
// reach a sequence's outputs nor its gradients (its loads stop at the sequence's end).
TEST_P(Edge, NaNOutsideTheSequenceDoesNotLeak) {
  FA_REQUIRE_BACKEND(GetParam());
  Rng rng;
  Problem p = make_problem(Case::varlen({37, 21}, {45, 19}, 2, 1, 64).causal_mask().extra(9), rng);
  for (HostTensor* t : {&p.k, &p.v}) {
    for (int64_t row = 45; row < 45 + 19 + 9; ++row) {
      if (row >= 45 + 19 || row % 3 == 0) poison_input(p, *t, row, 0, row % 64);  // sequence 1 and the extra rows
    }
  }
  for (int64_t row = 37 + 21; row < 37 + 21 + 9; ++row) poison_input(p, p.q, row, 1, 7);  // q's extra rows
  FA_RUN_OR_SKIP(run_forward(GetParam(), p));
  FA_RUN_OR_SKIP(run_backward(GetParam(), p));
  const BwdParams hp = p.host_backward_params();
  const std::vector<double> out = reference::read_out(hp), dq = reference::read_dq(hp), dk = reference::read_dk(hp),
                            dv = reference::read_dv(hp);
  std::vector<int64_t> q_rows, k_rows;
  for (int64_t r = 0; r < 37; ++r) q_rows.push_back(r);
  for (int64_t r = 0; r < 45; ++r) k_rows.push_back(r);
  EXPECT_TRUE(all_finite("out (sequence 0)", out, q_rows, 2 * 64));
  EXPECT_TRUE(all_finite("dq (sequence 0)", dq, q_rows, 2 * 64));
  EXPECT_TRUE(all_finite("dk (sequence 0)", dk, k_rows, 64));
  EXPECT_TRUE(all_finite("dv (sequence 0)", dv, k_rows, 64));
}

// The packed rows after the last sequence: never written (still the poison) unless the call asks
// for zeros there, then 0 in out, dq, dk and dv -- and every sequence row still computed.
TEST_P(Edge, VarlenRowsOutsideTheSequences) {
  FA_REQUIRE_BACKEND(GetParam());
  for (const bool zero : {false, true}) {
    Rng rng;
    const Case c = Case::varlen({37, 0, 21}, {45, 19, 0}, 2, 1, 64).causal_mask().extra(9);
    Problem p = make_problem(zero ? c.zero_rows_outside() : c, rng);
    FA_RUN_OR_SKIP(run_forward(GetParam(), p));
    FA_RUN_OR_SKIP(run_backward(GetParam(), p));
    const auto check = [&](const char* name, const HostTensor& t, int64_t first_outside, int64_t heads) {
      for (int64_t row = 0; row < first_outside + 9; ++row) {
        for (int64_t h = 0; h < heads; ++h) {
          for (int64_t d = 0; d < 64; ++d) {
            const double x = t.get({row, h, d});
            if (row < first_outside) {
              ASSERT_TRUE(std::isfinite(x)) << name << " row " << row << " h " << h << " d " << d;
            } else if (zero) {
              ASSERT_EQ(x, 0.0) << name << " outside, row " << row << " h " << h << " d " << d;
            } else {
              ASSERT_TRUE(std::isnan(x)) << name << " written outside, row " << row << " h " << h << " d " << d;
            }
          }
        }
      }
    };
    check("out", p.out, 58, 2);
    check("dq", p.dq, 58, 2);
    check("dk", p.dk, 64, 1);
    check("dv", p.dv, 64, 1);
  }
}

// Window sizes near 2^63 mean "unbounded" (validation clamps every window to the lengths): the
// results equal the unbounded ones, forward and backward. Before, such a window overflowed the CPU
// mask arithmetic: out = 0 and lse = +inf for (-1, max), dk = dv = 0 for (max, 0).
TEST_P(Edge, HugeWindowsAreUnbounded) {
  FA_REQUIRE_BACKEND(GetParam());
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  for (const Case& c : {Case::padded(1, 128, 128, 2, 1, 64).window(-1, kMax), Case::padded(1, 128, 128, 2, 1, 64).window(kMax, 0),
                        Case::padded(2, 70, 90, 2, 2, 64).window(kMax - 1, kMax - 1).with(DType::f16),
                        Case::varlen({40, 0, 77}, {50, 9, 0}, 2, 1, 64).window(kMax, kMax)}) {
    run_both(c);
    if (!skipped_.empty()) GTEST_SKIP() << skipped_;
  }
}

// deterministic = true: the backward is bitwise reproducible (dq accumulates across key blocks,
// and dk, dv across the query heads of a GQA group: orderless atomics would differ run to run).
// Ten runs each, GQA and MQA groups of 4, 6 and 16.
TEST_P(Edge, DeterministicBackwardIsReproducible) {
  FA_REQUIRE_BACKEND(GetParam());
  for (const Case& c : {Case::padded(2, 300, 280, 8, 2, 64).det().causal_mask(),
                        Case::varlen({200, 0, 333}, {150, 90, 400}, 6, 1, 128).det().with(DType::f16),
                        Case::padded(1, 257, 300, 16, 1, 128).det().causal_mask().with(DType::bf16),
                        // MQA at batch 1: on a GPU every key block runs as parts (bwd_plan.cu's split)
                        Case::padded(1, 1000, 1000, 16, 1, 64).det().causal_mask().with(DType::bf16)}) {
    Rng rng;
    Problem p = make_problem(c, rng);
    FA_RUN_OR_SKIP(run_forward(GetParam(), p));
    FA_RUN_OR_SKIP(run_backward(GetParam(), p));
    expect_backward_matches(p);
    const HostTensor dq = p.dq, dk = p.dk, dv = p.dv;
    for (int run = 1; run < 10; ++run) {
      FA_RUN_OR_SKIP(run_backward(GetParam(), p));
      for (auto [name, first, again] : {std::tuple{"dq", &dq, &p.dq}, {"dk", &dk, &p.dk}, {"dv", &dv, &p.dv}}) {
        EXPECT_EQ(0, std::memcmp(first->storage(), again->storage(), first->storage_bytes()))
            << name << " differs between two deterministic runs of " << c.name();
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, Edge, ::testing::ValuesIn(all_backends()),
                         [](const ::testing::TestParamInfo<Backend>& info) { return info.param.family; });

}  // namespace
}  // namespace fa_test
