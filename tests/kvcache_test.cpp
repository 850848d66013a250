// The KV-cache call (kvcache_forward) on every backend against the float64 oracle that appends,
// rotates and attends itself (reference::kvcache_forward): out by the error rule, lse, the cache
// after the call (old rows untouched, appended rows as the reference has them), inputs unchanged.
// Contiguous and paged caches (page sizes 1 … 256, pages shuffled over the pool), cache_batch_idx,
// append of 0, 1, 4 rows, rotary (interleaved, half-split, rotary_dim < hdim), causal and window
// with 1 and 4 query rows, softcap, GQA/MQA, hdim_v ≠ hdim_qk, left-padded caches (cache_leftpad);
// and calls of 128 query rows or more, which the decode family runs through the forward (its route
// is also forced onto every other case, KVCacheForwardRoute). A family without a KV-cache direction
// skips with its reason.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <set>
#include <stdexcept>
#include <tuple>

#include "backend/testing.hpp"
#include "support/check.hpp"
#include "support/kvcache_problem.hpp"

namespace fa_test {
namespace {

using flashattn::DType;

// Shapes and dtypes: lengths 0 … 513 against caches with room to spare, GQA, MQA, head dims.
std::vector<KVCase> shape_cases() {
  return {
      KVCase::decode({5, 17, 0}, 40, 4, 2, 64),
      KVCase::decode({130}, 200, 8, 1, 128).with(DType::f16),
      KVCase::decode({64, 1, 65}, 70, 6, 2, 32).with(DType::f32),
      KVCase::decode({300, 77, 513}, 600, 4, 4, 64).q_rows(4),
      KVCase::decode({33, 50}, 60, 2, 1, 192, 128).with(DType::f16),
      KVCase::decode({20, 9}, 40, 2, 2, 64, 32).no_lse(),
      KVCase::decode({0, 0}, 8, 2, 1, 64),  // empty sequences: out 0, lse +inf
      KVCase::decode({12, 12}, 12, 4, 2, 64).full_cache(),
      // Large groups: 16 query heads on one kv head at 4 queries (64 packed rows on the CPU), and 16
      // per kv head over 2000 keys (the CPU's key ranges merged).
      KVCase::decode({700, 1000}, 1024, 16, 1, 64).q_rows(4),
      KVCase::decode({2000}, 2048, 32, 2, 128).with(DType::f32),
  };
}

// Paged caches at every page size, with appends and rotary (the addressing's hardest case).
std::vector<KVCase> paged_cases() {
  std::vector<KVCase> v;
  int i = 0;
  for (int64_t page : {1, 3, 8, 16, 32, 64, 256}) {
    const KVCase c = KVCase::decode({300, 77, 0, 513}, 520, 4, 2, 64).paged(page).with(i % 2 ? DType::f16 : DType::bf16);
    v.push_back(c);
    v.push_back(c.append(4).rotate(i % 2 ? Rotary::interleaved : Rotary::half_split).causal_mask().q_rows(4));
    ++i;
  }
  v.push_back(KVCase::decode({5, 40}, 48, 2, 1, 128, 64).paged(16).append(1).with(DType::f32).window(8, 0));
  // Head dims under the GPU instance's (columns past them zero-filled by the loads): 192/128 on the
  // 256 instance, 32 on the 64 one, at pages smaller than a key block.
  v.push_back(KVCase::decode({200, 33}, 256, 4, 2, 192, 128).paged(16));
  v.push_back(KVCase::decode({100, 7}, 128, 2, 1, 32).paged(8).with(DType::f16).append(2));
  return v;
}

// Appends of 0, 1 and 4 rows, with and without rotary (both layouts, rotary_dim < hdim), and
// with cache_batch_idx.
std::vector<KVCase> append_cases() {
  std::vector<KVCase> v;
  const KVCase base = KVCase::decode({10, 0, 31}, 40, 4, 2, 64);
  for (int64_t n : {0, 1, 4}) {
    v.push_back(base.append(n));
    v.push_back(base.append(n).rotate(Rotary::interleaved).q_rows(n ? n : 1));
    v.push_back(base.append(n).rotate(Rotary::half_split, 32).causal_mask().q_rows(4).with(DType::f16));
    v.push_back(base.append(n).indexed().rotate(Rotary::interleaved, 16).with(DType::f32));
  }
  v.push_back(base.indexed().q_rows(4).causal_mask());
  return v;
}

// Left-padded caches (cache_leftpad): keys from row pad on, padding rows NaN; with appends, rotary
// at cache rows, masks against the sequence's own length, cache_batch_idx.
std::vector<KVCase> leftpad_cases() {
  const KVCase base = KVCase::decode({10, 0, 31, 100}, 300, 4, 2, 64).left_padded({0, 7, 64, 130});
  return {base, base.append(2).rotate(Rotary::interleaved).causal_mask().q_rows(2),
          base.append(1).indexed().window(16, 0).with(DType::f16),
          KVCase::decode({200}, 600, 8, 1, 128).left_padded({333}).append(4).rotate(Rotary::half_split, 32).with(DType::f32)};
}

// Masks (causal, windows) with 1 and 4 query rows, and softcap.
std::vector<KVCase> mask_cases() {
  std::vector<KVCase> v;
  for (int64_t sq : {1, 4}) {
    const KVCase c = KVCase::decode({50, 3, 97}, 100, 4, 2, 64).q_rows(sq).append(2);
    v.push_back(c.causal_mask());
    v.push_back(c.window(16, 0));
    v.push_back(c.window(10, 2).with(DType::f16));
    v.push_back(c.window(-1, 1).rotate(Rotary::half_split));
    v.push_back(c.cap(5.f).causal_mask().rotate(Rotary::interleaved, 32));
    v.push_back(c.cap(30.f).paged(16).with(DType::f32));
  }
  return v;
}

// Chunked prefill against a cache: 128 query rows or more, which the decode family gives to the
// forward (sm90 where the cache's pages make whole key blocks: a contiguous capacity of a multiple of
// 128 keys, pages of 16, 64, 256; sm80 for the rest), with appends of the whole chunk, rotary,
// cache_batch_idx, masks, softcap, GQA/MQA, hdim_v ≠ hdim_qk, and more query rows than keys.
std::vector<KVCase> long_query_cases() {
  const KVCase chunk = KVCase::decode({300, 77, 0}, 768, 8, 2, 128).q_rows(128).append(128).causal_mask();
  return {
      chunk,
      chunk.paged(16).rotate(Rotary::half_split),
      chunk.paged(64).with(DType::f16),
      chunk.paged(256).window(100, 0),
      KVCase::decode({500, 1}, 700, 8, 1, 64).q_rows(200).append(200).causal_mask().rotate(Rotary::interleaved, 32),
      KVCase::decode({40, 250, 3}, 512, 4, 4, 64).q_rows(160).indexed().cap(20.f).no_lse(),
      KVCase::decode({5, 0}, 256, 4, 2, 64).q_rows(130).causal_mask(),
      KVCase::decode({90, 200}, 384, 4, 2, 192, 128).q_rows(128).append(64).with(DType::f16).causal_mask(),
  };
}

std::vector<KVCase> all_cases() {
  std::vector<KVCase> all;
  for (auto list : {shape_cases(), paged_cases(), append_cases(), mask_cases(), leftpad_cases(), long_query_cases()}) {
    all.insert(all.end(), list.begin(), list.end());
  }
  std::set<std::string> names;
  for (const KVCase& c : all) {
    if (!names.insert(c.name()).second) throw std::logic_error("duplicate KV-cache case " + c.name());
  }
  return all;
}

using Param = std::tuple<Backend, KVCase>;
class KVCache : public ::testing::TestWithParam<Param> {};

TEST_P(KVCache, MatchesReference) {
  const auto& [backend, c] = GetParam();
  FA_REQUIRE_BACKEND(backend);
  Rng rng;
  KVProblem p = make_kv_problem(c, rng);
  const KVExpected e = expect_of(p);  // before the call appends into the cache
  FA_RUN_OR_SKIP(run_kvcache(backend, p));
  expect_kvcache_matches(p, e);
}

INSTANTIATE_TEST_SUITE_P(All, KVCache, ::testing::Combine(::testing::ValuesIn(all_backends()),
                                                          ::testing::ValuesIn(all_cases())),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::string(to_string(std::get<0>(info.param))) + "_" + std::get<1>(info.param).name();
                         });

// Every case again with the decode family's route forced onto the forward wherever the forward can
// express the call (not cache_leftpad, not a num_splits asked of the decode kernel): the route's
// sequence index, its one-page tables over a contiguous cache and its strides, at every shape.
namespace knobs = flashattn::testing;
// A test knob set for one scope and restored after it.
template <class Value, Value (*kGet)(), void (*kSet)(Value)>
class KnobForced {
 public:
  explicit KnobForced(Value v) : before_(kGet()) { kSet(v); }
  ~KnobForced() { kSet(before_); }
  KnobForced(const KnobForced&) = delete;
  KnobForced& operator=(const KnobForced&) = delete;

