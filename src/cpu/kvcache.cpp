// CPU KV-cache call (flash-attn's flash_attn_with_kvcache), in three steps:
//   1. append: k_new (rotated at its positions when rotary tables are given) and v_new are written
//      into the cache at cache_seqlens[b] + t, sequence after sequence (batch order);
//   2. rotate q: with rotary tables, q is rotated into the workspace (a contiguous copy in q's dtype);
//   3. attend: every (sequence, kv head) with its group's query heads packed and its keys split into
//      ranges (attend_decode.hpp) when the queries are few, else every (sequence, query head, query
//      block), runs the forward's tiled online softmax (attend.hpp) over its keys, cache rows
//      [cache_leftpad[b] or 0, cache_seqlens[b] + seqlen_new), read straight from the cache through
//      the cache's row addressing (contiguous row or block_table pages): no gathered copy.
// Validation has checked every index value (lengths, cache rows, pages, rotary positions) for host
// tensors, so nothing here reads or writes outside the views.
#include <vector>

#include "cpu/attend_decode.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/rotary.hpp"

namespace flashattn::cpu {
namespace {

// Cache rows (from row 0) cached before the call, and the first of sequence b's keys (cache_leftpad).
int64_t cached_len(const KVCacheParams& p, int64_t b) { return p.cache_seqlens ? p.cache_seqlens[b] : p.seqlen_k; }
int64_t first_key(const KVCacheParams& p, int64_t b) { return p.cache_leftpad ? p.cache_leftpad[b] : 0; }
// The keys sequence b attends to: rows [first_key, cached_len + seqlen_new).
int64_t keys_of(const KVCacheParams& p, int64_t b) { return cached_len(p, b) - first_key(p, b) + p.seqlen_new; }

// One side of the cache (keys or values): its data and strides (batch stride = page stride when paged).
struct CacheSide {
  void* data;  // writable: the append step stores into it
  int64_t batch_stride, row_stride, head_stride;
};
CacheSide key_side(const KVCacheParams& p) { return {p.k_cache, p.k_batch_stride, p.k_row_stride, p.k_head_stride}; }
CacheSide value_side(const KVCacheParams& p) { return {p.v_cache, p.v_batch_stride, p.v_row_stride, p.v_head_stride}; }

// Sequence b's rows of kv head h in one side of the cache, from row `first` on, as a row
// addressing of attend.hpp (the append writes from row 0; attention reads from first_key).
struct ContiguousCache {
  using Rows = InRows;
  static Rows rows(const KVCacheParams& p, const CacheSide& c, int64_t b, int64_t h, int64_t first) {
    const int64_t cache_row = p.cache_batch_idx ? p.cache_batch_idx[b] : b;
    return head_rows(static_cast<const void*>(c.data), p.dtype, c.batch_stride, c.row_stride, c.head_stride, cache_row,
                     first, h);
  }
};
struct PagedCache {  // no left padding (validation refuses it)
  using Rows = PagedRows;
  static Rows rows(const KVCacheParams& p, const CacheSide& c, int64_t b, int64_t h, int64_t /*first: 0*/) {
    return paged_rows(p, c.data, c.batch_stride, c.row_stride, c.head_stride, b, h);
  }
};

// Step 1 for one side: rows t of `fresh` (k_new or v_new) into the cache at cached_len(b) + t,
// rotated when `rotary` is given. Batch order, one thread: sequences that share cache rows get the
// documented (last writer wins) result instead of a data race.
template <class Cache>
void append_side(const KVCacheParams& p, const CacheSide& cache, const void* fresh, int64_t fresh_batch_stride,
                 int64_t fresh_row_stride, int64_t fresh_head_stride, int64_t dim, const Rotary* rotary) {
  std::vector<float> row(static_cast<size_t>(dim)), angles(static_cast<size_t>(dim));
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads_kv; ++h) {
      const InRows src = head_rows(fresh, p.dtype, fresh_batch_stride, fresh_row_stride, fresh_head_stride, b, 0, h);
      const typename Cache::Rows dst = Cache::rows(p, cache, b, h, 0);
      for (int64_t t = 0; t < p.seqlen_new; ++t) {
        const int64_t pos = cached_len(p, b) + t;
        load_row(row.data(), src.data, p.dtype, src.at(t), dim);
        if (rotary != nullptr) rotate_row(row.data(), *rotary, pos, angles.data());
        store_row(cache.data, p.dtype, dst.at(pos), row.data(), dim);
      }
    }
  }
}

template <class Cache>
void append_new_keys(const KVCacheParams& p) {
  if (p.seqlen_new == 0) return;
  const Rotary rotary = Rotary::of(p);
  append_side<Cache>(p, key_side(p), p.k_new, p.kn_batch_stride, p.kn_row_stride, p.kn_head_stride, p.hdim_qk,
                     p.rotary_cos ? &rotary : nullptr);
  append_side<Cache>(p, value_side(p), p.v_new, p.vn_batch_stride, p.vn_row_stride, p.vn_head_stride, p.hdim_v,
                     nullptr);
}

