#include "support/problem.hpp"

#include <algorithm>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "api/validate.hpp"

namespace fa_test {

using namespace flashattn;

Case Case::padded(int64_t batch, int64_t seqlen_q, int64_t seqlen_k, int64_t heads_q, int64_t heads_kv,
                  int64_t hdim_qk, int64_t hdim_v) {
  Case c;
  c.batch = batch;
  c.seqlen_q = seqlen_q;
  c.seqlen_k = seqlen_k;
  c.heads_q = heads_q;
  c.heads_kv = heads_kv;
  c.hdim_qk = hdim_qk;
  c.hdim_v = hdim_v < 0 ? hdim_qk : hdim_v;
  return c;
}

Case Case::varlen(std::vector<int32_t> lens_q, std::vector<int32_t> lens_k, int64_t heads_q, int64_t heads_kv,
                  int64_t hdim_qk, int64_t hdim_v) {
  if (lens_q.size() != lens_k.size()) throw std::invalid_argument("Case::varlen: lens_q and lens_k differ in size");
  Case c = padded(static_cast<int64_t>(lens_q.size()), 0, 0, heads_q, heads_kv, hdim_qk, hdim_v);
  for (int32_t l : lens_q) c.seqlen_q = std::max<int64_t>(c.seqlen_q, l);
  for (int32_t l : lens_k) c.seqlen_k = std::max<int64_t>(c.seqlen_k, l);
  c.lens_q = std::move(lens_q);
  c.lens_k = std::move(lens_k);
  return c;
}

int64_t Case::total_q() const {
  return is_varlen() ? std::accumulate(lens_q.begin(), lens_q.end(), int64_t{0}) + extra_rows : batch * seqlen_q;
}
int64_t Case::total_k() const {
  return is_varlen() ? std::accumulate(lens_k.begin(), lens_k.end(), int64_t{0}) + extra_rows : batch * seqlen_k;
}

namespace {
std::string number(double x) {  // 0.5 → 0p5, -1 → m1
  std::ostringstream s;
  s << x;
  std::string r = s.str();
  for (char& ch : r) {
    if (ch == '.') ch = 'p';
    if (ch == '-') ch = 'm';
    if (ch == '+') ch = 'P';
  }
  return r;
}
}  // namespace

std::string Case::name() const {
  std::ostringstream n;
  if (is_varlen()) {
    n << "varlen_q";
    for (size_t i = 0; i < lens_q.size(); ++i) n << (i ? "_" : "") << lens_q[i];
    n << "_k";
    for (size_t i = 0; i < lens_k.size(); ++i) n << (i ? "_" : "") << lens_k[i];
    if (extra_rows) n << "_extra" << extra_rows;
  } else {
    n << "b" << batch << "_q" << seqlen_q << "_k" << seqlen_k;
  }
  n << "_h" << heads_q << "x" << heads_kv << "_d" << hdim_qk;
  if (hdim_v != hdim_qk) n << "v" << hdim_v;
  n << "_" << to_string(dtype);
  if (causal) n << "_causal";
  if (window_left >= 0) n << "_wl" << window_left;
  if (window_right >= 0) n << "_wr" << window_right;
  if (softcap > 0) n << "_cap" << number(softcap);
  if (softmax_scale) n << "_scale" << number(*softmax_scale);
  if (strides != Strides::contiguous) n << "_" << fa_test::to_string(strides);
  if (deterministic) n << "_det";
  if (!with_lse) n << "_nolse";
  if (zero_outside) n << "_zero_outside";
  if (sample_q || sample_k) n << "_sampled";
  if (page_size) n << "_page" << page_size;
  if (input_stddev != 1.0) n << "_sd" << number(input_stddev);
  return n.str();
}

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name(); }

