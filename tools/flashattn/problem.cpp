#include "problem.hpp"

#include <cstring>
#include <utility>

#include "random_fill.hpp"

namespace fa_cli {

using flashattn::Device;
using flashattn::DType;
using flashattn::TensorView;

namespace {

// Random-stream ids, so every input is independent of the others and of the thread count.
enum Stream : uint64_t { kStreamQ = 1, kStreamK, kStreamV, kStreamDout, kStreamLengthsQ, kStreamLengthsK };

std::vector<int32_t> random_offsets(int64_t batch, int64_t max_len, uint64_t seed, uint64_t stream) {
  Rng rng(seed, stream);
  std::vector<int32_t> cu(batch + 1, 0);
  for (int64_t b = 0; b < batch; ++b) cu[b + 1] = static_cast<int32_t>(cu[b] + rng.uniform(1, max_len));
  return cu;
}

int64_t max_length(const std::vector<int32_t>& cu) {
  int64_t m = 0;
  for (std::size_t b = 0; b + 1 < cu.size(); ++b) m = std::max<int64_t>(m, cu[b + 1] - cu[b]);
  return m;
}

std::size_t rows_bytes(int64_t rows, int64_t heads, int64_t d, DType dtype) {
  return static_cast<std::size_t>(rows) * static_cast<std::size_t>(heads) * static_cast<std::size_t>(d) *
         flashattn::element_size(dtype);
}

// [batch, seqlen, heads, d], or packed [total, heads, d] for varlen.
TensorView rows_view(const Layout& l, const Buffer& buf, DType dtype, bool q_side, int64_t heads, int64_t d) {
  const int64_t seqlen = q_side ? l.seqlen_q : l.seqlen_k;
  const int64_t total = q_side ? l.total_q : l.total_k;
  if (l.varlen) return TensorView::contiguous(buf.data(), dtype, buf.device(), {total, heads, d});
  return TensorView::contiguous(buf.data(), dtype, buf.device(), {l.batch, seqlen, heads, d});
}

TensorView lse_view(const Layout& l, const Buffer& buf) {
  if (l.varlen) return TensorView::contiguous(buf.data(), DType::f32, buf.device(), {l.heads_q, l.total_q});
  return TensorView::contiguous(buf.data(), DType::f32, buf.device(), {l.batch, l.heads_q, l.seqlen_q});
}

void fill_common(const Layout& l, const RunConfig& c, const Tensors& t, flashattn::AttentionArgs* a, void* stream) {
  a->q = rows_view(l, t.q, c.dtype, true, l.heads_q, l.hdim_qk);
  a->k = rows_view(l, t.k, c.dtype, false, l.heads_kv, l.hdim_qk);
  a->v = rows_view(l, t.v, c.dtype, false, l.heads_kv, l.hdim_v);
  if (l.varlen) {
    a->cu_seqlens_q = TensorView::contiguous(t.cu_q.data(), DType::i32, t.device, {l.batch + 1});
    a->cu_seqlens_k = TensorView::contiguous(t.cu_k.data(), DType::i32, t.device, {l.batch + 1});
    a->max_seqlen_q = l.seqlen_q;
    a->max_seqlen_k = l.seqlen_k;
  }
  a->options = c.options;
  a->path = c.path;
  a->stream = stream;
}

}  // namespace

Layout make_layout(const RunConfig& c) {
  Layout l;
  l.batch = c.batch;
  l.heads_q = c.heads_q;
  l.heads_kv = c.heads_kv;
  l.hdim_qk = c.hdim_qk;
  l.hdim_v = c.hdim_v;
  l.varlen = c.varlen;
  if (c.varlen) {
    l.cu_q = random_offsets(c.batch, c.seqlen_q, c.seed, kStreamLengthsQ);
    l.cu_k = random_offsets(c.batch, c.seqlen_k, c.seed, kStreamLengthsK);
    l.seqlen_q = max_length(l.cu_q);
    l.seqlen_k = max_length(l.cu_k);
    l.total_q = l.cu_q.back();
    l.total_k = l.cu_k.back();
  } else {
    l.seqlen_q = c.seqlen_q;
    l.seqlen_k = c.seqlen_k;
    l.total_q = c.batch * c.seqlen_q;
    l.total_k = c.batch * c.seqlen_k;
  }
  return l;
}

std::size_t Tensors::bytes() const {
  std::size_t n = 0;
  for (const Buffer* b : {&q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv, &cu_q, &cu_k, &workspace}) n += b->bytes();
  return n;
}

std::string allocate_tensors(const Layout& l, const RunConfig& c, Device device, Tensors* t) {
  t->device = device;
  const DType dt = c.dtype;
  struct Want {
    Buffer* buf;
    std::size_t bytes;
  };
  const std::size_t cu_bytes = l.varlen ? static_cast<std::size_t>(l.batch + 1) * sizeof(int32_t) : 0;
  std::vector<Want> wants = {
      {&t->q, rows_bytes(l.total_q, l.heads_q, l.hdim_qk, dt)},
      {&t->k, rows_bytes(l.total_k, l.heads_kv, l.hdim_qk, dt)},
      {&t->v, rows_bytes(l.total_k, l.heads_kv, l.hdim_v, dt)},
      {&t->out, rows_bytes(l.total_q, l.heads_q, l.hdim_v, dt)},
      {&t->lse, rows_bytes(l.total_q, l.heads_q, 1, DType::f32)},
      {&t->cu_q, cu_bytes},
      {&t->cu_k, cu_bytes},
  };
  if (c.backward) {
    wants.push_back({&t->dout, rows_bytes(l.total_q, l.heads_q, l.hdim_v, dt)});
    wants.push_back({&t->dq, rows_bytes(l.total_q, l.heads_q, l.hdim_qk, dt)});
    wants.push_back({&t->dk, rows_bytes(l.total_k, l.heads_kv, l.hdim_qk, dt)});
    wants.push_back({&t->dv, rows_bytes(l.total_k, l.heads_kv, l.hdim_v, dt)});
  }
  for (const Want& w : wants) {
    std::string e = w.buf->allocate(device, w.bytes);
    if (!e.empty()) return e;
  }
  return "";
}

void fill_inputs(const Layout& l, const RunConfig& c, Tensors* t) {
  fill_normal(t->q.data(), c.dtype, l.total_q * l.heads_q * l.hdim_qk, c.seed, kStreamQ);
  fill_normal(t->k.data(), c.dtype, l.total_k * l.heads_kv * l.hdim_qk, c.seed, kStreamK);
  fill_normal(t->v.data(), c.dtype, l.total_k * l.heads_kv * l.hdim_v, c.seed, kStreamV);
  if (c.backward) fill_normal(t->dout.data(), c.dtype, l.total_q * l.heads_q * l.hdim_v, c.seed, kStreamDout);
  if (l.varlen) {
    std::memcpy(t->cu_q.data(), l.cu_q.data(), t->cu_q.bytes());
    std::memcpy(t->cu_k.data(), l.cu_k.data(), t->cu_k.bytes());
  }
  // Outputs start as NaN (0xff bytes are NaN in f32, f16 and bf16): an unwritten element fails.
  for (Buffer* b : {&t->out, &t->lse, &t->dq, &t->dk, &t->dv}) {
    if (b->data()) std::memset(b->data(), 0xff, b->bytes());
  }
}

std::string copy_inputs(const Tensors& host, Tensors* device) {
  for (auto [from, to] : {std::pair{&host.q, &device->q}, {&host.k, &device->k}, {&host.v, &device->v},
                          {&host.dout, &device->dout}, {&host.cu_q, &device->cu_q}, {&host.cu_k, &device->cu_k}}) {
    std::string e = copy_buffer(*from, to);
    if (!e.empty()) return e;
  }
  return "";
}

std::string copy_outputs(const Tensors& device, Tensors* host, bool backward) {
  std::vector<std::pair<const Buffer*, Buffer*>> pairs = {{&device.out, &host->out}, {&device.lse, &host->lse}};
  if (backward) {
    pairs.insert(pairs.end(), {{&device.dq, &host->dq}, {&device.dk, &host->dk}, {&device.dv, &host->dv}});
  }
  for (auto [from, to] : pairs) {
    std::string e = copy_buffer(*from, to);
    if (!e.empty()) return e;
  }
  return "";
}

flashattn::ForwardArgs forward_args(const Layout& l, const RunConfig& c, const Tensors& t, void* stream) {
  flashattn::ForwardArgs a;
  fill_common(l, c, t, &a, stream);
  a.out = rows_view(l, t.out, c.dtype, true, l.heads_q, l.hdim_v);
  a.lse = lse_view(l, t.lse);
  a.workspace = t.workspace.data();
  a.workspace_bytes = t.workspace.bytes();
  return a;
}

flashattn::BackwardArgs backward_args(const Layout& l, const RunConfig& c, const Tensors& t, void* stream) {
  flashattn::BackwardArgs a;
  fill_common(l, c, t, &a, stream);
  a.out = rows_view(l, t.out, c.dtype, true, l.heads_q, l.hdim_v);
  a.lse = lse_view(l, t.lse);
  a.dout = rows_view(l, t.dout, c.dtype, true, l.heads_q, l.hdim_v);
  a.dq = rows_view(l, t.dq, c.dtype, true, l.heads_q, l.hdim_qk);
  a.dk = rows_view(l, t.dk, c.dtype, false, l.heads_kv, l.hdim_qk);
  a.dv = rows_view(l, t.dv, c.dtype, false, l.heads_kv, l.hdim_v);
  a.deterministic = c.deterministic;
  a.workspace = t.workspace.data();
  a.workspace_bytes = t.workspace.bytes();
  return a;
}

}  // namespace fa_cli