// Step 2: q rotated into the workspace, contiguous [batch, seqlen_q, heads_q, hdim_qk] of q's dtype.
// Query i of sequence b turns to cached_len(b) + i (causal or windowed calls) or cached_len(b).
void rotate_queries(const KVCacheParams& p, void* rotated_q) {
  const Rotary rotary = Rotary::of(p);
  const int64_t d = p.hdim_qk, rows = p.batch * p.seqlen_q;
#pragma omp parallel
  {
    std::vector<float> row(static_cast<size_t>(d)), angles(static_cast<size_t>(d));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t b = r / p.seqlen_q, i = r % p.seqlen_q;
      const int64_t pos = cached_len(p, b) + (p.rotary_per_query() ? i : 0);
      for (int64_t h = 0; h < p.heads_q; ++h) {
        const InRows src = head_rows(p.q, p.dtype, p.q_batch_stride, p.q_row_stride, p.q_head_stride, b, 0, h);
        load_row(row.data(), src.data, p.dtype, src.at(i), d);
        rotate_row(row.data(), rotary, pos, angles.data());
        store_row(rotated_q, p.dtype, (r * p.heads_q + h) * d, row.data(), d);
      }
    }
  }
}

// Step 3: attention of every query block against its sequence's keys in the cache. Decode-sized
// queries (a GQA group's heads times the queries fit one block) run as attend_decode.hpp lays them
// out: the group's heads packed, the keys split into ranges; longer ones as the forward's tasks.
template <class Cache>
void attend_cache(const KVCacheParams& p, const void* q, int64_t q_batch_stride, int64_t q_row_stride,
                  int64_t q_head_stride) {
  if (decode_packs(p)) {
    const int64_t group = p.group_size();
    attend_groups(p, [&](int64_t b, int64_t h_kv) {
      const int64_t h0 = h_kv * group;  // the group's first query head
      using Views = HeadViews<typename Cache::Rows, GroupRows<const void*>, GroupRows<void*>>;
      return Views{
          {q, p.dtype, b * q_batch_stride + h0 * q_head_stride, q_row_stride, q_head_stride, group},
          Cache::rows(p, key_side(p), b, h_kv, first_key(p, b)),
          Cache::rows(p, value_side(p), b, h_kv, first_key(p, b)),
          {p.out, p.dtype, b * p.o_batch_stride + h0 * p.o_head_stride, p.o_row_stride, p.o_head_stride, group},
          {p.lse ? p.lse + b * p.lse_batch_stride + h0 * p.lse_head_stride : nullptr, p.lse_head_stride, group},
          p.seqlen_q,
          keys_of(p, b),
          group};
    });
    return;
  }
  for_each_query_task(p, [&](const ForwardTiles& tiles, int64_t b, int64_t h, int64_t row0, int64_t blocks) {
    const int64_t h_kv = h / p.group_size();
    const HeadViews<typename Cache::Rows> views{
        head_rows(q, p.dtype, q_batch_stride, q_row_stride, q_head_stride, b, 0, h),
        Cache::rows(p, key_side(p), b, h_kv, first_key(p, b)),
        Cache::rows(p, value_side(p), b, h_kv, first_key(p, b)),
        head_rows(p.out, p.dtype, p.o_batch_stride, p.o_row_stride, p.o_head_stride, b, 0, h),
        LseRows{p.lse ? p.lse + b * p.lse_batch_stride + h * p.lse_head_stride : nullptr},
        p.seqlen_q,
        keys_of(p, b)};
    attend_rows(p, tiles, views, row0, blocks);
  });
}

template <class Cache>
Status run(const KVCacheParams& p) {
  append_new_keys<Cache>(p);
  if (p.rotary_cos == nullptr) {
    attend_cache<Cache>(p, p.q, p.q_batch_stride, p.q_row_stride, p.q_head_stride);
    return Status::success();
  }
  rotate_queries(p, p.workspace);
  const int64_t d = p.hdim_qk;
  attend_cache<Cache>(p, p.workspace, p.seqlen_q * p.heads_q * d, p.heads_q * d, d);
  return Status::success();
}

}  // namespace

std::size_t kvcache_workspace_bytes(const KVCacheParams& p) {
  if (p.rotary_cos == nullptr) return 0;
  return static_cast<std::size_t>(p.batch * p.seqlen_q * p.heads_q * p.hdim_qk) * element_size(p.dtype);
}

Status kvcache(const KVCacheParams& p) { return p.is_paged() ? run<PagedCache>(p) : run<ContiguousCache>(p); }

}  // namespace flashattn::cpu
