// A seeded fuzzer of the validation layer and the C ABI. Each iteration draws a small valid problem
// on the host, then applies random mutations to its arguments — sizes, strides, ranks, dtype and
// device codes, data pointers, varlen offsets and maxima, paged K/V's block_table (entries out of the
// pool, negative, or other pages), options (NaN, ±inf, huge windows), path,
// workspace, and for the C ABI struct_size and the options pointer — and calls the library. The
// properties: every call returns a Status with a known code and, when refused, a message; supports(),
// the workspace query and the run agree; nothing reads or writes outside the buffers (the CI runs
// this binary under AddressSanitizer and UBSan, scripts/fuzz_check.sh); a call that succeeds on
// unmutated tensors matches the float64 reference. Mutations never claim memory a buffer lacks:
// a view whose span would exceed its buffer gets a null data pointer, which must be refused. The
// KV-cache call (Fuzz.KVCacheCalls) gets the same treatment, its host index arrays (cache_seqlens,
// block_table, cache_batch_idx, cache_leftpad) mutated too, and an accepted unmutated call must
// match the reference, the caches changed only in the appended rows.
//   --fuzz-iterations=N (default 300)   --fuzz-seed=S (default: the test seed; iteration i uses S + i)
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "flashattn/flashattn_c.h"
#include "support/c_abi.hpp"
#include "support/check.hpp"
#include "support/kvcache_problem.hpp"

namespace fa_test {
namespace {

// The seed of the iteration running now. Under ASan/UBSan (scripts/fuzz_check.sh, abort_on_error=1)
// an error aborts the process inside the call, before the test can say which iteration it was: the
// SIGABRT handler says it (async-signal-safe: write(2) and digits by hand), then aborts as before.
std::atomic<uint64_t> g_seed{0};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "read in a signal handler");

void set_current_seed(uint64_t seed) { g_seed.store(seed, std::memory_order_relaxed); }

void write_text(const char* text) {
  std::size_t len = 0;
  while (text[len] != 0) ++len;
  ssize_t ignored = write(2, text, len);
  (void)ignored;
}

void say_seed_and_abort(int) {
  char digits[24] = {};
  int n = 22;
  uint64_t v = g_seed.load(std::memory_order_relaxed);
  do {
    digits[n--] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  write_text("[  FUZZ    ] stopped in the call of seed ");
  write_text(digits + n + 1);
  write_text(": replay with that --fuzz-seed and --fuzz-iterations=1\n");
  std::signal(SIGABRT, SIG_DFL);
  std::raise(SIGABRT);
}

using namespace flashattn;

struct Draw {
  std::mt19937_64 rng;
  int64_t pick(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }
  template <class T, size_t N>
  T one_of(const T (&values)[N]) { return values[pick(0, N - 1)]; }
};

Case random_small_case(Draw& d) {
  const int64_t hkv = d.pick(1, 2), group = d.pick(1, 3), dim = 8 * d.pick(1, 8);
  Case c = d.chance(0.3) ? Case::varlen({int32_t(d.pick(0, 9)), int32_t(d.pick(0, 9))},
                                        {int32_t(d.pick(0, 9)), int32_t(d.pick(0, 9))}, hkv * group, hkv, dim)
                         : Case::padded(d.pick(1, 2), d.pick(0, 12), d.pick(0, 12), hkv * group, hkv, dim);
  if (c.is_varlen() && d.chance(0.4)) c = c.paged(d.pick(1, 5));  // the forward reads k, v through a block_table
  const DType types[] = {DType::f32, DType::f16, DType::bf16};
  c = c.with(d.one_of(types));
  if (d.chance(0.3)) c = c.layout(d.chance(0.5) ? Strides::padded : Strides::permuted);
  return c;
}

// Bytes a view claims (0 when it holds no element); -1 when it cannot be a real buffer.
int64_t claimed_bytes(const TensorView& t) {
  if (t.rank < 0 || t.rank > TensorView::kMaxRank) return -1;
  int64_t last = 0;
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] < 0 || t.stride[i] < 0) return -1;
    if (t.shape[i] == 0) return 0;
    if (t.shape[i] > (int64_t{1} << 30) || t.stride[i] > (int64_t{1} << 30)) return -1;
    last += (t.shape[i] - 1) * t.stride[i];
  }
  const std::size_t elem = element_size(t.dtype);
  return elem == 0 ? -1 : (last + 1) * static_cast<int64_t>(elem);
}

