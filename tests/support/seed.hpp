// Random inputs for the tests: a fresh seed per process (printed when a test fails), or the one
// given in FLASHATTN_TEST_SEED to reproduce a failure. Each test derives its own seed from the
// process seed and its full name, so `FLASHATTN_TEST_SEED=… --gtest_filter=…` replays one test.
#pragma once

#include <cstdint>
#include <random>
#include <string>

namespace fa_test {

uint64_t process_seed();  // FLASHATTN_TEST_SEED, or drawn once from std::random_device

// A test binary's own flags, --name=value (tests/support/main.cpp takes them off the command
// line before GoogleTest sees it); `fallback` when not given.
std::string test_flag(const std::string& name, const std::string& fallback);
void set_test_flag(const std::string& name, const std::string& value);
uint64_t test_seed();     // process_seed() mixed with the running test's full name

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  Rng() : Rng(test_seed()) {}
  double normal() { return normal_(engine_); }
  int64_t uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(engine_); }
  uint64_t next() { return engine_(); }

 private:
  std::mt19937_64 engine_;
  std::normal_distribution<double> normal_{0.0, 1.0};
};

}  // namespace fa_test
