// The backend contract, part 1: the validated form of a call, what every kernel family receives.
// Host arguments (public TensorViews) become these plain params once validation (src/api) has
// passed, so families never re-check. Both layers depend on this folder; it depends on neither.
//
// Indexing (uniform for padded and varlen batches): element (b, row, h, d) of q is at
//   q + b * q_batch_stride + (row_offset_q(b) + row) * q_row_stride + h * q_head_stride + d
// where row_offset_q(b) = cu_seqlens_q[b] for varlen (and q_batch_stride = 0), else 0. The same
// holds for k, v (row_offset_k), out, dout, dq (row_offset_q), dk, dv (row_offset_k) -- except
// for paged k, v (block_table set, see FwdParams), which are addressed through their pages.
// lse / D (fp32): lse + b * lse_batch_stride + h * lse_head_stride + row_offset_q(b) + row.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "flashattn/flashattn.hpp"

namespace flashattn {

// The mask as the kernels use it: query row i (of seqlen_q rows) may see key j iff
//   i + diag − left ≤ j ≤ i + diag + right, diag = seqlen_k − seqlen_q (per sequence).
// left/right < 0 mean unbounded; causal has been folded into right = 0 (and left kept).
struct MaskParams {
  bool causal = false;       // right == 0 from `causal` (kept for kernel specialization)
  int64_t window_left = -1;  // < 0: unbounded
  int64_t window_right = -1; // < 0: unbounded
  bool has_mask() const { return window_left >= 0 || window_right >= 0; }
};

// Validation leaves the public AttentionOptions normalized: softmax_scale has a value, causal has
// become window_right = 0, and a window that reaches past every sequence is −1 (unbounded), so a
// window is always ≤ max(seqlen_q, seqlen_k) and mask arithmetic cannot overflow anywhere.
inline float softmax_scale(const AttentionOptions& o) { return o.softmax_scale.value_or(1.f); }
inline MaskParams mask_of(const AttentionOptions& o) { return {o.causal, o.window_left, o.window_right}; }

struct FwdParams {
  DType dtype = DType::f32;  // of q, k, v, out (and dout, dq, dk, dv in the backward)
  Device device = Device::cpu;

  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  float* lse = nullptr;  // may be null in the forward (not requested)

  int64_t batch = 0;
  int64_t seqlen_q = 0, seqlen_k = 0;  // padded batch: the lengths; varlen: the maxima
  int64_t heads_q = 0, heads_kv = 0;   // heads_q % heads_kv == 0
  int64_t hdim_qk = 0, hdim_v = 0;

  int64_t q_batch_stride = 0, q_row_stride = 0, q_head_stride = 0;
  int64_t k_batch_stride = 0, k_row_stride = 0, k_head_stride = 0;
  int64_t v_batch_stride = 0, v_row_stride = 0, v_head_stride = 0;
  int64_t o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;
  int64_t lse_batch_stride = 0, lse_head_stride = 0;

  // Varlen: both set (int32 [batch + 1], on `device`), or both null.
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  int64_t total_q = 0, total_k = 0;  // rows of the packed tensors (varlen), else batch * seqlen;
                                     // the paged forward's k, v: num_pages * page_size

  // Paged K/V (flash-attn's block_table), one definition for the KV-cache call's paged cache and the
  // varlen forward's paged keys (paged prefill): k and v are [num_pages, page_size, heads_kv, d] and
  // key t of sequence b, head h, dim d lives at
  //   k + page * k_batch_stride + (t % page_size) * k_row_stride + h * k_head_stride + d,
  //   page = block_table[b * block_table_batch_stride + t / page_size]
  // (the same for v): k_batch_stride is the page stride and the keys are not packed (the forward's
  // cu_seqlens_k gives only each sequence's length). Host page indices are checked by validation.
  const int32_t* block_table = nullptr;  // paged when non-null: int32 [batch, max_pages]
  int64_t block_table_batch_stride = 0;
  int64_t page_size = 0;  // ≥ 1
  int64_t max_pages = 0;  // block_table's second dimension: a sequence holds ≤ max_pages * page_size keys
  int64_t num_pages = 0;  // k's first dimension (page indices are < num_pages)

  AttentionOptions options;  // normalized (see softmax_scale() and mask_of() above)

  void* stream = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  bool zero_rows_outside_sequences = false;  // varlen only (see AttentionArgs)

  bool is_varlen() const { return cu_seqlens_q != nullptr; }
  bool is_paged() const { return block_table != nullptr; }
  int64_t group_size() const { return heads_q / heads_kv; }  // query heads per kv head
};

// One packed (varlen) output's rows that no sequence covers: [0, cu_seqlens[0]) and
// [cu_seqlens[batch], total), each `heads` runs of row_bytes bytes at
// base + row * row_stride + h * head_stride (strides in bytes). The offsets are read where they
// live and clamped to [0, total], so bad offsets never move a write outside the tensor.
struct PackedRows {
  void* base = nullptr;
  int64_t row_stride = 0, head_stride = 0;
  int64_t heads = 0, row_bytes = 0;
  const int32_t* cu_seqlens = nullptr;
  int64_t batch = 0, total = 0;

