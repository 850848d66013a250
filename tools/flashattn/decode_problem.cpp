#include "decode_problem.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

#include "cpu/convert.hpp"
#include "random_fill.hpp"

namespace fa_cli {

using flashattn::Device;
using flashattn::DType;
using flashattn::TensorView;

namespace {

// Random-stream ids; a cache side draws one stream per sequence (sequence_stream), so a sequence's
// rows do not depend on where the layout puts them.
enum Stream : uint64_t { kStreamQ = 1, kStreamKNew, kStreamVNew, kStreamPages, kStreamKCache, kStreamVCache };
uint64_t sequence_stream(Stream side, int64_t b) { return (static_cast<uint64_t>(side) << 24) + static_cast<uint64_t>(b); }

std::size_t elements_bytes(int64_t n, DType dtype) { return static_cast<std::size_t>(n) * flashattn::element_size(dtype); }

// Positions the rotary tables must hold: the appended keys sit at cached + t, the queries at
// cached + i (causal or windowed) or cached.
int64_t rotary_positions(const DecodeConfig& c) { return c.cached + std::max(c.new_rows, c.seqlen_q); }
int64_t rotary_dim(const DecodeConfig& c) { return c.hdim_qk / 2 * 2; }

// Every buffer with the bytes it needs.
std::vector<std::pair<Buffer*, std::size_t>> buffer_sizes(const DecodeConfig& c, DecodeTensors* t) {
  const CacheShape shape = cache_shape(c);
  const int64_t kv_rows = shape.slabs * shape.rows * c.heads_kv, q_rows = c.batch * c.seqlen_q * c.heads_q;
  const int64_t new_rows = c.batch * c.new_rows * c.heads_kv;
  const int64_t rotary = c.rotary == Rotary::none ? 0 : rotary_positions(c) * (rotary_dim(c) / 2);
  return {
      {&t->q, elements_bytes(q_rows * c.hdim_qk, c.dtype)},
      {&t->k_cache, elements_bytes(kv_rows * c.hdim_qk, c.dtype)},
      {&t->v_cache, elements_bytes(kv_rows * c.hdim_v, c.dtype)},
      {&t->k_new, elements_bytes(new_rows * c.hdim_qk, c.dtype)},
      {&t->v_new, elements_bytes(new_rows * c.hdim_v, c.dtype)},
      {&t->cache_seqlens, elements_bytes(c.batch, DType::i32)},
      {&t->block_table, elements_bytes(c.batch * c.pages_per_sequence(), DType::i32)},
      {&t->rotary_cos, elements_bytes(rotary, c.dtype)},
      {&t->rotary_sin, elements_bytes(rotary, c.dtype)},
      {&t->out, elements_bytes(q_rows * c.hdim_v, c.dtype)},
      {&t->lse, elements_bytes(q_rows, DType::f32)},
  };
}

// Sequence b's page j is pool page block_table[b][j]: the pool's pages in a random order, dealt
// out in turn; the spare pages at the end of the shuffled pool go to nobody.
std::vector<int32_t> shuffled_block_table(const DecodeConfig& c) {
  std::vector<int32_t> pool(static_cast<std::size_t>(c.pool_pages()));
  std::iota(pool.begin(), pool.end(), 0);
  Rng rng(c.seed, kStreamPages);
  for (int64_t i = c.pool_pages() - 1; i > 0; --i) std::swap(pool[i], pool[rng.uniform(0, i)]);
  pool.resize(static_cast<std::size_t>(c.batch * c.pages_per_sequence()));
  return pool;
}

// One cache side: NaN everywhere, then each sequence's first `cached` rows (row_elems elements
// each) drawn from its own stream, straight into its slab (contiguous) or through a scratch copy
// split over its pages.
void fill_cache_side(const DecodeConfig& c, const std::vector<int32_t>& block_table, int64_t row_elems, Stream side,
                     Buffer* cache) {
  std::memset(cache->data(), 0xff, cache->bytes());
  const std::size_t row_bytes = elements_bytes(row_elems, c.dtype);
  auto* base = static_cast<unsigned char*>(cache->data());
  if (!c.paged()) {
    for (int64_t b = 0; b < c.batch; ++b) {
      fill_normal(base + b * c.capacity() * row_bytes, c.dtype, c.cached * row_elems, c.seed, sequence_stream(side, b));
    }
    return;
  }
  std::vector<unsigned char> rows(c.cached * row_bytes);
  for (int64_t b = 0; b < c.batch; ++b) {
    fill_normal(rows.data(), c.dtype, c.cached * row_elems, c.seed, sequence_stream(side, b));
    for (int64_t first = 0, j = 0; first < c.cached; first += c.page_size, ++j) {
      const int64_t page = block_table[static_cast<std::size_t>(b * c.pages_per_sequence() + j)];
      const int64_t n = std::min(c.page_size, c.cached - first);
      std::memcpy(base + page * c.page_size * row_bytes, rows.data() + first * row_bytes, n * row_bytes);
    }
  }
}

// cos and sin of position * 10000^(-2i / rotary_dim), the usual frequencies, in the inputs' dtype.
void fill_rotary_tables(const DecodeConfig& c, DecodeTensors* t) {
  const int64_t half = rotary_dim(c) / 2;
  for (int64_t pos = 0; pos < rotary_positions(c); ++pos) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(pos) * std::pow(10000.0, -2.0 * static_cast<double>(i) / (2 * half));
      flashattn::store_from_float(t->rotary_cos.data(), c.dtype, pos * half + i, static_cast<float>(std::cos(angle)));
      flashattn::store_from_float(t->rotary_sin.data(), c.dtype, pos * half + i, static_cast<float>(std::sin(angle)));
    }
  }
}

}  // namespace

