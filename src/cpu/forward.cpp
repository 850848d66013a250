// CPU forward: FlashAttention's tiled online softmax (attend.hpp). Each (batch, query head, query
// block) is one task; memory beyond the outputs: a few tiles per thread.
#include "cpu/attend.hpp"
#include "cpu/cpu_backend.hpp"

namespace flashattn::cpu {
namespace {

// Where (sequence b, query head h) lives in the forward's q, k, v, out and lse.
HeadViews<InRows> forward_views(const FwdParams& p, int64_t b, int64_t h) {
  const Sequence seq = sequence_of(p, b);
  const int64_t h_kv = h / p.group_size();  // GQA / MQA: query heads share a kv head
  return {head_rows(p.q, p.dtype, p.q_batch_stride, p.q_row_stride, p.q_head_stride, b, seq.row_offset_q, h),
          head_rows(p.k, p.dtype, p.k_batch_stride, p.k_row_stride, p.k_head_stride, b, seq.row_offset_k, h_kv),
          head_rows(p.v, p.dtype, p.v_batch_stride, p.v_row_stride, p.v_head_stride, b, seq.row_offset_k, h_kv),
          head_rows(p.out, p.dtype, p.o_batch_stride, p.o_row_stride, p.o_head_stride, b, seq.row_offset_q, h),
          p.lse ? lse_rows(p, b, seq, h) : nullptr,
          seq.len_q,
          seq.len_k};
}

}  // namespace

Status forward(const FwdParams& p) {
  for_each_query_task(p, [&](const ForwardTiles& tiles, int64_t b, int64_t h, int64_t row0, int64_t blocks) {
    attend_rows(p, tiles, forward_views(p, b, h), row0, blocks);
  });
  return Status::success();
}

}  // namespace flashattn::cpu