 private:
  Value before_;
};
using RouteForced = KnobForced<knobs::KVCacheRoute, knobs::kvcache_route, knobs::set_kvcache_route>;
using LoadsForced = KnobForced<knobs::DecodeLoads, knobs::decode_loads, knobs::set_decode_loads>;

class KVCacheForwardRoute : public ::testing::TestWithParam<Param> {
 protected:
  // The case on the GPU family with the decode family's route forced to `route`.
  void expect_matches_on(knobs::KVCacheRoute route) {
    const auto& [backend, c] = GetParam();
    if (backend.on_host()) GTEST_SKIP() << "the route is the decode family's";
    FA_REQUIRE_BACKEND(backend);
    const RouteForced forced(route);
    Rng rng;
    KVProblem p = make_kv_problem(c, rng);
    const KVExpected e = expect_of(p);
    FA_RUN_OR_SKIP(run_kvcache(backend, p));
    expect_kvcache_matches(p, e);
  }
};

TEST_P(KVCacheForwardRoute, MatchesReference) { expect_matches_on(knobs::KVCacheRoute::forward); }

INSTANTIATE_TEST_SUITE_P(All, KVCacheForwardRoute, ::testing::Combine(::testing::ValuesIn(all_backends()),
                                                                      ::testing::ValuesIn(all_cases())),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::string(to_string(std::get<0>(info.param))) + "_" + std::get<1>(info.param).name();
                         });

