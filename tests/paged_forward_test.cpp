// The paged varlen forward (flash-attn's flash_attn_varlen_func with block_table, "paged prefill")
// on every backend: k and v are page pools addressed through block_table, checked against the
// float64 reference on the same keys gathered into packed rows. Page sizes 1 … 256, pages shuffled
// over the pool, rows no sequence uses NaN, block_table entries past a sequence's pages out of
// range (never read). A paged call gives bitwise the packed call's out and lse (the same tiles in
// the same order). The cpu and sm80 families run every page size; sm90 those that make up whole key
// blocks (multiples of 16 that divide the block, or multiples of it) and refuses the others by name
// (not_supported: skipped with its reason), which "auto" then runs on sm80.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <stdexcept>
#include <tuple>

#include "support/check.hpp"

namespace fa_test {
namespace {

using flashattn::DType;

// Sequences shorter and longer than a page, empty ones, GQA, masks, every dtype and layout.
std::vector<Case> paged_cases() {
  std::vector<Case> v;
  int i = 0;
  for (int64_t page : {1, 3, 16, 64, 256}) {
    const DType dt = i % 3 == 0 ? DType::bf16 : (i % 3 == 1 ? DType::f16 : DType::f32);
    const Case c = Case::varlen({70, 1, 0, 130}, {300, 77, 5, 513}, 4, 2, 64).with(dt).paged(page);
    v.push_back(c);
    v.push_back(c.causal_mask().layout(i % 2 ? Strides::padded : Strides::permuted));
    ++i;
  }
  v.push_back(Case::varlen({40, 9}, {40, 100}, 2, 1, 128, 64).paged(16).with(DType::f32).window(8, 0));
  v.push_back(Case::varlen({33, 17}, {33, 0}, 4, 4, 32).paged(3).cap(5.f).no_lse());
  v.push_back(Case::varlen({129, 64}, {129, 64}, 2, 2, 64).paged(64).extra(3).causal_mask());
  // Head dims whose rows of 16-byte chunks do not divide a warp (96, and 80 rounded up to it).
  v.push_back(Case::varlen({70, 130}, {300, 513}, 4, 2, 96).paged(16).causal_mask());
  v.push_back(Case::varlen({33, 200}, {90, 200}, 2, 1, 80).paged(3).with(DType::f16));
  // The widest tiles: D = 256 (loaded as two plays of the block's threads) and 192 (a lookup per chunk).
  v.push_back(Case::varlen({70, 129}, {130, 257}, 2, 1, 256).paged(16).causal_mask());
  v.push_back(Case::varlen({65, 3}, {200, 64}, 2, 2, 192).paged(5).with(DType::f16));
  // The sm90 kernels' page walk (one TMA box per page of a key block, or per block of a page):
  // pages of 16 to 128 keys against 128-key (D = 128) and 64-key (D = 256) blocks, sequences that
  // end inside a block and a page, an unmasked call on the masked tile.
  for (int64_t page : {16, 32, 128}) {
    v.push_back(Case::varlen({200, 64, 1}, {333, 128, 700}, 4, 2, 128).paged(page).with(DType::bf16));
    v.push_back(Case::varlen({70, 150}, {257, 150}, 2, 1, 256).paged(page).causal_mask());
  }
  return v;
}

std::vector<Case> all_cases() {
  std::vector<Case> all = paged_cases();
  std::set<std::string> names;
  for (const Case& c : all) {
    if (!names.insert(c.name()).second) throw std::logic_error("duplicate paged case " + c.name());
  }
  return all;
}

using Param = std::tuple<Backend, Case>;
class PagedForward : public ::testing::TestWithParam<Param> {};

TEST_P(PagedForward, MatchesReferenceOnGatheredKeys) {
  const auto& [backend, c] = GetParam();
  FA_REQUIRE_BACKEND(backend);
  Rng rng;
  Problem p = make_problem(c, rng);
  FA_RUN_OR_SKIP(run_forward(backend, p));
  expect_forward_matches(p);  // the reference reads p's packed keys, the call read the pages
}

INSTANTIATE_TEST_SUITE_P(All, PagedForward,
                         ::testing::Combine(::testing::ValuesIn(all_backends()), ::testing::ValuesIn(all_cases())),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::string(to_string(std::get<0>(info.param))) + "_" + std::get<1>(info.param).name();
                         });

// Same tiles in the same order: a paged call gives bitwise the packed call's out and lse, at every
// page size and in every dtype (f32 reads whole pages in place, and gathers across page ends).
class PagedEqualsPacked : public ::testing::TestWithParam<std::tuple<Backend, int64_t, DType>> {};

TEST_P(PagedEqualsPacked, Bitwise) {
  const auto& [backend, page, dtype] = GetParam();
  FA_REQUIRE_BACKEND(backend);
  const Case packed = Case::varlen({200, 1, 77, 300}, {300, 1, 77, 512}, 8, 2, 64).with(dtype).causal_mask();
  const uint64_t seed = Rng().next();
  Rng r1(seed), r2(seed);
  Problem a = make_problem(packed, r1), b = make_problem(packed.paged(page), r2);
  FA_RUN_OR_SKIP(run_forward(backend, a));
  FA_RUN_OR_SKIP(run_forward(backend, b));
  ASSERT_EQ(a.out.storage_bytes(), b.out.storage_bytes());
  EXPECT_EQ(std::memcmp(a.out.storage(), b.out.storage(), a.out.storage_bytes()), 0) << "out differs";
  EXPECT_EQ(std::memcmp(a.lse.storage(), b.lse.storage(), a.lse.storage_bytes()), 0) << "lse differs";
}

INSTANTIATE_TEST_SUITE_P(All, PagedEqualsPacked,
                         ::testing::Combine(::testing::ValuesIn(all_backends()), ::testing::Values(1, 3, 16, 64, 256),
                                            ::testing::Values(DType::bf16, DType::f32)),
                         [](const ::testing::TestParamInfo<std::tuple<Backend, int64_t, DType>>& info) {
                           return std::string(to_string(std::get<0>(info.param))) + "_page" +
                                  std::to_string(std::get<1>(info.param)) + "_" +
                                  flashattn::to_string(std::get<2>(info.param));
                         });

// A CUDA family that runs the packed call either runs the paged one or refuses it by name (never
// runs the pools as if they were packed keys): sm80 runs any page size, sm90 pages that make up
// whole key blocks (16 here) and refuses 4 by name; "auto" picks the cpu family for host tensors.
TEST(PagedForwardPath, CudaFamiliesRunOrRefuseByName) {
  Rng rng;
  for (const int64_t page : {4, 16}) {
    Problem p = make_problem(Case::varlen({5, 9}, {20, 7}, 2, 1, 64).with(DType::bf16).paged(page), rng);
    DeviceMirror host(Backend::host());
    EXPECT_EQ(flashattn::forward_path(p.forward_args(host)), "cpu");
    for (const std::string& family : flashattn::families()) {
      const Backend backend{family, flashattn::Device::cuda};
      if (flashattn::family_device(family) != flashattn::Device::cuda || !unavailable_reason(backend).empty()) continue;
      DeviceMirror device(backend);
      flashattn::ForwardArgs packed = p.packed_forward_args(device), paged = p.forward_args(device);
      packed.path = paged.path = family;
      if (!flashattn::supports(packed).ok()) continue;
      const flashattn::Status s = flashattn::supports(paged);
      if (family == "sm80" || page == 16) {
        EXPECT_TRUE(s.ok()) << family << ", page " << page << ": " << s.message;
        continue;
      }
      if (s.ok()) continue;
      EXPECT_EQ(s.code, flashattn::StatusCode::not_supported) << family << ": " << s.message;
      EXPECT_NE(s.message.find("block_table"), std::string::npos) << family << ": " << s.message;
    }
  }
}

}  // namespace
}  // namespace fa_test
