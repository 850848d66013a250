#include "support/kvcache_problem.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "api/validate.hpp"
#include "support/check.hpp"

namespace fa_test {

using namespace flashattn;

KVCase KVCase::decode(std::vector<int32_t> cache_lens, int64_t capacity, int64_t heads_q, int64_t heads_kv,
                      int64_t hdim_qk, int64_t hdim_v) {
  KVCase c;
  c.cache_lens = std::move(cache_lens);
  c.capacity = capacity;
  c.heads_q = heads_q;
  c.heads_kv = heads_kv;
  c.hdim_qk = hdim_qk;
  c.hdim_v = hdim_v < 0 ? hdim_qk : hdim_v;
  return c;
}

std::string KVCase::name() const {
  std::ostringstream n;
  n << "len";
  for (size_t i = 0; i < cache_lens.size(); ++i) n << (i ? "_" : "") << cache_lens[i];
  n << "_cap" << capacity << "_q" << seqlen_q << "_h" << heads_q << "x" << heads_kv << "_d" << hdim_qk;
  if (hdim_v != hdim_qk) n << "v" << hdim_v;
  n << "_" << to_string(dtype);
  if (new_tokens >= 0) n << "_new" << new_tokens;
  if (page_size) n << "_page" << page_size;
  if (batch_idx) n << "_batchidx";
  if (rotary != Rotary::none) n << (rotary == Rotary::interleaved ? "_rotint" : "_rothalf") << (rotary_dim ? rotary_dim : hdim_qk);
  if (causal) n << "_causal";
  if (window_left >= 0) n << "_wl" << window_left;
  if (window_right >= 0) n << "_wr" << window_right;
  if (softcap > 0) n << "_cap" << static_cast<int>(softcap);
  if (!with_lse) n << "_nolse";
  if (!cache_seqlens_given) n << "_full";
  if (!pads.empty()) {
    n << "_pad";
    for (size_t i = 0; i < pads.size(); ++i) n << (i ? "_" : "") << pads[i];
  }
  return n.str();
}

std::ostream& operator<<(std::ostream& os, const KVCase& c) { return os << c.name(); }

int64_t KVProblem::cache_offset(const HostTensor& cache, int64_t b, int64_t t, int64_t h) const {
  if (c.page_size > 0) {
    const int64_t page = static_cast<int64_t>(block_table.get({b, t / c.page_size}));
    return cache.offset({page, t % c.page_size, h, 0});
  }
  const int64_t row = c.batch_idx ? static_cast<int64_t>(cache_batch_idx.get({b})) : b;
  return cache.offset({row, c.pad(b) + t, h, 0});
}

namespace {

int64_t cached_len(const KVCase& c, int64_t b) { return c.cache_seqlens_given ? c.cache_lens[b] : c.capacity; }
int64_t new_rows(const KVCase& c) { return std::max<int64_t>(c.new_tokens, 0); }

// cos/sin of the usual rotary frequencies 10000^(−2i / rotary_dim) at every position.
void fill_rotary(KVProblem& p) {
  const KVCase& c = p.c;
  const int64_t dim = c.rotary_dim ? c.rotary_dim : c.hdim_qk;
  const int64_t positions = c.capacity + c.seqlen_q + 1;
  p.rotary_cos = HostTensor(c.dtype, {positions, dim / 2});
  p.rotary_sin = HostTensor(c.dtype, {positions, dim / 2});
  for (int64_t pos = 0; pos < positions; ++pos) {
    for (int64_t i = 0; i < dim / 2; ++i) {
      const double angle = pos * std::pow(10000.0, -2.0 * i / dim);
      p.rotary_cos.set({pos, i}, std::cos(angle));
      p.rotary_sin.set({pos, i}, std::sin(angle));
    }
  }
}

// The cache's layout: contiguous rows (a permutation of a larger cache with batch_idx), or pages
// drawn from a shuffled pool, entries past a sequence's last page −1 (never read).
void lay_out_cache(KVProblem& p, Rng& rng) {
  const KVCase& c = p.c;
  const int64_t B = c.batch(), n = new_rows(c);
  int64_t rows;
  if (c.page_size > 0) {
    rows = B * c.max_pages() + 3;  // spare pages no sequence uses
    std::vector<int32_t> pool(static_cast<size_t>(rows));
    std::iota(pool.begin(), pool.end(), 0);
    for (int64_t i = rows - 1; i > 0; --i) std::swap(pool[i], pool[rng.uniform(0, i)]);
    p.block_table = HostTensor(DType::i32, {B, c.max_pages()});
    for (int64_t b = 0; b < B; ++b) {
      const int64_t used = (cached_len(c, b) + n + c.page_size - 1) / c.page_size;
      for (int64_t j = 0; j < c.max_pages(); ++j) p.block_table.set({b, j}, j < used ? pool[b * c.max_pages() + j] : -1);
    }
  } else {
    rows = c.batch_idx ? B + 2 : B;
    if (c.batch_idx) {
      std::vector<int32_t> perm(static_cast<size_t>(rows));
      std::iota(perm.begin(), perm.end(), 0);
      for (int64_t i = rows - 1; i > 0; --i) std::swap(perm[i], perm[rng.uniform(0, i)]);
      perm.resize(static_cast<size_t>(B));
      p.cache_batch_idx = HostTensor(DType::i32, {B});
      p.cache_batch_idx.fill_i32(perm);
    }
  }
  const int64_t rows_per = c.page_size > 0 ? c.page_size : c.capacity;
  p.k_cache = HostTensor(c.dtype, {rows, rows_per, c.heads_kv, c.hdim_qk});  // all NaN until filled
  p.v_cache = HostTensor(c.dtype, {rows, rows_per, c.heads_kv, c.hdim_v});
}

}  // namespace

KVProblem make_kv_problem(const KVCase& c, Rng& rng) {
  KVProblem p;
  p.c = c;
  const int64_t B = c.batch();
  p.q = HostTensor(c.dtype, {B, c.seqlen_q, c.heads_q, c.hdim_qk});
  p.q.fill_normal(rng);
  if (c.new_tokens >= 0) {
    p.k_new = HostTensor(c.dtype, {B, c.new_tokens, c.heads_kv, c.hdim_qk});
    p.v_new = HostTensor(c.dtype, {B, c.new_tokens, c.heads_kv, c.hdim_v});
    p.k_new.fill_normal(rng);
    p.v_new.fill_normal(rng);
  }
  if (c.rotary != Rotary::none) fill_rotary(p);
  if (c.cache_seqlens_given) {
    std::vector<int32_t> rows = c.cache_lens;  // cache rows from 0: the padding, then the keys
    for (int64_t b = 0; b < B; ++b) rows[b] += static_cast<int32_t>(c.pad(b));
    p.cache_seqlens = HostTensor(DType::i32, {B});
    p.cache_seqlens.fill_i32(rows);
  }
  if (!c.pads.empty()) {
    p.cache_leftpad = HostTensor(DType::i32, {B});
    p.cache_leftpad.fill_i32(c.pads);
  }
  // The logical cached rows, drawn in (b, t, h, d) order before any layout randomness.
  std::vector<std::vector<double>> keys(static_cast<size_t>(B)), values(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < cached_len(c, b) * c.heads_kv * c.hdim_qk; ++i) keys[b].push_back(rng.normal());
    for (int64_t i = 0; i < cached_len(c, b) * c.heads_kv * c.hdim_v; ++i) values[b].push_back(rng.normal());
  }
  lay_out_cache(p, rng);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < cached_len(c, b); ++t) {
      for (int64_t h = 0; h < c.heads_kv; ++h) {
        const int64_t ko = p.cache_offset(p.k_cache, b, t, h), vo = p.cache_offset(p.v_cache, b, t, h);
        for (int64_t d = 0; d < c.hdim_qk; ++d) p.k_cache.set_at(ko + d, keys[b][(t * c.heads_kv + h) * c.hdim_qk + d]);
        for (int64_t d = 0; d < c.hdim_v; ++d) p.v_cache.set_at(vo + d, values[b][(t * c.heads_kv + h) * c.hdim_v + d]);
      }
    }
  }
  p.out = HostTensor(c.dtype, {B, c.seqlen_q, c.heads_q, c.hdim_v});
  p.lse = HostTensor(DType::f32, {B, c.heads_q, c.seqlen_q});
  return p;
}