// The long-query cases again with the route forced off: the decode kernel keeps every query count.
TEST_P(KVCacheForwardRoute, DecodeKernelStillTakesLongQueries) {
  if (std::get<1>(GetParam()).seqlen_q < 64) GTEST_SKIP() << "KVCache.MatchesReference runs it on the decode kernel";
  expect_matches_on(knobs::KVCacheRoute::decode);
}

// Every case on the decode kernel with its K/V loads forced to `loads` (the route forced off so
// long queries stay on the kernel). Skipped where the GPU, the build or the cache's layout has none.
void expect_matches_with_loads(const KVCase& c, knobs::DecodeLoads loads) {
  const Backend backend{"decode", flashattn::Device::cuda};
  FA_REQUIRE_BACKEND(backend);
  const RouteForced route(knobs::KVCacheRoute::decode);
  const LoadsForced forced(loads);
  Rng rng;
  KVProblem p = make_kv_problem(c, rng);
  const KVExpected e = expect_of(p);
  FA_RUN_OR_SKIP(run_kvcache(backend, p));
  expect_kvcache_matches(p, e);
}

// TMA boxes issued by a producer warp (sm_90).
class KVCacheTmaLoads : public ::testing::TestWithParam<KVCase> {};
TEST_P(KVCacheTmaLoads, MatchesReference) { expect_matches_with_loads(GetParam(), knobs::DecodeLoads::tma); }
INSTANTIATE_TEST_SUITE_P(All, KVCacheTmaLoads, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<KVCase>& info) { return info.param.name(); });