// The mutable state of one iteration: the views, what each one's buffer holds, and what changed.
struct Views {
  std::vector<TensorView*> all;
  std::vector<int64_t> buffer_bytes;  // bytes available from each view's data pointer
  bool layout_mutated = false;

  void add(TensorView* t, const HostTensor& h) {
    all.push_back(t);
    buffer_bytes.push_back(h.valid() ? static_cast<int64_t>(h.storage_bytes() - h.view_byte_offset()) : 0);
  }
};

// x + delta, or x where that overflows: the fuzzer's own arithmetic stays defined (UBSan aborts on
// an overflow; a view may already hold the largest shape or stride).
int64_t nudged(int64_t x, int64_t delta) {
  int64_t r = 0;
  return __builtin_add_overflow(x, delta, &r) ? x : r;
}

// One entry of a shape or stride: a size from `sizes`, or another entry of it nudged by -2..2 (the
// draws in a fixed order, so a seed replays the same call with any compiler).
template <std::size_t kSizes>
void mutate_size(Draw& d, int64_t (&dims)[TensorView::kMaxRank], const int64_t (&sizes)[kSizes]) {
  if (d.chance(0.5)) {
    const int64_t size = d.one_of(sizes);
    dims[d.pick(0, 3)] = size;
    return;
  }
  const int64_t from = dims[d.pick(0, 3)];
  const int64_t delta = d.pick(-2, 2);
  dims[d.pick(0, 3)] = nudged(from, delta);
}

void mutate_view(Draw& d, TensorView* t, Views* v) {
  v->layout_mutated = true;
  const int64_t sizes[] = {-3, -1, 0, 1, 2, 7, 64, int64_t{1} << 40, std::numeric_limits<int64_t>::max()};
  switch (d.pick(0, 6)) {
    case 0: mutate_size(d, t->shape, sizes); break;
    case 1: mutate_size(d, t->stride, sizes); break;
    case 2: t->rank = static_cast<int>(d.pick(-1, 5)); break;
    case 3: t->dtype = static_cast<DType>(d.pick(-1, 5)); break;
    case 4:  // another device: never the GPU's for host buffers when a GPU could run them
      t->device = static_cast<Device>(cuda_available() ? d.one_of({2, 7, -1}) : d.pick(-1, 2));
      break;
    case 5: t->data = nullptr; break;
    default: *t = TensorView{}; break;
  }
}

// Any view now claiming more than its buffer gets a null pointer (so a call must refuse it).
void keep_claims_within_buffers(Views* v) {
  for (size_t i = 0; i < v->all.size(); ++i) {
    TensorView* t = v->all[i];
    const int64_t claim = claimed_bytes(*t);
    if (claim < 0 || claim > v->buffer_bytes[i]) t->data = nullptr;
  }
}

void mutate_options(Draw& d, AttentionOptions* o) {
  const float floats[] = {NAN, INFINITY, -INFINITY, 0.f, -1.f, 1e-30f, 1e30f, 0.125f, 5.f};
  const int64_t windows[] = {-7, -2, -1, 0, 1, 3, 100, int64_t{1} << 40, std::numeric_limits<int64_t>::max()};
  switch (d.pick(0, 4)) {
    case 0: o->softmax_scale = d.one_of(floats); break;
    case 1: o->softcap = d.one_of(floats); break;
    case 2: o->window_left = d.one_of(windows); break;
    case 3: o->window_right = d.one_of(windows); break;
    default: o->causal = !o->causal; break;
  }
}

bool known_code(const Status& s) {
  const int c = static_cast<int>(s.code);
  return c >= 0 && c <= static_cast<int>(StatusCode::internal) && (s.ok() || !s.message.empty());
}

