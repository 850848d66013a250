// GPU-only differential cases at larger sizes (sequences up to 16k), compared on sampled rows:
// the reference computes lse and D of every query row, then only the sampled rows and columns.
// They skip on machines without a CUDA device.
#include <gtest/gtest.h>

#include <tuple>

#include "support/check.hpp"

namespace fa_test {
namespace {

using flashattn::DType;

std::vector<Case> large_cases() {
  return {
      Case::padded(1, 16384, 16384, 2, 1, 128).with(DType::bf16).causal_mask().sample(64, 64),
      Case::padded(1, 8192, 8192, 2, 2, 64).with(DType::f16).sample(64, 64),
      Case::padded(2, 4096, 16384, 4, 2, 256).with(DType::bf16).window(1024, 0).sample(48, 48),
      Case::padded(1, 16384, 4096, 2, 1, 192, 128).with(DType::bf16).causal_mask().sample(64, 64),
      Case::varlen({16000, 3000, 1, 0}, {16000, 5000, 8000, 77}, 2, 1, 128)
          .with(DType::bf16)
          .causal_mask()
          .layout(Strides::padded)
          .sample(64, 64),
      Case::padded(4, 2048, 2048, 8, 2, 96).with(DType::f16).cap(30.f).causal_mask().sample(64, 64),
  };
}

class Large : public ::testing::TestWithParam<Case> {};

TEST_P(Large, Forward) {
  FA_REQUIRE_BACKEND(Backend::any(flashattn::Device::cuda));
  Rng rng;
  Problem p = make_problem(GetParam(), rng);
  FA_RUN_OR_SKIP(run_forward(Backend::any(flashattn::Device::cuda), p));
  expect_forward_matches(p);
}

TEST_P(Large, Backward) {
  FA_REQUIRE_BACKEND(Backend::any(flashattn::Device::cuda));
  Rng rng;
  Problem p = make_problem(GetParam(), rng);
  FA_RUN_OR_SKIP(run_forward(Backend::any(flashattn::Device::cuda), p));
  FA_RUN_OR_SKIP(run_backward(Backend::any(flashattn::Device::cuda), p));
  expect_backward_matches(p);
}

INSTANTIATE_TEST_SUITE_P(Gpu, Large, ::testing::ValuesIn(large_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return "cuda_" + info.param.name(); });

}  // namespace
}  // namespace fa_test
