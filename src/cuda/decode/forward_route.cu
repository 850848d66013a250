#include "cuda/decode/forward_route.hpp"

#include <climits>
#include <cstring>
#include <string>

#include "backend/status_try.hpp"
#include "backend/testing.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/decode/launch.hpp"

namespace flashattn::cuda::decode {
namespace {

// The sequence index's three arrays, in this order, in the workspace.
struct SequenceIndex {
  int32_t* cu_seqlens_q;  // [batch + 1]
  int32_t* cu_seqlens_k;  // [batch + 1]
  int32_t* cache_rows;    // [batch], contiguous caches only
};

SequenceIndex sequence_index_at(const KVCacheParams& p, void* at) {
  auto* ints = static_cast<int32_t*>(at);
  return {ints, ints + p.batch + 1, p.is_paged() ? nullptr : ints + 2 * (p.batch + 1)};
}

// The call as a varlen forward over a paged cache (forward_route.hpp). Query rows (q's or the rotated
// copy's) and the output are packed b · seqlen_q rows apart (wants_forward_route checked the strides
// allow it); lse keeps its
// [batch, heads_q, seqlen_q] layout through its batch stride, less the sequence's packed offset.
FwdParams forward_params(const KVCacheParams& p, const SequenceIndex& ix, const QueryRows& q) {
  FwdParams f = p;
  f.q = q.data;
  f.q_row_stride = q.row_stride;
  f.q_head_stride = q.head_stride;
  f.q_batch_stride = 0;
  f.o_batch_stride = 0;
  f.lse_batch_stride = p.lse_batch_stride - p.seqlen_q;
  f.cu_seqlens_q = ix.cu_seqlens_q;
  f.cu_seqlens_k = ix.cu_seqlens_k;
  f.total_q = p.batch * p.seqlen_q;
  if (!p.is_paged()) {  // pages are the cache rows
    f.block_table = ix.cache_rows;
    f.block_table_batch_stride = 1;
    f.page_size = p.seqlen_k;
    f.max_pages = 1;
    f.num_pages = p.batch_cache;
  }
  f.total_k = f.num_pages * f.page_size;
  f.zero_rows_outside_sequences = false;
  f.workspace = nullptr;
  f.workspace_bytes = 0;
  return f;
}

bool rows_evenly_spaced(int64_t batch, int64_t rows, int64_t batch_stride, int64_t row_stride) {
  return batch == 1 || batch_stride == rows * row_stride;
}

bool enough_queries(const KVCacheParams& p, int num_sms) {
  if (p.seqlen_q >= kForwardRouteMinQueries) return true;
  return p.seqlen_q >= kForwardRouteMinQueriesWideGrid && 10 * p.batch * p.heads_q >= 4 * int64_t{num_sms};
}

}  // namespace

bool wants_forward_route(const KVCacheParams& p, int num_sms) {
  const testing::KVCacheRoute forced = testing::kvcache_route();
  if (forced == testing::KVCacheRoute::decode) return false;
  if (forced != testing::KVCacheRoute::forward && !enough_queries(p, num_sms)) return false;
  const QueryRows q = query_rows(p, p.q);  // a rotated copy's layout, or q's
  return p.cache_leftpad == nullptr && p.num_splits == 0 && p.batch >= 1 &&
         rows_evenly_spaced(p.batch, p.seqlen_q, q.batch_stride, q.row_stride) &&
         rows_evenly_spaced(p.batch, p.seqlen_q, p.o_batch_stride, p.o_row_stride) &&
         p.batch * p.seqlen_q <= INT_MAX && p.batch * p.seqlen_k <= INT_MAX;
}

Status plan_forward_route(const KVCacheParams& p, ForwardRoute* route) {
  // The plan reads no index array: any non-null addresses make the call varlen and paged.
  alignas(16) static int32_t plan_only[3];
  const FwdParams f = forward_params(p, {plan_only, plan_only + 1, plan_only + 2}, query_rows(p, p.q));
  Status refused = Status::unsupported("cuda decode: no forward family in this build");
  for (const Family* family : {&sm90_family(), &sm80_family()}) {
    if (!chosen_by_auto<FwdParams>(*family) || family->forward.plan == nullptr) continue;
    Plan plan;
    refused = family->forward.plan(f, &plan);
    if (refused.ok() && !plan.in_auto) {
      refused = Status::unsupported(std::string("cuda decode: the ") + family->name + " forward runs this call only when named");
    }
    if (!refused.ok()) continue;
    if (plan.detail_size > ForwardRoute::kDetailBytes) {
      return Status::unsupported(std::string("cuda decode: the ") + family->name + " forward's plan does not fit the route");
    }
    route->family = family;
    route->workspace_bytes = plan.workspace_bytes;
    route->workspace_alignment = plan.workspace_alignment;
    route->detail_size = plan.detail_size;
    std::memcpy(route->detail, plan.detail, plan.detail_size);
    return Status::success();
  }
  return refused;
}

std::size_t sequence_index_bytes(const KVCacheParams& p) {
  return static_cast<std::size_t>(3 * p.batch + 2) * sizeof(int32_t);
}

Status run_forward_route(const ForwardRoute& route, const KVCacheParams& p, const CacheIndex& index,
                         const QueryRows& q, void* index_at, void* workspace, cudaStream_t stream) {
  const SequenceIndex ix = sequence_index_at(p, index_at);
  SequenceIndexParams s{};
  s.index = index;
  s.batch = static_cast<int>(p.batch);
  s.seqlen_q = static_cast<int>(p.seqlen_q);
  s.cu_seqlens_q = ix.cu_seqlens_q;
  s.cu_seqlens_k = ix.cu_seqlens_k;
  s.cache_rows = ix.cache_rows;
  FLASHATTN_TRY(launch_sequence_index(s, stream));
  FwdParams f = forward_params(p, ix, q);
  f.workspace = workspace;
  f.workspace_bytes = route.workspace_bytes;
  Plan plan;
  plan.family = route.family;
  plan.workspace_bytes = route.workspace_bytes;
  plan.workspace_alignment = route.workspace_alignment;
  plan.detail_size = route.detail_size;
  std::memcpy(plan.detail, route.detail, route.detail_size);
  return route.family->forward.run(plan, f);
}

}  // namespace flashattn::cuda::decode