// The same forward through the C ABI, with its own struct-level mutations; the code must be the
// C++ call's unless a mutation changed what the call means.
void fuzz_c_abi(Draw& d, const ForwardArgs& f, const Status& cpp) {
  fa_options o;
  to_c(f.options, &o);
  fa_args a;
  fa_args_init(&a);
  a.q = to_c(f.q), a.k = to_c(f.k), a.v = to_c(f.v), a.out = to_c(f.out), a.lse = to_c(f.lse);
  a.block_table = to_c(f.block_table);
  a.cu_seqlens_q = to_c(f.cu_seqlens_q), a.cu_seqlens_k = to_c(f.cu_seqlens_k);
  a.max_seqlen_q = f.max_seqlen_q, a.max_seqlen_k = f.max_seqlen_k;
  a.options = &o;
  a.path = f.path.c_str();
  a.workspace = f.workspace, a.workspace_bytes = f.workspace_bytes;
  char msg[256];
  const int same = fa_forward(&a, msg, sizeof msg);
  EXPECT_EQ(same, static_cast<int>(cpp.code)) << "C ABI and C++ disagree: " << msg << " / " << cpp.message;
  // Struct-level garbage: the library must answer with a code, never crash or read past struct_size.
  struct {
    fa_args args;
    unsigned char tail[32];
  } caller;
  std::memset(&caller, static_cast<int>(d.pick(0, 255)), sizeof caller);
  std::memcpy(&caller.args, &a, sizeof a);
  struct {
    fa_options options;
    unsigned char tail[32];
  } options_caller;  // a struct_size may claim the tail, never more than the caller has
  std::memset(&options_caller, static_cast<int>(d.pick(0, 255)), sizeof options_caller);
  options_caller.options = o;
  const size_t sizes[] = {0, 1, FA_ARGS_SIZE_V1, sizeof(fa_args), sizeof caller, size_t{1} << 40};
  const size_t option_sizes[] = {0, 1, FA_OPTIONS_SIZE_V1, sizeof(fa_options), sizeof options_caller, size_t{1} << 40};
  caller.args.struct_size = d.one_of(sizes);
  caller.args.options = &options_caller.options;
  if (d.chance(0.3)) options_caller.options.struct_size = d.one_of(option_sizes);
  if (d.chance(0.2)) caller.args.options = nullptr;
  const int code = fa_forward(&caller.args, msg, sizeof msg);
  EXPECT_TRUE(code >= 0 && code <= static_cast<int>(StatusCode::internal)) << code;
  EXPECT_TRUE(code == 0 || msg[0] != '\0');
  std::size_t bytes = 0;
  const int ws = fa_forward_workspace_size(&caller.args, &bytes, msg, sizeof msg);
  EXPECT_TRUE(ws >= 0 && ws <= static_cast<int>(StatusCode::internal));
}

struct Tally {
  int64_t accepted = 0, compared = 0, paged_accepted = 0;
};

template <class Args>
void call_and_check(Draw& d, Args a, Problem& p, const Views& v, Tally* tally) {
  const char* paths[] = {"auto", "cpu", "sm80", "", "nope"};
  if (d.chance(0.2)) a.path = d.one_of(paths);
  std::size_t bytes = 0;
  Status ws;
  if constexpr (std::is_same_v<Args, ForwardArgs>) {
    ws = forward_workspace_size(a, &bytes);
  } else {
    ws = backward_workspace_size(a, &bytes);
  }
  ASSERT_TRUE(known_code(ws)) << ws.message;
  std::vector<unsigned char> workspace(ws.ok() ? bytes + 16 : 0);
  if (ws.ok() && bytes > 0) a.workspace = workspace.data(), a.workspace_bytes = bytes;
  const Status sup = supports(a);
  EXPECT_EQ(sup.code, ws.code) << "supports() and the workspace query disagree: " << sup.message << " / " << ws.message;
  if constexpr (std::is_same_v<Args, ForwardArgs>) {
    for (HostTensor* t : {&p.out, &p.lse}) t->poison();
  } else {
    for (HostTensor* t : {&p.dq, &p.dk, &p.dv}) t->poison();
  }
  for (HostTensor* t : {&p.q, &p.k, &p.v, &p.k_pages, &p.v_pages, &p.block_table, &p.cu_q, &p.cu_k, &p.out, &p.lse,
                        &p.dq, &p.dk, &p.dv}) {
    if (t->valid()) t->snapshot();
  }
  Status run;
  if constexpr (std::is_same_v<Args, ForwardArgs>) {
    run = forward(a);
  } else {
    run = backward(a);
  }
  ASSERT_TRUE(known_code(run)) << run.message;
  tally->accepted += run.ok() ? 1 : 0;
  EXPECT_EQ(run.code, ws.code) << "the run and the workspace query disagree: " << run.message << " / " << ws.message;
  if constexpr (std::is_same_v<Args, ForwardArgs>) {
    if (run.ok() && !v.layout_mutated) {  // the options the call was accepted with are the case's now
      p.c.softmax_scale = a.options.softmax_scale;
      p.c.causal = a.options.causal;
      p.c.window_left = a.options.window_left;
      p.c.window_right = a.options.window_right;
      p.c.softcap = a.options.softcap;
      expect_forward_matches(p);
      ++tally->compared;
    }
    fuzz_c_abi(d, a, run);  // last: its own calls may overwrite out with other options
  }
}

