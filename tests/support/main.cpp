// The tests' main: GoogleTest plus a listener that prints how to replay a failed test's inputs.
#include <gtest/gtest.h>

#include <cstdio>

#include "support/seed.hpp"

namespace {

class SeedOnFailure : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo&) override {
    ::testing::Test::RecordProperty("seed", std::to_string(fa_test::process_seed()));
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (!info.result()->Failed()) return;
    std::printf("[   SEED   ] random inputs of %s.%s: replay with FLASHATTN_TEST_SEED=%llu --gtest_filter='%s.%s'\n",
                info.test_suite_name(), info.name(), static_cast<unsigned long long>(fa_test::process_seed()),
                info.test_suite_name(), info.name());
    std::fflush(stdout);
  }
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::UnitTest::GetInstance()->listeners().Append(new SeedOnFailure);
  return RUN_ALL_TESTS();
}