KVCacheArgs KVProblem::args(DeviceMirror& m) const {
  KVCacheArgs a;
  a.q = m.view(q);
  a.k_cache = m.view(k_cache);
  a.v_cache = m.view(v_cache);
  if (cache_seqlens.valid()) a.cache_seqlens = m.view(cache_seqlens);
  if (block_table.valid()) a.block_table = m.view(block_table);
  if (cache_batch_idx.valid()) a.cache_batch_idx = m.view(cache_batch_idx);
  if (cache_leftpad.valid()) a.cache_leftpad = m.view(cache_leftpad);
  if (k_new.valid()) {
    a.k_new = m.view(k_new);
    a.v_new = m.view(v_new);
  }
  if (rotary_cos.valid()) {
    a.rotary_cos = m.view(rotary_cos);
    a.rotary_sin = m.view(rotary_sin);
    a.rotary_interleaved = c.rotary == Rotary::interleaved;
  }
  a.out = m.view(out);
  if (c.with_lse) a.lse = m.view(lse);
  a.options.causal = c.causal;
  a.options.window_left = c.window_left;
  a.options.window_right = c.window_right;
  a.options.softcap = c.softcap;
  return a;
}

KVCacheParams KVProblem::host_params() const {
  DeviceMirror host(Backend::host());
  KVCacheArgs a = args(host);
  a.lse = host.view(lse);  // readable even when the call did not ask for it
  KVCacheParams params;
  Status s = to_params(a, &params);
  if (!s.ok()) throw std::invalid_argument("KVProblem::host_params: " + s.message);
  return params;
}