// One mutated call (iteration `seed`): a random small case, its views, options, offsets or pages
// mutated, then the call checked by call_and_check.
void fuzz_iteration(uint64_t seed, Tally* tally) {
  set_current_seed(seed);
  Draw d{std::mt19937_64(seed)};
  Rng inputs(seed);
  Case c = random_small_case(d);
  Problem p = make_problem(c, inputs);
  DeviceMirror host{Backend::host()};
  const bool backward_call = d.chance(0.4);
  const bool paged_call = !backward_call && c.is_paged();  // the backward refuses paged k, v: packed ones
  ForwardArgs f = p.forward_args(host);
  BackwardArgs b = p.backward_args(host);
  Views v;
  const auto add = [&](TensorView* t, const HostTensor& h) { v.add(t, h); };
  AttentionArgs& common = backward_call ? static_cast<AttentionArgs&>(b) : static_cast<AttentionArgs&>(f);
  add(&common.q, p.q), add(&common.k, paged_call ? p.k_pages : p.k), add(&common.v, paged_call ? p.v_pages : p.v);
  if (paged_call) add(&f.block_table, p.block_table);
  add(&common.cu_seqlens_q, p.cu_q), add(&common.cu_seqlens_k, p.cu_k);
  if (backward_call) {
    add(&b.out, p.out), add(&b.lse, p.lse), add(&b.dout, p.dout), add(&b.dq, p.dq), add(&b.dk, p.dk), add(&b.dv, p.dv);
  } else {
    add(&f.out, p.out), add(&f.lse, p.lse);
  }
  const int64_t mutations = d.pick(0, 3);
  for (int64_t m = 0; m < mutations; ++m) {
    switch (d.pick(0, 3)) {
      case 0: mutate_view(d, v.all[d.pick(0, v.all.size() - 1)], &v); break;
      case 1: mutate_options(d, &common.options); break;
      case 2:
        if (paged_call && d.chance(0.5)) {  // pages: out of the pool, negative, or another valid page
          const int64_t pages = p.k_pages.view().shape[0];
          p.block_table.set({d.pick(0, c.batch - 1), d.pick(0, p.block_table.view().shape[1] - 1)},
                            static_cast<double>(d.pick(-3, pages + 3)));
          v.layout_mutated = true;
        } else if (c.is_varlen()) {  // offsets: the host validation reads and checks them
          p.cu_q.fill_i32({int32_t(d.pick(-3, 12)), int32_t(d.pick(-3, 30)), int32_t(d.pick(-3, 40))});
          v.layout_mutated = true;
        }
        break;
      default:
        common.max_seqlen_q = d.pick(-2, 20), common.max_seqlen_k = d.pick(-2, 20);
        v.layout_mutated = v.layout_mutated || c.is_varlen();
        break;
    }
  }
  keep_claims_within_buffers(&v);
  const int64_t accepted_before = tally->accepted;
  if (backward_call) {
    call_and_check(d, b, p, v, tally);
  } else {
    call_and_check(d, f, p, v, tally);
  }
  if (paged_call) tally->paged_accepted += tally->accepted - accepted_before;
}

// The seeds of a fuzz test: --fuzz-iterations of them from --fuzz-seed (else the test seed),
// `iteration` run on each; a failing one is named with the flags that replay it (the first five).
struct FuzzRun {
  uint64_t first = 0;
  int64_t iterations = 0, failed = 0;
  Tally tally;
};

