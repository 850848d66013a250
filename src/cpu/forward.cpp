// CPU forward: FlashAttention's tiled online softmax (attend.hpp). Each (batch, query head, query
// block) is one task; memory beyond the outputs: a few tiles per thread. K and V are read where
// they live: packed or padded rows, or pages through block_table (paged prefill), the same tiles
// in the same order either way, so a paged call gives bitwise the contiguous call's result.
#include "cpu/attend.hpp"
#include "cpu/cpu_backend.hpp"

namespace flashattn::cpu {
namespace {

// Sequence b's rows of kv head h in k or v (`data` with its batch or page, row and head strides).
template <class KVRows>
KVRows kv_rows(const FwdParams& p, const void* data, int64_t batch_stride, int64_t row_stride, int64_t head_stride,
               int64_t b, const Sequence& seq, int64_t h);
template <>
InRows kv_rows<InRows>(const FwdParams& p, const void* data, int64_t batch_stride, int64_t row_stride,
                       int64_t head_stride, int64_t b, const Sequence& seq, int64_t h) {
  return head_rows(data, p.dtype, batch_stride, row_stride, head_stride, b, seq.row_offset_k, h);
}
template <>
PagedRows kv_rows<PagedRows>(const FwdParams& p, const void* data, int64_t page_stride, int64_t row_stride,
                             int64_t head_stride, int64_t b, const Sequence&, int64_t h) {
  return paged_rows(p, data, page_stride, row_stride, head_stride, b, h);
}

// Where (sequence b, query head h) lives in the forward's q, k, v, out and lse.
template <class KVRows>
HeadViews<KVRows> forward_views(const FwdParams& p, int64_t b, int64_t h) {
  const Sequence seq = sequence_of(p, b);
  const int64_t h_kv = h / p.group_size();  // GQA / MQA: query heads share a kv head
  return {head_rows(p.q, p.dtype, p.q_batch_stride, p.q_row_stride, p.q_head_stride, b, seq.row_offset_q, h),
          kv_rows<KVRows>(p, p.k, p.k_batch_stride, p.k_row_stride, p.k_head_stride, b, seq, h_kv),
          kv_rows<KVRows>(p, p.v, p.v_batch_stride, p.v_row_stride, p.v_head_stride, b, seq, h_kv),
          head_rows(p.out, p.dtype, p.o_batch_stride, p.o_row_stride, p.o_head_stride, b, seq.row_offset_q, h),
          LseRows{p.lse ? lse_rows(p, b, seq, h) : nullptr},
          seq.len_q,
          seq.len_k};
}

template <class KVRows>
Status run(const FwdParams& p) {
  for_each_query_task(p, [&](const ForwardTiles& tiles, int64_t b, int64_t h, int64_t row0, int64_t blocks) {
    attend_rows(p, tiles, forward_views<KVRows>(p, b, h), row0, blocks);
  });
  return Status::success();
}

}  // namespace

Status forward(const FwdParams& p) { return p.is_paged() ? run<PagedRows>(p) : run<InRows>(p); }

}  // namespace flashattn::cpu
