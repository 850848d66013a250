#include "support/seed.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

namespace fa_test {

uint64_t process_seed() {
  static const uint64_t seed = [] {
    if (const char* s = std::getenv("FLASHATTN_TEST_SEED")) return static_cast<uint64_t>(std::strtoull(s, nullptr, 10));
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }();
  return seed;
}

uint64_t test_seed() {
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the test's full name
  if (const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info()) {
    std::string name = std::string(t->test_suite_name()) + "." + t->name();
    for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  }
  return process_seed() ^ h;
}

namespace {
std::map<std::string, std::string>& flags() {
  static std::map<std::string, std::string> all;
  return all;
}
}  // namespace

std::string test_flag(const std::string& name, const std::string& fallback) {
  const auto it = flags().find(name);
  return it == flags().end() ? fallback : it->second;
}
void set_test_flag(const std::string& name, const std::string& value) { flags()[name] = value; }

}  // namespace fa_test