FuzzRun run_seeds(const char* what, const char* test_name, void (*iteration)(uint64_t, Tally*)) {
  FuzzRun r;
  r.iterations = std::stoll(test_flag("fuzz-iterations", "300"));
  const uint64_t given = std::stoull(test_flag("fuzz-seed", "0"));
  r.first = given != 0 ? given : process_seed();
  std::signal(SIGABRT, say_seed_and_abort);
  std::printf("[  FUZZ    ] %sseeds %llu .. %llu (iteration i uses the first + i)\n", what,
              static_cast<unsigned long long>(r.first), static_cast<unsigned long long>(r.first + r.iterations - 1));
  std::fflush(stdout);  // before a sanitizer may abort the process
  for (int64_t i = 0; i < r.iterations && !::testing::Test::HasFatalFailure(); ++i) {
    const int failures_before = ::testing::UnitTest::GetInstance()->current_test_info()->result()->total_part_count();
    iteration(r.first + i, &r.tally);
    const int failures_now = ::testing::UnitTest::GetInstance()->current_test_info()->result()->total_part_count();
    if (failures_now > failures_before && r.failed++ < 5) {
      ADD_FAILURE() << "iteration " << i << ": replay with --fuzz-seed=" << r.first + i
                    << " --fuzz-iterations=1 --gtest_filter=" << test_name;
    }
  }
  return r;
}

TEST(Fuzz, EveryCallAnswersAndAcceptedCallsAreRight) {
  const FuzzRun r = run_seeds("", "Fuzz.EveryCallAnswersAndAcceptedCallsAreRight", fuzz_iteration);
  std::printf("[  FUZZ    ] corpus: %lld mutated calls from seed %llu; %lld accepted (%lld paged), %lld of them checked "
              "against the reference; crashes: 0 (the process is still here); failing iterations: %lld\n",
              static_cast<long long>(r.iterations), static_cast<unsigned long long>(r.first),
              static_cast<long long>(r.tally.accepted), static_cast<long long>(r.tally.paged_accepted),
              static_cast<long long>(r.tally.compared), static_cast<long long>(r.failed));
}

// A small valid KV-cache call: a contiguous cache (rows of a larger one through cache_batch_idx, or
// left-padded) or a paged one, 1–4 query tokens, appended keys, rotary, masks, soft cap, GQA.
KVCase random_kv_case(Draw& d) {
  const int64_t batch = d.pick(1, 3), hkv = d.pick(1, 2), group = d.pick(1, 3), dim = 8 * d.pick(1, 8);
  const int64_t capacity = d.pick(1, 24);
  const int64_t new_tokens = d.chance(0.4) ? d.pick(0, std::min<int64_t>(3, capacity)) : -1;
  const int64_t room = capacity - std::max<int64_t>(new_tokens, 0);
  std::vector<int32_t> lens;
  for (int64_t b = 0; b < batch; ++b) lens.push_back(static_cast<int32_t>(d.pick(0, room)));
  const DType types[] = {DType::f32, DType::f16, DType::bf16};
  KVCase c = KVCase::decode(lens, capacity, hkv * group, hkv, dim).q_rows(d.pick(1, 4)).with(d.one_of(types));
  if (new_tokens >= 0) c = c.append(new_tokens);
  switch (d.pick(0, 3)) {
    case 0: break;
    case 1: c = c.paged(d.pick(1, 8)); break;
    case 2: c = c.indexed(); break;
    default: {
      std::vector<int32_t> pads;
      for (int64_t b = 0; b < batch; ++b) pads.push_back(static_cast<int32_t>(d.pick(0, room - lens[b])));
      c = c.left_padded(pads);
      break;
    }
  }
  if (d.chance(0.3)) {
    c = c.rotate(d.chance(0.5) ? Rotary::interleaved : Rotary::half_split, d.chance(0.5) ? 0 : 2 * d.pick(1, dim / 2));
  }
  if (d.chance(0.3)) c = c.causal_mask();
  if (d.chance(0.2)) c = c.window(d.pick(0, 8), c.causal ? 0 : d.pick(0, 8));
  if (d.chance(0.2)) c = c.cap(5.f);
  if (d.chance(0.2)) c = c.no_lse();
  return c;
}

