// The tests' main: GoogleTest plus a listener that prints how to replay a failed test's inputs.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/testing.hpp"
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

// A knob's flag --FLAG=NAME (backend/testing.hpp's tables): true when argv_i is that flag, after
// `set` took the value; a name not in the table ends the binary (exit 2) with the choices.
template <class Value, std::size_t N>
bool take_named_knob(const char* argv_i, const char* flag, const flashattn::testing::Named<Value> (&table)[N],
                     void (*set)(Value)) {
  const std::size_t n = std::strlen(flag);
  if (std::strncmp(argv_i, flag, n) != 0 || argv_i[n] != '=') return false;
  const Value* value = flashattn::testing::value_named(table, argv_i + n + 1);
  if (value == nullptr) {
    std::fprintf(stderr, "%s: \"%s\" is not one of %s\n", flag, argv_i + n + 1,
                 flashattn::testing::names_of(table).c_str());
    std::exit(2);
  }
  set(*value);
  std::printf("[  KNOBS   ] %s\n", argv_i);
  return true;
}

// One of the test-only flags (backend/testing.hpp's knobs, sweep_test's and fuzz_test's own): true
// when argv_i is one, after it took effect. --sms=N plans GPU grids for N multiprocessors (the
// backward's split tail on small problems); --smem-optin=BYTES plans tiles for that much shared
// memory per block (163 KB: the A100's tiles on a Hopper GPU); --cpu-products=auto|f32|bf16 forces the
// CPU backend's products for bf16 inputs, --kvcache-route=auto|forward|decode the decode family's
// route for a KV-cache call, --decode-loads=auto|cp_async|tma how the GPU decode kernel loads
// K/V ("auto": the library's own choice, the default).
bool take_test_flag(const char* argv_i, flashattn::testing::DeviceOverrides* o) {
  namespace t = flashattn::testing;
  if (std::strncmp(argv_i, "--sms=", 6) == 0) {
    o->num_sms = std::atoi(argv_i + 6);
    return true;
  }
  if (std::strncmp(argv_i, "--smem-optin=", 13) == 0) {
    o->smem_optin = std::atoi(argv_i + 13);
    return true;
  }
  if (take_named_knob(argv_i, "--cpu-products", t::kCpuProductsNames, t::set_cpu_products) ||
      take_named_knob(argv_i, "--kvcache-route", t::kKVCacheRouteNames, t::set_kvcache_route) ||
      take_named_knob(argv_i, "--decode-loads", t::kDecodeLoadsNames, t::set_decode_loads)) {
    return true;
  }
  const char* eq = std::strchr(argv_i, '=');
  if (eq == nullptr || (std::strncmp(argv_i, "--sweep-", 8) != 0 && std::strncmp(argv_i, "--fuzz-", 7) != 0)) {
    return false;
  }
  fa_test::set_test_flag(std::string(argv_i + 2, static_cast<std::size_t>(eq - argv_i - 2)), eq + 1);
  return true;
}

// Takes the test-only flags out of argv (GoogleTest sees the rest) and sets the device overrides.
void take_test_flags(int* argc, char** argv) {
  flashattn::testing::DeviceOverrides o;
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    if (!take_test_flag(argv[i], &o)) argv[kept++] = argv[i];
  }
  *argc = kept;
  if (o.num_sms > 0 || o.smem_optin > 0) {
    std::printf("[  KNOBS   ] planning as if the GPU had %d SMs (0: its own) and %d bytes of opt-in shared memory "
                "(0: its own)\n", o.num_sms, o.smem_optin);
  }
  flashattn::testing::set_device_overrides(o);
}

}  // namespace

int main(int argc, char** argv) {
  take_test_flags(&argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::UnitTest::GetInstance()->listeners().Append(new SeedOnFailure);
  return RUN_ALL_TESTS();
}