KVExpected expect_of(const KVProblem& p) {
  KVExpected e;
  const KVCacheParams hp = p.host_params();
  Status s = reference::kvcache_forward(hp, reference::Precision::f64, &e.ref);
  if (s.ok()) s = reference::kvcache_forward(hp, reference::Precision::same, &e.same);
  if (!s.ok()) throw std::runtime_error("expect_of: " + s.message);
  e.k_cache_before = p.k_cache;
  e.v_cache_before = p.v_cache;
  return e;
}

CallResult run_kvcache(Backend backend, KVProblem& p) {
  CallResult r;
  p.out.poison();
  p.lse.poison();
  std::vector<HostTensor*> inputs{&p.q, &p.k_new, &p.v_new, &p.rotary_cos, &p.rotary_sin, &p.cache_seqlens,
                                  &p.block_table, &p.cache_batch_idx, &p.cache_leftpad};
  inputs.erase(std::remove_if(inputs.begin(), inputs.end(), [](HostTensor* t) { return !t->valid(); }), inputs.end());
  for (HostTensor* t : inputs) t->snapshot();
  for (HostTensor* t : {&p.out, &p.lse, &p.k_cache, &p.v_cache}) t->snapshot();
  DeviceMirror m(backend);
  KVCacheArgs a = p.args(m);
  a.path = backend.family;
  std::size_t bytes = 0;
  r.support = kvcache_workspace_size(a, &bytes);
  if (!r.support.ok()) return r;
  if (bytes > 0) {
    a.workspace = m.scratch(bytes);
    a.workspace_bytes = bytes;
  }
  const Status again = supports(a);
  if (again.code != r.support.code) {
    r.support = Status{StatusCode::internal, "supports() and kvcache_workspace_size() disagree: " + again.message};
    return r;
  }
  r.status = kvcache_forward(a);
  r.device_error = m.synchronize();
  for (HostTensor* t : {&p.out, &p.k_cache, &p.v_cache}) m.download(*t);
  if (p.c.with_lse) m.download(p.lse);  // else never uploaded: the call had no lse
  for (HostTensor* t : inputs) m.download(*t);
  return r;
}

namespace {

double unit_roundoff(DType dtype) {
  return dtype == DType::bf16 ? std::ldexp(1.0, -8) : dtype == DType::f16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -24);
}