CacheShape cache_shape(const DecodeConfig& c) {
  if (c.paged()) return {c.pool_pages(), c.page_size};
  return {c.batch, c.capacity()};
}

std::size_t DecodeTensors::bytes() const {
  std::size_t n = 0;
  for (const Buffer* b : {&q, &k_cache, &v_cache, &k_new, &v_new, &cache_seqlens, &block_table, &rotary_cos,
                          &rotary_sin, &out, &lse, &workspace}) {
    n += b->bytes();
  }
  return n;
}

std::size_t decode_tensors_bytes(const DecodeConfig& c) {
  DecodeTensors none;
  std::size_t n = 0;
  for (const auto& [buffer, bytes] : buffer_sizes(c, &none)) n += bytes;
  return n;
}

std::string allocate_decode_tensors(const DecodeConfig& c, Device device, DecodeTensors* t) {
  t->device = device;
  for (const auto& [buffer, bytes] : buffer_sizes(c, t)) {
    std::string e = buffer->allocate(device, bytes);
    if (!e.empty()) return e;
  }
  return "";
}

void fill_decode_inputs(const DecodeConfig& c, DecodeTensors* t) {
  fill_normal(t->q.data(), c.dtype, c.batch * c.seqlen_q * c.heads_q * c.hdim_qk, c.seed, kStreamQ);
  fill_normal(t->k_new.data(), c.dtype, c.batch * c.new_rows * c.heads_kv * c.hdim_qk, c.seed, kStreamKNew);
  fill_normal(t->v_new.data(), c.dtype, c.batch * c.new_rows * c.heads_kv * c.hdim_v, c.seed, kStreamVNew);
  const std::vector<int32_t> lengths(static_cast<std::size_t>(c.batch), static_cast<int32_t>(c.cached));
  std::memcpy(t->cache_seqlens.data(), lengths.data(), t->cache_seqlens.bytes());
  std::vector<int32_t> block_table;
  if (c.paged()) {
    block_table = shuffled_block_table(c);
    std::memcpy(t->block_table.data(), block_table.data(), t->block_table.bytes());
  }
  fill_cache_side(c, block_table, c.heads_kv * c.hdim_qk, kStreamKCache, &t->k_cache);
  fill_cache_side(c, block_table, c.heads_kv * c.hdim_v, kStreamVCache, &t->v_cache);
  if (c.rotary != Rotary::none) fill_rotary_tables(c, t);
  // Outputs start as NaN: an unwritten element fails the check.
  std::memset(t->out.data(), 0xff, t->out.bytes());
  std::memset(t->lse.data(), 0xff, t->lse.bytes());
}

