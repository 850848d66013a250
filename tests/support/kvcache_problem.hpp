// A KV-cache test case (KVCase: cache shape, lengths, append, rotary, options), its host tensors
// (KVProblem), the reference's expectation computed before the call (the call mutates the cache),
// and the checks after it. A case names its logical content by the seed alone: the same case as
// contiguous or paged (any page size) holds bitwise-equal keys, values and queries.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "backend/params.hpp"
#include "cpu/reference.hpp"
#include "support/problem.hpp"

namespace fa_test {

enum class Rotary { none, interleaved, half_split };

struct KVCase {
  int64_t seqlen_q = 1, heads_q = 1, heads_kv = 1, hdim_qk = 64, hdim_v = 64;
  std::vector<int32_t> cache_lens;  // keys cached per sequence before the call (batch = its size)
  int64_t capacity = 0;             // keys per sequence the cache holds (contiguous: seqlen_cache)
  int64_t new_tokens = -1;          // rows of k_new / v_new; −1: none given
  int64_t page_size = 0;            // 0: contiguous cache; else paged, pages shuffled across the pool
  bool batch_idx = false;           // contiguous: sequences use a permutation of a larger cache
  Rotary rotary = Rotary::none;
  int64_t rotary_dim = 0;           // 0: hdim_qk
  DType dtype = DType::bf16;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  float softcap = 0.f;
  bool with_lse = true;
  bool cache_seqlens_given = true;  // false: contiguous cache, every sequence holds `capacity` keys
  std::vector<int32_t> pads;        // contiguous: cache_leftpad, rows of padding before each sequence's
                                    // keys (cache_seqlens = pad + cache_lens); empty: none

  static KVCase decode(std::vector<int32_t> cache_lens, int64_t capacity, int64_t heads_q, int64_t heads_kv,
                       int64_t hdim_qk, int64_t hdim_v = -1);
  int64_t batch() const { return static_cast<int64_t>(cache_lens.size()); }
  int64_t max_pages() const { return page_size ? (capacity + page_size - 1) / page_size : 0; }
  KVCase with(DType d) const { KVCase c = *this; c.dtype = d; return c; }
  KVCase q_rows(int64_t n) const { KVCase c = *this; c.seqlen_q = n; return c; }
  KVCase append(int64_t n) const { KVCase c = *this; c.new_tokens = n; return c; }
  KVCase paged(int64_t ps) const { KVCase c = *this; c.page_size = ps; return c; }
  KVCase indexed() const { KVCase c = *this; c.batch_idx = true; return c; }
  KVCase rotate(Rotary r, int64_t dim = 0) const { KVCase c = *this; c.rotary = r; c.rotary_dim = dim; return c; }
  KVCase causal_mask() const { KVCase c = *this; c.causal = true; return c; }
  KVCase window(int64_t l, int64_t r) const { KVCase c = *this; c.window_left = l; c.window_right = r; return c; }
  KVCase cap(float s) const { KVCase c = *this; c.softcap = s; return c; }
  KVCase no_lse() const { KVCase c = *this; c.with_lse = false; return c; }
  KVCase full_cache() const { KVCase c = *this; c.cache_seqlens_given = false; return c; }
  KVCase left_padded(std::vector<int32_t> p) const { KVCase c = *this; c.pads = std::move(p); return c; }
  int64_t pad(int64_t b) const { return pads.empty() ? 0 : pads[static_cast<size_t>(b)]; }
  std::string name() const;
};
std::ostream& operator<<(std::ostream& os, const KVCase& c);

struct KVProblem {
  KVCase c;
  HostTensor q, k_cache, v_cache, k_new, v_new, rotary_cos, rotary_sin;
  HostTensor cache_seqlens, block_table, cache_batch_idx, cache_leftpad;
  HostTensor out, lse;  // poisoned before each call

  flashattn::KVCacheArgs args(DeviceMirror& m) const;
  flashattn::KVCacheParams host_params() const;  // validated, over the host tensors
  // Element offset (in k_cache / v_cache) of key t of sequence b, kv head h (after its padding): the
  // test's own addressing.
  int64_t cache_offset(const HostTensor& cache, int64_t b, int64_t t, int64_t h) const;
};
// Logical content from `rng` in a fixed order, whatever the layout; cache rows no sequence holds
// (beyond its length, unused pages) are NaN, so a read of them shows in out.
KVProblem make_kv_problem(const KVCase& c, Rng& rng);

// The reference's answer (both precisions) and the caches as they were, taken before the call.
struct KVExpected {
  flashattn::reference::KVCacheResult ref, same;
  HostTensor k_cache_before, v_cache_before;
};
KVExpected expect_of(const KVProblem& p);

// Poisons out and lse, runs kvcache_forward on `backend`, brings out, lse and the caches back.
CallResult run_kvcache(Backend backend, KVProblem& p);

// After run_kvcache: out by the error rule, lse by lse_close, the caches equal to the old ones with
// exactly the appended rows changed (to the reference's rows), inputs unchanged, no gap written.
void expect_kvcache_matches(const KVProblem& p, const KVExpected& e);

}  // namespace fa_test