// cp.async chunks copied by a producer warpgroup (sm_90), contiguous caches too.
class KVCacheProducerLoads : public ::testing::TestWithParam<KVCase> {};
TEST_P(KVCacheProducerLoads, MatchesReference) {
  expect_matches_with_loads(GetParam(), knobs::DecodeLoads::producer_cp_async);
}
INSTANTIATE_TEST_SUITE_P(All, KVCacheProducerLoads, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<KVCase>& info) { return info.param.name(); });

// A paged cache holding bitwise the same keys and values as a contiguous one gives bitwise the
// same out and lse on the same backend, at every page size (and appends the same rows).
class PagedEqualsContiguous : public ::testing::TestWithParam<std::tuple<Backend, int64_t>> {
 protected:
  // The contiguous call on `contiguous_loads`, the paged one on `paged_loads`.
  void expect_bitwise(knobs::DecodeLoads contiguous_loads, knobs::DecodeLoads paged_loads);
};

TEST_P(PagedEqualsContiguous, Bitwise) { expect_bitwise(knobs::DecodeLoads::automatic, knobs::DecodeLoads::automatic); }

// The same with the decode kernel's TMA loads, and with its cp.async producer (skipped where the
// GPU has none).
TEST_P(PagedEqualsContiguous, BitwiseWithTmaLoads) {
  expect_bitwise(knobs::DecodeLoads::tma, knobs::DecodeLoads::tma);
}
TEST_P(PagedEqualsContiguous, BitwiseWithProducerLoads) {
  expect_bitwise(knobs::DecodeLoads::producer_cp_async, knobs::DecodeLoads::producer_cp_async);
}

void PagedEqualsContiguous::expect_bitwise(knobs::DecodeLoads contiguous_loads, knobs::DecodeLoads paged_loads) {
  const auto& [backend, page] = GetParam();
  FA_REQUIRE_BACKEND(backend);
  const KVCase c = KVCase::decode({300, 1, 77, 512}, 520, 8, 2, 64).q_rows(4).append(3).rotate(Rotary::half_split)
                       .causal_mask();
  const uint64_t seed = Rng().next();
  Rng r1(seed), r2(seed);
  KVProblem contiguous = make_kv_problem(c, r1), paged = make_kv_problem(c.paged(page), r2);
  {
    const LoadsForced loads(contiguous_loads);
    FA_RUN_OR_SKIP(run_kvcache(backend, contiguous));
  }
  {
    const LoadsForced loads(paged_loads);
    FA_RUN_OR_SKIP(run_kvcache(backend, paged));
  }
  ASSERT_EQ(contiguous.out.storage_bytes(), paged.out.storage_bytes());
  EXPECT_EQ(std::memcmp(contiguous.out.storage(), paged.out.storage(), paged.out.storage_bytes()), 0) << "out differs";
  EXPECT_EQ(std::memcmp(contiguous.lse.storage(), paged.lse.storage(), paged.lse.storage_bytes()), 0) << "lse differs";
  int64_t differ = 0;
  for (int64_t b = 0; b < c.batch(); ++b) {
    for (int64_t t = 0; t < c.cache_lens[b] + 3; ++t) {
      for (int64_t h = 0; h < c.heads_kv; ++h) {
        const int64_t a = contiguous.cache_offset(contiguous.k_cache, b, t, h), z = paged.cache_offset(paged.k_cache, b, t, h);
        for (int64_t d = 0; d < c.hdim_qk; ++d) differ += contiguous.k_cache.get_at(a + d) != paged.k_cache.get_at(z + d);
      }
    }
  }
  EXPECT_EQ(differ, 0) << "the caches' logical keys differ after the call";
}

INSTANTIATE_TEST_SUITE_P(All, PagedEqualsContiguous,
                         ::testing::Combine(::testing::ValuesIn(all_backends()), ::testing::Values(1, 3, 16, 32, 64, 256)),
                         [](const ::testing::TestParamInfo<std::tuple<Backend, int64_t>>& info) {
                           return std::string(to_string(std::get<0>(info.param))) + "_page" +
                                  std::to_string(std::get<1>(info.param));
                         });

// The CPU's key ranges and its packed GQA rows follow from the shapes, not from the thread count:
// a decode call gives the same bits on 1, 2 and 3 threads (float and bf16 products).
struct ThreadsRestored {
  int before = omp_get_max_threads();
  ~ThreadsRestored() { omp_set_num_threads(before); }
};