namespace {

// Copies the packed k, v of a varlen problem into shuffled page pools with a block_table (see
// Problem). Two spare pages, and each sequence's last page partly unused: NaN rows the forward must
// not read.
void page_keys(Problem& p, Rng& rng) {
  const Case& c = p.c;
  const int64_t page = c.page_size;
  std::vector<int64_t> pages_of(static_cast<size_t>(c.batch));
  int64_t used = 0, max_pages = 1;
  for (int64_t b = 0; b < c.batch; ++b) {
    pages_of[b] = (c.lens_k[b] + page - 1) / page;
    used += pages_of[b];
    max_pages = std::max(max_pages, pages_of[b] + 1);
  }
  const int64_t num_pages = used + 2;
  std::vector<int32_t> pool(static_cast<size_t>(num_pages));
  std::iota(pool.begin(), pool.end(), 0);
  for (int64_t i = num_pages - 1; i > 0; --i) std::swap(pool[i], pool[rng.next() % static_cast<uint64_t>(i + 1)]);

  p.k_pages = HostTensor(c.dtype, {num_pages, page, c.heads_kv, c.hdim_qk}, c.strides);
  p.v_pages = HostTensor(c.dtype, {num_pages, page, c.heads_kv, c.hdim_v}, c.strides);
  p.k_pages.poison();
  p.v_pages.poison();
  p.block_table = HostTensor(DType::i32, {c.batch, max_pages});
  std::vector<int32_t> table(static_cast<size_t>(c.batch * max_pages), static_cast<int32_t>(num_pages + 7));
  int64_t next = 0, row0 = 0;
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t j = 0; j < pages_of[b]; ++j) table[b * max_pages + j] = pool[next++];
    for (int64_t t = 0; t < c.lens_k[b]; ++t) {
      const int64_t pg = table[b * max_pages + t / page], r = t % page;
      for (int64_t h = 0; h < c.heads_kv; ++h) {
        for (int64_t d = 0; d < c.hdim_qk; ++d) p.k_pages.set({pg, r, h, d}, p.k.get({row0 + t, h, d}));
        for (int64_t d = 0; d < c.hdim_v; ++d) p.v_pages.set({pg, r, h, d}, p.v.get({row0 + t, h, d}));
      }
    }
    row0 += c.lens_k[b];
  }
  for (int64_t i = 0; i < c.batch * max_pages; ++i) {
    const int64_t at = p.block_table.offset({i / max_pages, i % max_pages});
    static_cast<int32_t*>(p.block_table.view().data)[at] = table[i];
  }
}

}  // namespace

Problem make_problem(const Case& c, Rng& rng) {
  Problem p;
  p.c = c;
  const Strides s = c.strides;
  std::vector<int64_t> qs, ks, vs, os, dqs, ls;
  if (c.is_varlen()) {
    const int64_t tq = c.total_q(), tk = c.total_k();
    qs = {tq, c.heads_q, c.hdim_qk};
    ks = {tk, c.heads_kv, c.hdim_qk};
    vs = {tk, c.heads_kv, c.hdim_v};
    os = {tq, c.heads_q, c.hdim_v};
    ls = {c.heads_q, tq};
    std::vector<int32_t> cq{0}, ck{0};
    for (size_t b = 0; b < c.lens_q.size(); ++b) {
      cq.push_back(cq.back() + c.lens_q[b]);
      ck.push_back(ck.back() + c.lens_k[b]);
    }
    p.cu_q = HostTensor(DType::i32, {static_cast<int64_t>(cq.size())});
    p.cu_k = HostTensor(DType::i32, {static_cast<int64_t>(ck.size())});
    p.cu_q.fill_i32(cq);
    p.cu_k.fill_i32(ck);
  } else {
    qs = {c.batch, c.seqlen_q, c.heads_q, c.hdim_qk};
    ks = {c.batch, c.seqlen_k, c.heads_kv, c.hdim_qk};
    vs = {c.batch, c.seqlen_k, c.heads_kv, c.hdim_v};
    os = {c.batch, c.seqlen_q, c.heads_q, c.hdim_v};
    ls = {c.batch, c.heads_q, c.seqlen_q};
  }
  p.q = HostTensor(c.dtype, qs, s);
  p.k = HostTensor(c.dtype, ks, s);
  p.v = HostTensor(c.dtype, vs, s);
  p.dout = HostTensor(c.dtype, os, s);
  p.out = HostTensor(c.dtype, os, s);
  p.dq = HostTensor(c.dtype, qs, s);
  p.dk = HostTensor(c.dtype, ks, s);
  p.dv = HostTensor(c.dtype, vs, s);
  p.lse = HostTensor(DType::f32, ls, s);
  p.q.fill_normal(rng, c.input_stddev);
  p.k.fill_normal(rng, c.input_stddev);
  p.v.fill_normal(rng, c.input_stddev);
  p.dout.fill_normal(rng, c.input_stddev);
  for (HostTensor* t : {&p.out, &p.lse, &p.dq, &p.dk, &p.dv}) t->poison();
  if (c.is_paged()) {
    if (!c.is_varlen()) throw std::invalid_argument("make_problem: a paged case must be varlen");
    page_keys(p, rng);
  }
  return p;
}

namespace {

void fill_attention(const Problem& p, DeviceMirror& m, AttentionArgs* a) {
  const Case& c = p.c;
  a->q = m.view(p.q);
  a->k = m.view(p.k);
  a->v = m.view(p.v);
  if (c.is_varlen()) {
    a->cu_seqlens_q = m.view(p.cu_q);
    a->cu_seqlens_k = m.view(p.cu_k);
    a->max_seqlen_q = c.seqlen_q;
    a->max_seqlen_k = c.seqlen_k;
  }
  a->options.softmax_scale = c.softmax_scale;
  a->options.causal = c.causal;
  a->options.window_left = c.window_left;
  a->options.window_right = c.window_right;
  a->options.softcap = c.softcap;
  a->zero_rows_outside_sequences = c.zero_outside;
}

}  // namespace

