// The differential sweep: random valid configurations on every kernel family, forward and backward,
// against the float64 reference by the error rule. Head dims include odd multiples of 8, GQA and
// MQA ratios, windows, softcap, varlen batches with empty sequences, seqlen_q ≠ seqlen_k, every
// dtype the family takes. Flags (tests/support/main.cpp passes the rest to GoogleTest):
//   --sweep-configs=N   configurations per family (default 60: CI's share; the GPU check runs 10000)
//   --sweep-seed=S      the first configuration's seed (default: the test seed); config i uses S + i
//   --sweep-report=F    append one JSON line per failing configuration, and a summary line, to F
// A failure names the configuration's seed, which replays it alone with --sweep-configs=1.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <array>
#include <cmath>
#include <random>
#include <string>

#include "support/check.hpp"
#include "support/seed.hpp"

namespace fa_test {

namespace {

using namespace flashattn;

// One random valid configuration. Sizes are small (the float64 reference runs on the CPU) and
// skewed towards tiny ones, where edge cases live.
Case random_case(std::mt19937_64& rng, Device device) {
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  auto length = [&]() { return chance(0.15) ? pick(0, 3) : static_cast<int64_t>(std::exp2(pick(0, 80) / 10.0)); };

  const int64_t heads_kv = pick(1, 3);
  const int64_t group = std::array<int64_t, 6>{1, 1, 2, 3, 4, 8}[pick(0, 5)];
  const int64_t hdim_qk = 8 * (chance(0.5) ? pick(1, 32) : std::array<int64_t, 5>{8, 12, 16, 24, 32}[pick(0, 4)]);
  const int64_t hdim_v = chance(0.8) ? hdim_qk : 8 * pick(1, 32);
  Case c;
  if (chance(0.3)) {
    std::vector<int32_t> lq, lk;
    const int64_t n = pick(1, 4);
    for (int64_t i = 0; i < n; ++i) {
      lq.push_back(static_cast<int32_t>(chance(0.2) ? 0 : length()));
      lk.push_back(static_cast<int32_t>(chance(0.2) ? 0 : length()));
    }
    c = Case::varlen(lq, lk, heads_kv * group, heads_kv, hdim_qk, hdim_v);
  } else {
    const int64_t sq = length();
    c = Case::padded(pick(1, 3), sq, chance(0.3) ? sq : length(), heads_kv * group, heads_kv, hdim_qk, hdim_v);
  }
  const DType gpu_types[] = {DType::f16, DType::bf16};
  const DType cpu_types[] = {DType::f32, DType::f16, DType::bf16};
  c = c.with(device == Device::cpu ? cpu_types[pick(0, 2)] : gpu_types[pick(0, 1)]);
  switch (pick(0, 4)) {
    case 0: c = c.causal_mask(); break;
    case 1: c = c.window(pick(-1, 40), pick(-1, 40)); break;
    case 2: c = c.causal_mask().window(pick(0, 40), 0); break;
    default: break;
  }
  if (chance(0.2)) c = c.cap(static_cast<float>(pick(1, 50)));
  if (chance(0.15)) c = c.scale(static_cast<float>(pick(-20, 40)) / 100.f);
  if (chance(0.15)) c = c.det();
  if (chance(0.2)) c = c.layout(chance(0.5) ? Strides::padded : Strides::permuted);
  return c;
}

void report_line(const std::string& line) {
  const std::string path = test_flag("sweep-report", "");
  if (path.empty()) return;
  if (FILE* f = std::fopen(path.c_str(), "a")) {
    std::fprintf(f, "%s\n", line.c_str());
    std::fclose(f);
  }
}

class Sweep : public ::testing::TestWithParam<Backend> {};

TEST_P(Sweep, RandomConfigurationsMatchTheReference) {
  const Backend backend = GetParam();
  FA_REQUIRE_BACKEND(backend);
  if (!backend.has_forward) {
    GTEST_SKIP() << backend.family << " has no forward entry (the KV-cache call only; kvcache_test covers it)";
  }
  const int64_t configs = std::stoll(test_flag("sweep-configs", "60"));
  const uint64_t given = std::stoull(test_flag("sweep-seed", "0"));
  const uint64_t first = given != 0 ? given : process_seed();
  int64_t ran = 0, unsupported = 0, failed = 0;
  for (int64_t i = 0; i < configs; ++i) {
    std::mt19937_64 rng(first + i);
    Case c = random_case(rng, backend.device);
    c.with_lse = true;
    Rng inputs(first + i);
    Problem p = make_problem(c, inputs);
    const bool failed_before = HasFailure();
    const CallResult f = run_forward(backend, p);
    if (f.support.code == StatusCode::not_supported) {
      ++unsupported;
      continue;
    }
    ++ran;
    EXPECT_TRUE(f.status.ok() && f.device_error.empty()) << c.name() << ": " << f.status.message << f.device_error;
    expect_forward_matches(p);
    CallResult b = run_backward(backend, p);
    if (b.support.code == StatusCode::not_supported) {
      b = run_backward(Backend::any(backend.device), p);  // a forward-only family: the backward "auto" picks
    }
    EXPECT_TRUE(b.status.ok() && b.device_error.empty()) << c.name() << ": " << b.status.message << b.device_error;
    expect_backward_matches(p);
    if (HasFailure() && !failed_before) {
      ++failed;
      ADD_FAILURE() << "configuration " << c.name() << " failed: replay with --sweep-seed=" << first + i
                    << " --sweep-configs=1";
      report_line("{\"family\": \"" + backend.family + "\", \"seed\": " + std::to_string(first + i) + ", \"case\": \"" +
                  c.name() + "\"}");
      if (failed >= 20) break;  // enough to go on; the report says so
    }
  }
  const std::string summary = "{\"family\": \"" + backend.family + "\", \"first_seed\": " + std::to_string(first) +
                              ", \"configs\": " + std::to_string(configs) + ", \"ran\": " + std::to_string(ran) +
                              ", \"unsupported\": " + std::to_string(unsupported) +
                              ", \"failed\": " + std::to_string(failed) + "}";
  std::printf("[  SWEEP   ] %s\n", summary.c_str());
  report_line(summary);
  EXPECT_GT(ran, 0) << "no configuration ran on " << backend.family;
}

INSTANTIATE_TEST_SUITE_P(Families, Sweep, ::testing::ValuesIn(all_backends()),
                         [](const ::testing::TestParamInfo<Backend>& info) { return info.param.family; });

}  // namespace
}  // namespace fa_test