// One mutated KV-cache call (iteration `seed`).
void kv_fuzz_iteration(uint64_t seed, Tally* tally) {
  set_current_seed(seed);
  Draw d{std::mt19937_64(seed)};
  Rng inputs(seed);
  KVProblem p = make_kv_problem(random_kv_case(d), inputs);
  DeviceMirror host{Backend::host()};
  KVCacheArgs a = p.args(host);
  Views v;
  const auto add = [&](TensorView* t, const HostTensor& h) { v.add(t, h); };
  add(&a.q, p.q), add(&a.k_cache, p.k_cache), add(&a.v_cache, p.v_cache), add(&a.k_new, p.k_new);
  add(&a.v_new, p.v_new), add(&a.rotary_cos, p.rotary_cos), add(&a.rotary_sin, p.rotary_sin);
  add(&a.cache_seqlens, p.cache_seqlens), add(&a.block_table, p.block_table);
  add(&a.cache_batch_idx, p.cache_batch_idx), add(&a.cache_leftpad, p.cache_leftpad), add(&a.out, p.out);
  add(&a.lse, p.lse);
  bool mutated = false;
  const int64_t mutations = d.pick(0, 3);
  for (int64_t m = 0; m < mutations; ++m) {
    mutated = true;
    switch (d.pick(0, 3)) {
      case 0: mutate_view(d, v.all[d.pick(0, v.all.size() - 1)], &v); break;
      case 1: mutate_options(d, &a.options); break;
      case 2: {  // a host index: out of range, negative, or another valid-looking value
        HostTensor* indices[] = {&p.cache_seqlens, &p.block_table, &p.cache_batch_idx, &p.cache_leftpad};
        HostTensor* t = indices[d.pick(0, 3)];
        if (!t->valid()) break;
        const TensorView view = t->view();
        const int64_t row = d.pick(0, view.shape[0] - 1), col = view.rank > 1 ? d.pick(0, view.shape[1] - 1) : 0;
        const double value = static_cast<double>(d.pick(-3, 40));
        if (view.rank > 1) {
          t->set({row, col}, value);
        } else {
          t->set({row}, value);
        }
        break;
      }
      default: a.num_splits = static_cast<int>(d.pick(-2, 130)); break;
    }
  }
  keep_claims_within_buffers(&v);
  std::size_t bytes = 0;
  const Status ws = kvcache_workspace_size(a, &bytes);
  ASSERT_TRUE(known_code(ws)) << ws.message;
  std::vector<unsigned char> workspace(ws.ok() ? bytes + 16 : 0);
  if (ws.ok() && bytes > 0) a.workspace = workspace.data(), a.workspace_bytes = bytes;
  const Status sup = supports(a);
  EXPECT_EQ(sup.code, ws.code) << "supports() and the workspace query disagree: " << sup.message << " / " << ws.message;
  // The expectation before the call (which appends into the caches), for a call nothing mutated.
  KVExpected expected;
  const bool compare = !mutated && ws.ok();
  if (compare) expected = expect_of(p);
  p.out.poison();
  p.lse.poison();
  for (HostTensor* t : {&p.q, &p.k_new, &p.v_new, &p.rotary_cos, &p.rotary_sin, &p.cache_seqlens, &p.block_table,
                        &p.cache_batch_idx, &p.cache_leftpad, &p.out, &p.lse, &p.k_cache, &p.v_cache}) {
    if (t->valid()) t->snapshot();
  }
  const Status run = kvcache_forward(a);
  ASSERT_TRUE(known_code(run)) << run.message;
  EXPECT_EQ(run.code, ws.code) << "the run and the workspace query disagree: " << run.message << " / " << ws.message;
  tally->accepted += run.ok() ? 1 : 0;
  if (compare && run.ok()) {
    expect_kvcache_matches(p, expected);
    ++tally->compared;
  }
}

TEST(Fuzz, KVCacheCalls) {
  const FuzzRun r = run_seeds("KV cache: ", "Fuzz.KVCacheCalls", kv_fuzz_iteration);
  std::printf("[  FUZZ    ] KV cache: %lld mutated calls from seed %llu; %lld accepted, %lld of them checked against "
              "the reference; failing iterations: %lld\n",
              static_cast<long long>(r.iterations), static_cast<unsigned long long>(r.first),
              static_cast<long long>(r.tally.accepted), static_cast<long long>(r.tally.compared),
              static_cast<long long>(r.failed));
}

// Seeds that once found a defect, replayed on every run (the CI's sanitizer run included): 7782351 —
// a backward whose empty lse view had a stride of INT64_MAX, which the CPU backend multiplied by the
// batch index (signed overflow under UBSan; validation now hands empty views' strides on as 0).
TEST(Fuzz, RegressionSeeds) {
  std::signal(SIGABRT, say_seed_and_abort);
  Tally tally;
  for (uint64_t seed : {7782351ull}) {
    SCOPED_TRACE("--fuzz-seed=" + std::to_string(seed) + " --fuzz-iterations=1");
    fuzz_iteration(seed, &tally);
  }
}

}  // namespace
}  // namespace fa_test
