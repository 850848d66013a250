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

// --decode-loads=NAME: the GPU decode kernel's K/V loads (backend/testing.hpp's DecodeLoads).
struct DecodeLoadsName {
  const char* name;
  flashattn::testing::DecodeLoads loads;
  const char* said;
};
const DecodeLoadsName* decode_loads_named(const char* name) {
  static const DecodeLoadsName kNames[] = {
      {"cp_async", flashattn::testing::DecodeLoads::cp_async, "cp.async"},
      {"tma", flashattn::testing::DecodeLoads::tma, "TMA"},
      {"gather", flashattn::testing::DecodeLoads::gather, "the producer warp's cp.async gather (pages under a block)"}};
  for (const DecodeLoadsName& n : kNames) {
    if (std::strcmp(name, n.name) == 0) return &n;
  }
  return nullptr;
}

// The library's test-only knobs (backend/testing.hpp), as flags: --sms=N plans GPU grids for N
// multiprocessors (the backward's split tail on small problems); --smem-optin=BYTES plans tiles
// for that much shared memory per block (163 KB: the A100's tiles on a Hopper GPU);
// --cpu-products=f32|bf16 forces the CPU backend's products for bf16 inputs (default: its own choice);
// --decode-loads=cp_async|tma|gather forces how the GPU decode kernel loads K/V (default: its own choice).
void take_device_overrides(int* argc, char** argv) {
  flashattn::testing::DeviceOverrides o;
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    if (std::strncmp(argv[i], "--sms=", 6) == 0) {
      o.num_sms = std::atoi(argv[i] + 6);
    } else if (std::strncmp(argv[i], "--smem-optin=", 13) == 0) {
      o.smem_optin = std::atoi(argv[i] + 13);
    } else if (std::strcmp(argv[i], "--cpu-products=f32") == 0 || std::strcmp(argv[i], "--cpu-products=bf16") == 0) {
      const bool bf16 = std::strcmp(argv[i], "--cpu-products=bf16") == 0;
      flashattn::testing::set_cpu_products(bf16 ? flashattn::testing::CpuProducts::bf16
                                                : flashattn::testing::CpuProducts::f32);
      std::printf("[  KNOBS   ] the CPU backend multiplies bf16 inputs in %s\n", bf16 ? "bf16" : "float");
    } else if (std::strncmp(argv[i], "--decode-loads=", 15) == 0 && decode_loads_named(argv[i] + 15) != nullptr) {
      const DecodeLoadsName* l = decode_loads_named(argv[i] + 15);
      flashattn::testing::set_decode_loads(l->loads);
      std::printf("[  KNOBS   ] the decode kernel loads K/V with %s\n", l->said);
    } else if ((std::strncmp(argv[i], "--sweep-", 8) == 0 || std::strncmp(argv[i], "--fuzz-", 7) == 0) &&
               std::strchr(argv[i], '=') != nullptr) {
      const char* eq = std::strchr(argv[i], '=');  // sweep_test's and fuzz_test's own flags
      fa_test::set_test_flag(std::string(argv[i] + 2, static_cast<std::size_t>(eq - argv[i] - 2)), eq + 1);
    } else {
      argv[kept++] = argv[i];
    }
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
  take_device_overrides(&argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::UnitTest::GetInstance()->listeners().Append(new SeedOnFailure);
  return RUN_ALL_TESTS();
}