ForwardArgs Problem::packed_forward_args(DeviceMirror& m) const {
  ForwardArgs a;
  fill_attention(*this, m, &a);
  a.out = m.view(out);
  if (c.with_lse) a.lse = m.view(lse);
  return a;
}

ForwardArgs Problem::forward_args(DeviceMirror& m) const {
  ForwardArgs a = packed_forward_args(m);
  if (c.is_paged()) {
    a.k = m.view(k_pages);
    a.v = m.view(v_pages);
    a.block_table = m.view(block_table);
  }
  return a;
}

BackwardArgs Problem::backward_args(DeviceMirror& m) const {
  BackwardArgs a;
  fill_attention(*this, m, &a);
  a.out = m.view(out);
  a.lse = m.view(lse);
  a.dout = m.view(dout);
  a.dq = m.view(dq);
  a.dk = m.view(dk);
  a.dv = m.view(dv);
  a.deterministic = c.deterministic;
  return a;
}

FwdParams Problem::host_forward_params() const {
  DeviceMirror host(Backend::host());
  ForwardArgs a = packed_forward_args(host);
  a.lse = host.view(lse);  // readable even when the call did not ask for it
  FwdParams params;
  Status s = to_params(a, &params);
  if (!s.ok()) throw std::invalid_argument("host_forward_params: " + s.message);
  return params;
}

BwdParams Problem::host_backward_params() const {
  DeviceMirror host(Backend::host());
  BwdParams params;
  Status s = to_params(backward_args(host), &params);
  if (!s.ok()) throw std::invalid_argument("host_backward_params: " + s.message);
  return params;
}

namespace {

template <class Args>
CallResult call(Backend backend, Problem& p, Args (Problem::*make_args)(DeviceMirror&) const,
                const std::vector<HostTensor*>& inputs, const std::vector<HostTensor*>& outputs) {
  CallResult r;
  for (HostTensor* t : outputs) t->poison();
  for (HostTensor* t : inputs) t->snapshot();
  for (HostTensor* t : outputs) t->snapshot();
  DeviceMirror m(backend);
  Args a = (p.*make_args)(m);
  a.path = backend.family;
  std::size_t bytes = 0;
  if constexpr (std::is_same_v<Args, ForwardArgs>) {
    r.support = forward_workspace_size(a, &bytes);
  } else {
    r.support = backward_workspace_size(a, &bytes);
  }
  if (!r.support.ok()) return r;
  if (bytes > 0) {
    a.workspace = m.scratch(bytes);
    a.workspace_bytes = bytes;
  }
  Status again = supports(a);  // the plain query must agree with the workspace query
  if (again.code != r.support.code) {
    r.support = Status{StatusCode::internal, "supports() and *_workspace_size() disagree: " + again.message};
    return r;
  }
  if constexpr (std::is_same_v<Args, ForwardArgs>) {
    r.status = forward(a);
  } else {
    r.status = backward(a);
  }
  r.device_error = m.synchronize();
  // Everything comes back, inputs too: the checks want them bitwise unchanged.
  for (HostTensor* t : outputs) m.download(*t);
  for (HostTensor* t : inputs) m.download(*t);
  return r;
}

std::vector<HostTensor*> varlen_offsets(Problem& p) {
  if (!p.c.is_varlen()) return {};
  return {&p.cu_q, &p.cu_k};
}

}  // namespace

CallResult run_forward(Backend backend, Problem& p) {
  std::vector<HostTensor*> inputs{&p.q, &p.k, &p.v}, outputs{&p.out};
  if (p.c.is_paged()) inputs = {&p.q, &p.k_pages, &p.v_pages, &p.block_table};  // what the call reads
  for (HostTensor* t : varlen_offsets(p)) inputs.push_back(t);
  if (p.c.with_lse) outputs.push_back(&p.lse);
  return call(backend, p, &Problem::forward_args, inputs, outputs);
}

CallResult run_backward(Backend backend, Problem& p) {
  std::vector<HostTensor*> inputs{&p.q, &p.k, &p.v, &p.out, &p.lse, &p.dout};
  for (HostTensor* t : varlen_offsets(p)) inputs.push_back(t);
  return call(backend, p, &Problem::backward_args, inputs, {&p.dq, &p.dk, &p.dv});
}

}  // namespace fa_test