  // The sequences' rows [first, last) (the rows outside are [0, first) and [last, total)), read
  // where cu_seqlens lives: on the host by the CPU, on the device by the CUDA kernel.
  constexpr int64_t first() const { return std::clamp<int64_t>(cu_seqlens[0], 0, total); }
  constexpr int64_t last(int64_t first_row) const { return std::clamp<int64_t>(cu_seqlens[batch], first_row, total); }
};
inline constexpr int kMaxPackedOutputs = 3;  // dq, dk, dv

// The gradients' memory when the caller allocates it late (BackwardArgs::gradient_allocator): its
// allocator, and what it gave once asked (src/api/api.cpp holds one per call).
struct LateGradients {
  GradientAllocator allocator;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  bool given = false;
};

struct BwdParams : FwdParams {
  const void* dout = nullptr;
  void* dq = nullptr;  // null while late_gradients has not given them: see gradient_pointers()
  void* dk = nullptr;
  void* dv = nullptr;
  int64_t do_batch_stride = 0, do_row_stride = 0, do_head_stride = 0;
  int64_t dq_batch_stride = 0, dq_row_stride = 0, dq_head_stride = 0;
  int64_t dk_batch_stride = 0, dk_row_stride = 0, dk_head_stride = 0;
  int64_t dv_batch_stride = 0, dv_row_stride = 0, dv_head_stride = 0;
  bool deterministic = false;
  LateGradients* late_gradients = nullptr;  // set when the caller allocates dq, dk, dv late
};

struct GradientPointers {
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
};

// dq, dk and dv's memory: the call's, or (allocated late) the caller's allocator's, asked for once
// here, the pointers' alignment checked. A family calls it after its first launch, before anything
// writes a gradient (src/api/api.cpp).
Status gradient_pointers(const BwdParams& p, GradientPointers* g);
// The same, set into p's dq, dk and dv (a family running on a copy of its params; the API after a run).
Status take_gradients(BwdParams* p);

// A KV-cache call (KVCacheArgs), validated. The FwdParams part describes the attention: q, out,
// lse as in the forward; k/v point at the caches (k_cache/v_cache, writable for the append);
// seqlen_k is the cache's capacity per sequence (seqlen_cache, or max_pages · page_size when paged);
// heads, head dims and options as in the forward (is_varlen() is false). Sequence b's keys:
//   seqlen_k(b) = (cache_seqlens ? cache_seqlens[b] : seqlen_k) + seqlen_new,   ≤ capacity (checked
//   on the device by the kernels, which clamp: never a read or write beyond the capacity).
// Key t of sequence b, head h, dim d lives at
//   contiguous: k + cache_row(b) * k_batch_stride + t * k_row_stride + h * k_head_stride + d,
//               cache_row(b) = cache_batch_idx ? cache_batch_idx[b] : b;
//   paged:      FwdParams' paged addressing (block_table, page_size, ...).
struct KVCacheParams : FwdParams {
  void* k_cache = nullptr;  // == k, writable
  void* v_cache = nullptr;  // == v, writable
  const int32_t* cache_seqlens = nullptr;    // [batch], or null: every sequence has seqlen_k cached keys
  const int32_t* cache_batch_idx = nullptr;  // [batch], contiguous only, or null
  const int32_t* cache_leftpad = nullptr;    // [batch], contiguous only, or null: sequence b's keys are
                                             // cache rows [cache_leftpad[b], cache_seqlens[b] + seqlen_new)
  int64_t batch_cache = 0;     // contiguous only: k_cache's first dimension

  // Appended keys and values (null when none): [batch, seqlen_new, heads_kv, hdim].
  const void* k_new = nullptr;
  const void* v_new = nullptr;
  int64_t seqlen_new = 0;
  int64_t kn_batch_stride = 0, kn_row_stride = 0, kn_head_stride = 0;
  int64_t vn_batch_stride = 0, vn_row_stride = 0, vn_head_stride = 0;

  // Rotary tables (null when none): [seqlen_rotary, rotary_dim / 2], rows contiguous, of `dtype`.
  // The positions rotated (cache_seqlens[b] + t for the appended keys, see rotary_per_query() for q)
  // are < seqlen_rotary: checked on the host for CPU tensors; device kernels clamp them.
  const void* rotary_cos = nullptr;
  const void* rotary_sin = nullptr;
  int64_t rotary_dim = 0, seqlen_rotary = 0, rotary_row_stride = 0;
  bool rotary_interleaved = false;

  int num_splits = 0;  // 0: the family chooses

  // Where q is rotated: query i at cache_seqlens[b] + i when the (normalized) mask is causal or a
  // window, else every query at cache_seqlens[b] (flash-attn's rule).
  bool rotary_per_query() const { return mask_of(options).has_mask(); }
};

}  // namespace flashattn