TEST(CpuKVCacheThreads, SameBitsOnAnyThreadCount) {
  FA_REQUIRE_BACKEND(Backend::host());
  const ThreadsRestored restored;
  for (const DType dtype : {DType::f32, DType::bf16}) {
    const KVCase c = KVCase::decode({1500, 3, 700}, 1600, 8, 2, 64).q_rows(2).with(dtype).causal_mask();
    const uint64_t seed = Rng().next();
    std::vector<KVProblem> runs;
    for (const int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      Rng rng(seed);
      runs.push_back(make_kv_problem(c, rng));
      FA_RUN_OR_SKIP(run_kvcache(Backend::host(), runs.back()));
    }
    for (size_t i = 1; i < runs.size(); ++i) {
      EXPECT_EQ(std::memcmp(runs[0].out.storage(), runs[i].out.storage(), runs[0].out.storage_bytes()), 0)
          << to_string(dtype) << ": out differs between 1 and " << i + 1 << " threads";
      EXPECT_EQ(std::memcmp(runs[0].lse.storage(), runs[i].lse.storage(), runs[0].lse.storage_bytes()), 0)
          << to_string(dtype) << ": lse differs between 1 and " << i + 1 << " threads";
    }
  }
}

// Scratch on demand (WorkspaceAllocator): with `workspace` null the library plans the call once and
// asks the allocator for exactly the bytes kvcache_workspace_size reports (q rotated: every family
// needs workspace here); the result is the reference's. An allocator that fails fails the call by
// name before anything is written.
struct CountingAllocator {
  DeviceMirror* mirror;
  int calls = 0;
  std::size_t bytes = 0;
  bool fail = false;
  static void* allocate(std::size_t bytes, void* context) {
    auto* self = static_cast<CountingAllocator*>(context);
    ++self->calls;
    self->bytes = bytes;
    return self->fail ? nullptr : self->mirror->scratch(bytes);
  }
};

class KVCacheAllocator : public ::testing::TestWithParam<Backend> {};

TEST_P(KVCacheAllocator, GetsThePlannedBytesOnce) {
  const Backend backend = GetParam();
  FA_REQUIRE_BACKEND(backend);
  const KVCase c = KVCase::decode({30, 0, 61}, 70, 4, 2, 64).append(2).rotate(Rotary::half_split).q_rows(2);
  Rng rng;
  KVProblem p = make_kv_problem(c, rng);
  const KVExpected e = expect_of(p);
  p.out.poison();
  p.lse.poison();
  const std::vector<HostTensor*> inputs = {&p.q, &p.k_new, &p.v_new, &p.rotary_cos, &p.rotary_sin,
                                           &p.cache_seqlens, &p.block_table, &p.cache_batch_idx};
  for (HostTensor* t : {&p.out, &p.lse, &p.k_cache, &p.v_cache}) t->snapshot();
  for (HostTensor* t : inputs) {
    if (t->valid()) t->snapshot();
  }
  DeviceMirror m(backend);
  flashattn::KVCacheArgs a = p.args(m);
  a.path = backend.family;
  std::size_t planned = 0;
  const Status support = kvcache_workspace_size(a, &planned);
  if (support.code == StatusCode::not_supported) GTEST_SKIP() << support.message;
  ASSERT_TRUE(support.ok()) << support.message;
  ASSERT_GT(planned, 0u) << "rotary needs workspace on every family";

  CountingAllocator failing{&m};
  failing.fail = true;
  a.workspace_allocator = {&CountingAllocator::allocate, &failing};
  const Status refused = kvcache_forward(a);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message.find("workspace_allocator"), std::string::npos) << refused.message;
  ASSERT_EQ(m.synchronize(), "");
  for (HostTensor* t : {&p.k_cache, &p.v_cache}) {
    m.download(*t);
    EXPECT_TRUE(t->unchanged()) << "a call whose workspace failed wrote into the cache";
  }

  CountingAllocator counting{&m};
  a.workspace_allocator = {&CountingAllocator::allocate, &counting};
  const Status s = kvcache_forward(a);
  ASSERT_TRUE(s.ok()) << s.message;
  ASSERT_EQ(m.synchronize(), "");
  EXPECT_EQ(counting.calls, 1);
  EXPECT_EQ(counting.bytes, planned);
  for (HostTensor* t : {&p.out, &p.lse, &p.k_cache, &p.v_cache}) m.download(*t);
  for (HostTensor* t : inputs) {
    if (t->valid()) m.download(*t);
  }
  expect_kvcache_matches(p, e);
}