std::string copy_decode_inputs(const DecodeTensors& host, DecodeTensors* device) {
  for (auto [from, to] : {std::pair{&host.q, &device->q}, {&host.k_cache, &device->k_cache},
                          {&host.v_cache, &device->v_cache}, {&host.k_new, &device->k_new},
                          {&host.v_new, &device->v_new}, {&host.cache_seqlens, &device->cache_seqlens},
                          {&host.block_table, &device->block_table}, {&host.rotary_cos, &device->rotary_cos},
                          {&host.rotary_sin, &device->rotary_sin}}) {
    std::string e = copy_buffer(*from, to);
    if (!e.empty()) return e;
  }
  return "";
}

std::string copy_decode_outputs(const DecodeTensors& device, DecodeTensors* host) {
  std::string e = copy_buffer(device.out, &host->out);
  return e.empty() ? copy_buffer(device.lse, &host->lse) : e;
}

flashattn::KVCacheArgs kvcache_args(const DecodeConfig& c, const DecodeTensors& t, void* stream) {
  const Device d = t.device;
  const CacheShape shape = cache_shape(c);
  flashattn::KVCacheArgs a;
  a.q = TensorView::contiguous(t.q.data(), c.dtype, d, {c.batch, c.seqlen_q, c.heads_q, c.hdim_qk});
  a.k_cache = TensorView::contiguous(t.k_cache.data(), c.dtype, d, {shape.slabs, shape.rows, c.heads_kv, c.hdim_qk});
  a.v_cache = TensorView::contiguous(t.v_cache.data(), c.dtype, d, {shape.slabs, shape.rows, c.heads_kv, c.hdim_v});
  a.cache_seqlens = TensorView::contiguous(t.cache_seqlens.data(), DType::i32, d, {c.batch});
  if (c.paged()) {
    a.block_table = TensorView::contiguous(t.block_table.data(), DType::i32, d, {c.batch, c.pages_per_sequence()});
  }
  if (c.new_rows > 0) {
    a.k_new = TensorView::contiguous(t.k_new.data(), c.dtype, d, {c.batch, c.new_rows, c.heads_kv, c.hdim_qk});
    a.v_new = TensorView::contiguous(t.v_new.data(), c.dtype, d, {c.batch, c.new_rows, c.heads_kv, c.hdim_v});
  }
  if (c.rotary != Rotary::none) {
    a.rotary_cos = TensorView::contiguous(t.rotary_cos.data(), c.dtype, d, {rotary_positions(c), rotary_dim(c) / 2});
    a.rotary_sin = TensorView::contiguous(t.rotary_sin.data(), c.dtype, d, {rotary_positions(c), rotary_dim(c) / 2});
    a.rotary_interleaved = c.rotary == Rotary::interleaved;
  }
  a.out = TensorView::contiguous(t.out.data(), c.dtype, d, {c.batch, c.seqlen_q, c.heads_q, c.hdim_v});
  a.lse = TensorView::contiguous(t.lse.data(), DType::f32, d, {c.batch, c.heads_q, c.seqlen_q});
  a.options = c.options;
  a.num_splits = static_cast<int>(c.num_splits);
  a.path = c.path;
  a.stream = stream;
  a.workspace = t.workspace.data();
  a.workspace_bytes = t.workspace.bytes();
  return a;
}

}  // namespace fa_cli