// One side of the cache after the call: the appended rows as the reference has them (bitwise
// without rotary; with it, within one rounding of the dtype plus float32 arithmetic on |k_new|),
// every other element of the view bitwise as before, no gap byte written.
void expect_cache_side(const char* name, const KVProblem& p, const HostTensor& after, const HostTensor& before,
                       const std::vector<double>& appended, int64_t dim, bool rotated) {
  const KVCase& c = p.c;
  std::vector<char> is_new(after.storage_bytes() / element_size(c.dtype), 0);
  int64_t bad = 0;
  std::ostringstream first;
  const double u = unit_roundoff(c.dtype), u32 = unit_roundoff(DType::f32);
  for (int64_t b = 0; b < c.batch(); ++b) {
    for (int64_t t = 0; t < new_rows(c); ++t) {
      for (int64_t h = 0; h < c.heads_kv; ++h) {
        const int64_t at = p.cache_offset(after, b, cached_len(c, b) + t, h);
        const double* want = &appended[static_cast<size_t>(((b * new_rows(c) + t) * c.heads_kv + h) * dim)];
        double row_max = 0;
        for (int64_t d = 0; d < dim; ++d) row_max = std::max(row_max, std::abs(want[d]));
        for (int64_t d = 0; d < dim; ++d) {
          is_new[static_cast<size_t>(at + d + HostTensor::kGuard)] = 1;
          const double got = after.get_at(at + d);
          const double tol = rotated ? 2 * u * std::abs(want[d]) + 8 * u32 * (row_max + 1) : 0;
          if (!(std::abs(got - want[d]) <= tol) && bad++ == 0) {
            first << "sequence " << b << ", new row " << t << ", head " << h << ", col " << d << ": got " << got
                  << ", want " << want[d];
          }
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << name << ": " << bad << " appended elements off; first at " << first.str();
  int64_t changed = 0;
  for (int64_t off : after.element_offsets()) {
    if (is_new[static_cast<size_t>(off + HostTensor::kGuard)]) continue;
    const double x = after.get_at(off), y = before.get_at(off);
    if (!(x == y || (std::isnan(x) && std::isnan(y)))) ++changed;
  }
  EXPECT_EQ(changed, 0) << name << ": elements outside the appended rows changed";
  EXPECT_EQ(after.gap_bytes_changed(), 0) << name << ": bytes outside the view were written";
}

}  // namespace

void expect_kvcache_matches(const KVProblem& p, const KVExpected& e) {
  const KVCacheParams hp = p.host_params();
  const reference::ForwardResult& ref = e.ref.attention;
  const std::vector<double> out = reference::read_out(hp);
  EXPECT_TRUE(rule_holds("out", reference::check_error_rule(out, e.same.attention.out, ref.out, ref.q_rows,
                                                             hp.heads_q * hp.hdim_v, hp.dtype, -1, ref.out_terms),
                         hp.hdim_v));
  if (p.c.with_lse) {
    EXPECT_TRUE(lse_close(reference::read_lse(hp), e.same.attention.lse, ref.lse, ref.q_rows, hp.heads_q));
    EXPECT_EQ(p.lse.gap_bytes_changed(), 0) << "lse: bytes outside the view were written";
  }
  EXPECT_EQ(p.out.gap_bytes_changed(), 0) << "out: bytes outside the view were written";
  expect_cache_side("k_cache", p, p.k_cache, e.k_cache_before, e.ref.k_appended, p.c.hdim_qk, p.c.rotary != Rotary::none);
  expect_cache_side("v_cache", p, p.v_cache, e.v_cache_before, e.ref.v_appended, p.c.hdim_v, false);
  for (auto [name, t] : {std::pair{"q", &p.q}, {"k_new", &p.k_new}, {"v_new", &p.v_new}, {"rotary_cos", &p.rotary_cos},
                         {"rotary_sin", &p.rotary_sin}, {"cache_seqlens", &p.cache_seqlens},
                         {"block_table", &p.block_table}, {"cache_batch_idx", &p.cache_batch_idx},
                         {"cache_leftpad", &p.cache_leftpad}}) {
    if (t->valid()) {
      EXPECT_TRUE(t->unchanged()) << name << ": an input was modified by the call";
    }
  }
}

}  // namespace fa_test