INSTANTIATE_TEST_SUITE_P(All, KVCacheAllocator, ::testing::ValuesIn(all_backends()),
                         [](const ::testing::TestParamInfo<Backend>& info) { return info.param.family; });

// A device family cannot read the index arrays on the host without a synchronization, so it clamps
// them (src/backend/params.hpp): garbage lengths, pages and cache rows give an unspecified result but
// never a fault, an error, or a byte written outside the caches' and outputs' views. The host
// families refuse such values instead (kvcache_bad_input_test.cpp). scripts/gpu_check.sh runs this
// case under compute-sanitizer's memcheck, which shows any read out of bounds.
class KVCacheBadIndices : public ::testing::TestWithParam<std::tuple<Backend, int64_t>> {
 protected:
  // Garbage lengths, pages or cache rows (and left padding, where `left_padded`) in a cache of
  // `capacity` keys per sequence: the call runs and writes nothing outside the views.
  void expect_clamped(int64_t capacity, bool left_padded) {
    const auto& [backend, page] = GetParam();
    if (backend.on_host()) GTEST_SKIP() << "host tensors: the index values are checked (kvcache_bad_input_test)";
    FA_REQUIRE_BACKEND(backend);
    KVCase c = KVCase::decode({300, 77, 0, 513}, capacity, 4, 2, 64).append(2).rotate(Rotary::interleaved).q_rows(2);
    c = page ? c.paged(page) : left_padded ? c.indexed().left_padded({0, 0, 0, 0}) : c.indexed();
    Rng rng;
    KVProblem p = make_kv_problem(c, rng);
    const int32_t huge = 1 << 30;
    const int32_t full = static_cast<int32_t>(capacity - 1);
    p.cache_seqlens.fill_i32({-7, huge, full, 3});  // negative, past the capacity, no room to append, fine
    if (page) {
      for (int64_t i : {int64_t{0}, int64_t{3}}) p.block_table.set({1, i}, -1);
      p.block_table.set({2, 0}, huge);
    } else {
      p.cache_batch_idx.fill_i32({-1, huge, 2, 0});
      // past the cached rows, negative, past the capacity, fine
      if (left_padded) p.cache_leftpad.fill_i32({huge, -5, static_cast<int32_t>(capacity + 80), 2});
    }
    FA_RUN_OR_SKIP(run_kvcache(backend, p));
    for (const HostTensor* t : {&p.out, &p.lse, &p.k_cache, &p.v_cache}) EXPECT_EQ(t->gap_bytes_changed(), 0);
  }
};

TEST_P(KVCacheBadIndices, ClampedOnTheDevice) { expect_clamped(520, true); }

// The same garbage through the forward route (contiguous caches without cache_leftpad, which the
// route leaves to the decode kernel; a capacity of whole 128-key blocks, so sm90 takes it): the
// sequence index clamps lengths and cache rows, the forward clamps pages.
TEST_P(KVCacheBadIndices, ClampedThroughTheForwardRoute) {
  const RouteForced forced(knobs::KVCacheRoute::forward);
  expect_clamped(640, false);
}

INSTANTIATE_TEST_SUITE_P(All, KVCacheBadIndices,
                         ::testing::Combine(::testing::ValuesIn(all_backends()), ::testing::Values(0, 16)),
                         [](const ::testing::TestParamInfo<std::tuple<Backend, int64_t>>& info) {
                           const int64_t page = std::get<1>(info.param);
                           return std::string(to_string(std::get<0>(info.param))) +
                                  (page ? "_page" + std::to_string(page) : std::string("_contiguous"));
                         });

}  // namespace
}  // namespace fa_test
