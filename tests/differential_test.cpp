// Differential tests: every backend against the float64 reference, by the error rule (out, dq,
// dk, dv) and a small tolerance (lse), on many shapes and options. Each case runs on the CPU and on
// CUDA (which skips without a GPU, or with supports()'s reason, e.g. f32 on CUDA).
//
// To add a case, append it to one of the lists below; its name (and so the test's) is derived from
// its shape and options. Sizes are picked so the CPU run stays within minutes on two cores: long
// sequences only with one or two heads.
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <tuple>

#include "support/check.hpp"

namespace fa_test {
namespace {

using flashattn::DType;

constexpr DType kDtypes[] = {DType::bf16, DType::f16, DType::f32};
constexpr Strides kLayouts[] = {Strides::contiguous, Strides::padded, Strides::permuted};

// Every head dim in each dtype; masks and layouts vary along the list.
std::vector<Case> head_dim_cases() {
  std::vector<Case> v;
  int i = 0;
  for (int64_t d : {8, 40, 64, 96, 128, 192, 256}) {
    for (DType dt : kDtypes) {
      const int64_t heads_kv = (i / 2) % 3 == 0 ? 4 : ((i / 2) % 3 == 1 ? 2 : 1);
      Case c = Case::padded(2, 161 + 37 * (i % 4), 203 - 25 * (i % 3), 4, heads_kv, d).with(dt).layout(kLayouts[i % 3]);
      if (i % 2) c = c.causal_mask();
      v.push_back(c);
      ++i;
    }
  }
  // The CUDA backward's split tail at hdim 256 (tests/CMakeLists.txt plans it for 3 SMs: 5 key
  // blocks of 32 steps, the last 2 split in 3 parts; on a real GPU all 5 split).
  v.push_back(Case::padded(1, 1000, 300, 2, 1, 256).with(DType::bf16));
  // Its span split (bwd_params.cuh): 68 key blocks of 16 steps, on a real GPU all in spans of ~9
  // steps (most across two blocks), for 3 SMs the last 2 in spans of 11. And a small one for the
  // sanitizers (gpu_check.sh's split subset): 8 key blocks of 16 steps, for 3 SMs the last 2 in
  // spans of 11.
  v.push_back(Case::padded(1, 1000, 4352, 1, 1, 256).with(DType::bf16).sample(48, 48));
  v.push_back(Case::padded(1, 1000, 1000, 1, 1, 128).with(DType::f16));
  // The hdim-256 backward's cluster pairs (bwd_pair.cuh): 272 key blocks, on a real GPU 264 of them
  // whole, in pairs, the last 8 in spans; the 4352-key case above pairs its first 66 for 3 SMs. And
  // head dim 224 on that instance (the second CTA's half partly past hdim_qk), GQA 16/8: 256 blocks,
  // all whole.
  v.push_back(Case::padded(2, 300, 4352, 2, 2, 256).with(DType::bf16).sample(48, 48));
  v.push_back(Case::padded(1, 128, 2048, 16, 8, 224).with(DType::f16));
  // Pairs under a mask (each block also walks its partner's query tiles, masked whole for it): causal,
  // 256 key blocks of up to 32 query tiles, whole on a real GPU. Unpaired (blocks of 16 tiles or
  // fewer): causal at 1k and a window.
  v.push_back(Case::padded(1, 2048, 2048, 8, 8, 256).with(DType::bf16).causal_mask().sample(48, 48));
  v.push_back(Case::padded(1, 1024, 1024, 16, 16, 256).with(DType::bf16).causal_mask().sample(48, 48));
  v.push_back(Case::padded(1, 1024, 1024, 16, 16, 256).with(DType::f16).window(150, 40).sample(48, 48));
  return v;
}

// Sequence lengths 1 … ~1000, not multiples of the tiles, seqlen_q ≠ seqlen_k both ways.
std::vector<Case> seqlen_cases() {
  std::vector<Case> v;
  const std::pair<int64_t, int64_t> lens[] = {{1, 1},    {1, 300},   {300, 1},   {2, 3},     {17, 3},
                                              {3, 17},   {63, 65},   {65, 63},   {128, 128}, {129, 127},
                                              {255, 513}, {511, 200}, {1000, 1000}, {777, 1023}, {1023, 777},
                                              {1500, 1499}, {2065, 300}};
  int i = 0;
  for (auto [sq, sk] : lens) {
    const int64_t work = sq * sk;
    const int64_t heads = work > 500000 ? 2 : 4, batch = work > 100000 ? 1 : 2;
    const Case c = Case::padded(batch, sq, sk, heads, heads / 2, i % 3 ? 64 : 128).with(i % 2 ? DType::f16 : DType::bf16);
    v.push_back(c.causal_mask());
    if (work <= 1100000) v.push_back(c.layout(kLayouts[i % 3]));
    ++i;
  }
  // longer sequences, compared on sampled rows
  v.push_back(Case::padded(1, 2000, 1500, 1, 1, 64).with(DType::bf16).causal_mask().sample(48, 48));
  v.push_back(Case::padded(1, 3001, 2999, 2, 2, 128).with(DType::bf16).sample(48, 48));
  v.push_back(Case::padded(1, 4099, 4097, 2, 1, 64).with(DType::f16).window(700, 50).sample(64, 64));
  return v;
}

// Query heads per key/value head: 1, 2, 4, 3, 6, 8, 16 and 64, MQA (heads_kv = 1) among them; the
// large groups also varlen with empty sequences and seqlen_q ≠ seqlen_k (issue 14's classes).
std::vector<Case> gqa_cases() {
  std::vector<Case> v;
  const std::pair<int64_t, int64_t> heads[] = {{4, 4}, {4, 2}, {8, 2}, {6, 2}, {6, 1}, {8, 1}, {32, 2}, {16, 1}};
  int i = 0;
  for (auto [hq, hkv] : heads) {
    const DType dt = kDtypes[i % 3];
    v.push_back(Case::padded(1, 350, 411, hq, hkv, 64).with(dt).causal_mask().layout(kLayouts[(i + 1) % 3]));
    v.push_back(Case::padded(2, 197, 145, hq, hkv, 32).with(dt).window(20, 7));
    ++i;
  }
  v.push_back(Case::padded(1, 120, 120, 4, 1, 128).with(DType::bf16).det());
  v.push_back(Case::padded(1, 150, 170, 64, 1, 64).with(DType::bf16).causal_mask());
  v.push_back(Case::padded(2, 90, 60, 64, 1, 128).with(DType::f16).window(30, 10).layout(Strides::permuted));
  v.push_back(Case::varlen({70, 0, 130}, {90, 40, 0}, 16, 1, 128).with(DType::f16).causal_mask());
  v.push_back(Case::varlen({0, 33, 81}, {20, 0, 64}, 64, 1, 64).with(DType::bf16));
  // MQA at batch 1 under a mask: on a real GPU the sm80 backward runs every key block as parts
  // (bwd_plan.cu's split_long_blocks; causal, a window, and hdim 256's other grid order).
  v.push_back(Case::padded(1, 2048, 2048, 16, 1, 128).with(DType::bf16).causal_mask().sample(48, 48));
  v.push_back(Case::padded(1, 1500, 1700, 8, 1, 64).with(DType::f16).window(300, 0).sample(48, 48));
  v.push_back(Case::padded(1, 1200, 1100, 8, 1, 256).with(DType::bf16).causal_mask().sample(48, 48));
  v.push_back(Case::varlen({1500, 0, 700}, {1400, 30, 700}, 16, 1, 64).with(DType::bf16).causal_mask().sample(48, 48));
  // The sm90 backward's key blocks in parts (bwd_launch.hpp's bwd_parts), on any GPU and SM count:
  // parts of unequal heads (5 heads causal in 4 parts on a whole GPU; 8 and 6 heads over one key
  // block in 4 parts from 2 SMs on, hdim 128 and 256's kernels), and on the H100's memory 12 heads in
  // 2 parts under a window.
  v.push_back(Case::padded(1, 1500, 1500, 5, 1, 128).with(DType::bf16).causal_mask().sample(48, 48));
  v.push_back(Case::padded(1, 1000, 100, 8, 1, 128).with(DType::f16));
  v.push_back(Case::padded(1, 1200, 60, 6, 1, 256).with(DType::bf16));
  v.push_back(Case::padded(2, 300, 260, 12, 1, 256).with(DType::f16).window(60, 20));
  return v;
}

// Causal (both alignments), sliding windows (left only, right only, both), diagonal-only.
std::vector<Case> mask_cases() {
  std::vector<Case> v;
  const std::pair<int64_t, int64_t> lens[] = {{513, 513}, {200, 600}, {600, 200}};
  int i = 0;
  for (auto [sq, sk] : lens) {
    const Case c = Case::padded(1, sq, sk, 4, 2, 64).with(i % 2 ? DType::f16 : DType::bf16);
    v.push_back(c.causal_mask());
    v.push_back(c.window(32, -1));
    v.push_back(c.window(-1, 16).layout(Strides::padded));
    v.push_back(c.window(20, 5));
    v.push_back(c.window(0, 0).layout(Strides::permuted));
    v.push_back(c.window(50, 0));
    v.push_back(c.causal_mask().window(70, -1));
    v.push_back(c.window(300, 300).with(DType::f32));
    ++i;
  }
  return v;
}

// Softcap and explicit softmax scales (softmax from nearly flat to sharply peaked).
std::vector<Case> softcap_scale_cases() {
  return {
      Case::padded(2, 133, 150, 2, 2, 64).with(DType::bf16).cap(30.f),
      Case::padded(1, 200, 180, 4, 2, 128).with(DType::f16).cap(2.5f).causal_mask(),
      Case::padded(1, 90, 250, 2, 1, 96).with(DType::f32).cap(5.f).window(40, 10).layout(Strides::padded),
      Case::padded(1, 170, 170, 2, 2, 64).with(DType::bf16).cap(1.f).scale(1.f),
      Case::padded(2, 64, 77, 2, 2, 64).with(DType::f16).scale(0.5f),
      Case::padded(1, 111, 222, 2, 1, 64).with(DType::bf16).scale(1.f).causal_mask(),
      Case::padded(1, 111, 99, 2, 2, 40).with(DType::f32).scale(0.02f),
      Case::padded(1, 100, 100, 2, 2, 64).with(DType::bf16).stddev(3.0).causal_mask(),
  };
}

// hdim_v ≠ hdim_qk.
std::vector<Case> value_dim_cases() {
  return {
      Case::padded(1, 123, 145, 2, 1, 192, 128).with(DType::bf16).causal_mask(),
      Case::padded(2, 77, 66, 2, 2, 64, 32).with(DType::f16).layout(Strides::permuted),
      Case::padded(1, 99, 131, 4, 2, 128, 64).with(DType::f32).window(16, 16),
      Case::padded(1, 50, 70, 2, 1, 32, 64).with(DType::bf16).cap(4.f),
      Case::padded(1, 60, 60, 2, 2, 40, 8).with(DType::f16).causal_mask().layout(Strides::padded),
      Case::padded(1, 45, 80, 1, 1, 256, 128).with(DType::bf16),
  };
}

// Variable-length batches: empty sequences (q, k or both), packed rows after the last sequence.
std::vector<Case> varlen_cases() {
  return {
      Case::varlen({5, 0, 130, 77}, {9, 40, 0, 201}, 4, 2, 64).with(DType::bf16),
      Case::varlen({5, 0, 130, 77}, {9, 40, 0, 201}, 4, 2, 64).with(DType::f16).causal_mask().layout(Strides::padded),
      Case::varlen({0, 0, 0}, {3, 0, 5}, 2, 2, 64).with(DType::bf16),
      Case::varlen({4, 9}, {0, 0}, 2, 1, 64).with(DType::f16),
      Case::varlen({300, 1, 17}, {17, 300, 1}, 2, 1, 64).with(DType::bf16).causal_mask(),
      Case::varlen({64, 128, 127}, {64, 128, 129}, 2, 2, 128).with(DType::f32).window(30, 0).layout(Strides::permuted),
      Case::varlen({33, 20}, {50, 8}, 2, 1, 96).with(DType::bf16).extra(7).window(-1, 3),
      Case::varlen({100, 61, 1}, {80, 99, 250}, 8, 1, 128).with(DType::f16).cap(10.f).causal_mask(),
      Case::varlen({40, 0, 70}, {70, 12, 40}, 2, 2, 192, 128).with(DType::bf16).det().layout(Strides::padded),
      Case::varlen({257}, {255}, 2, 1, 64).with(DType::bf16).no_lse(),
  };
}

// Options that only touch the outputs' handling.
std::vector<Case> misc_cases() {
  return {
      Case::padded(2, 70, 70, 2, 2, 64).with(DType::f16).no_lse(),
      Case::padded(1, 200, 100, 2, 2, 64).with(DType::bf16).det().causal_mask(),
      Case::padded(3, 31, 37, 3, 3, 8).with(DType::f32).layout(Strides::permuted),
  };
}

std::vector<Case> all_cases() {
  std::vector<Case> all;
  for (auto list : {head_dim_cases(), seqlen_cases(), gqa_cases(), mask_cases(), softcap_scale_cases(),
                    value_dim_cases(), varlen_cases(), misc_cases()}) {
    all.insert(all.end(), list.begin(), list.end());
  }
  std::set<std::string> names;
  for (const Case& c : all) {
    if (!names.insert(c.name()).second) throw std::logic_error("duplicate differential case " + c.name());
  }
  return all;
}

using Param = std::tuple<Backend, Case>;

class Diff : public ::testing::TestWithParam<Param> {};

TEST_P(Diff, Forward) {
  const auto& [backend, c] = GetParam();
  FA_REQUIRE_BACKEND(backend);
  Rng rng;
  Problem p = make_problem(c, rng);
  FA_RUN_OR_SKIP(run_forward(backend, p));
  expect_forward_matches(p);
}

TEST_P(Diff, Backward) {
  const auto& [backend, case_] = GetParam();
  FA_REQUIRE_BACKEND(backend);
  Case c = case_;
  c.with_lse = true;  // the backward needs the forward's lse
  Rng rng;
  Problem p = make_problem(c, rng);
  FA_RUN_OR_SKIP(run_forward(backend, p));
  FA_RUN_OR_SKIP(run_backward(backend, p));
  expect_backward_matches(p);
}

INSTANTIATE_TEST_SUITE_P(All, Diff, ::testing::Combine(::testing::ValuesIn(all_backends()),
                                                       ::testing::ValuesIn(all_cases())),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::string(to_string(std::get<0>(info.param))) + "_" +
                                  std::get<1>(info.param).name();
                         });

// Gradients on demand (BackwardArgs::gradient_allocator): dq, dk and dv given as shapes and strides
// only, their memory asked for once per call (after the first launch on the GPU); the gradients are
// the reference's. An allocator that fails fails the call by name with no gradient written, and data
// given beside an allocator is refused by name.
struct GradientMemory {
  void* dq;
  void* dk;
  void* dv;
  int calls = 0;
  bool fail = false;
  static bool allocate(void* context, void** dq, void** dk, void** dv) {
    auto* self = static_cast<GradientMemory*>(context);
    ++self->calls;
    if (self->fail) return false;
    *dq = self->dq;
    *dk = self->dk;
    *dv = self->dv;
    return true;
  }
};

std::vector<Case> late_gradient_cases() {
  return {
      Case::padded(2, 130, 200, 4, 2, 64).with(DType::bf16).causal_mask(),
      Case::padded(1, 77, 300, 2, 2, 128).with(DType::f16).layout(Strides::padded),
      Case::padded(1, 65, 90, 2, 1, 256).with(DType::bf16).det(),
      Case::varlen({5, 0, 130}, {9, 40, 201}, 4, 2, 64).with(DType::bf16).extra(7).zero_rows_outside(),
  };
}

class LateGradients : public ::testing::TestWithParam<Param> {};

TEST_P(LateGradients, AskedForOnceAndMatchTheReference) {
  const auto& [backend, case_] = GetParam();
  FA_REQUIRE_BACKEND(backend);
  Case c = case_;
  c.with_lse = true;
  Rng rng;
  Problem p = make_problem(c, rng);
  FA_RUN_OR_SKIP(run_forward(backend, p));
  for (HostTensor* t : {&p.dq, &p.dk, &p.dv}) {
    t->poison();
    t->snapshot();
  }
  std::vector<HostTensor*> inputs{&p.q, &p.k, &p.v, &p.out, &p.lse, &p.dout};
  if (c.is_varlen()) inputs.insert(inputs.end(), {&p.cu_q, &p.cu_k});
  for (HostTensor* t : inputs) t->snapshot();
  DeviceMirror m(backend);
  flashattn::BackwardArgs a = p.backward_args(m);
  a.path = backend.family;
  GradientMemory memory{a.dq.data, a.dk.data, a.dv.data};
  a.gradient_allocator = {&GradientMemory::allocate, &memory};

  const flashattn::Status given = flashattn::supports(a);
  EXPECT_EQ(given.code, flashattn::StatusCode::invalid_argument) << given.message;
  EXPECT_NE(given.message.find("dq: data given with gradient_allocator"), std::string::npos) << given.message;

  a.dq.data = a.dk.data = a.dv.data = nullptr;
  std::size_t bytes = 0;
  const flashattn::Status support = flashattn::backward_workspace_size(a, &bytes);
  if (support.code == flashattn::StatusCode::not_supported) GTEST_SKIP() << support.message;
  ASSERT_TRUE(support.ok()) << support.message;
  if (bytes > 0) {
    a.workspace = m.scratch(bytes);
    a.workspace_bytes = bytes;
  }
  EXPECT_EQ(memory.calls, 0) << "a query asked for the gradients";

  memory.fail = true;
  const flashattn::Status refused = flashattn::backward(a);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message.find("gradient_allocator"), std::string::npos) << refused.message;
  EXPECT_EQ(memory.calls, 1);
  ASSERT_EQ(m.synchronize(), "");
  for (HostTensor* t : {&p.dq, &p.dk, &p.dv}) {
    m.download(*t);
    EXPECT_TRUE(t->unchanged()) << "a call whose gradients could not be allocated wrote one";
  }

  memory = GradientMemory{memory.dq, memory.dk, memory.dv};
  const flashattn::Status s = flashattn::backward(a);
  ASSERT_TRUE(s.ok()) << s.message;
  ASSERT_EQ(m.synchronize(), "");
  EXPECT_EQ(memory.calls, 1);
  for (HostTensor* t : {&p.dq, &p.dk, &p.dv}) m.download(*t);
  for (HostTensor* t : inputs) m.download(*t);
  expect_backward_matches(p);
}

INSTANTIATE_TEST_SUITE_P(All, LateGradients,
                         ::testing::Combine(::testing::ValuesIn(all_backends()),
                                            ::testing::ValuesIn(late_gradient_cases())),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::string(to_string(std::get<0>(info.param))) + "_" +
                                  std::get<1>(info.param).name();
                         });

}  // namespace
}  // namespace fa_test
