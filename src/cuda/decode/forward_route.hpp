// Many query rows against a cache (chunked prefill) through the forward. The decode kernel packs a
// kv group's query rows into 16-row tiles and reads each K/V byte once per tile: right for a few
// query rows, compute-bound for hundreds (0.2–0.3 × the forward at 2048 rows, docs/kvcache.md). Such
// a call is a varlen forward over a paged cache: q's rows packed b · seqlen_q apart, each sequence's
// keys(b) as cu_seqlens_k, and a contiguous cache a pool of pages that are its cache rows
// (page_size = seqlen_cache, the table of sequence b its cache_row(b)). The decode family appends and
// rotates as always, writes that sequence index (prepare.cu) into its workspace, and runs the first
// forward family that plans the call (sm90's TMA boxes when the page size makes whole key blocks,
// else sm80's), inside its own plan and workspace.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "backend/family.hpp"
#include "cuda/decode/launch.hpp"

namespace flashattn::cuda::decode {

// When the forward is faster than the decode kernel (measured on the H200, bf16 GQA 32/8 hdim 128,
// docs/kvcache.md "Long queries"): from 128 query rows per sequence (1.0–5× at 128, 1.8–6.3× from
// 192), and from 64 when the forward's first tiles (batch · heads_q of them) fill 40 % of the SMs or
// more (64 rows at batch 2: 1.0–1.2×, batch 4: 1.7–2.4×; at batch 1, 32 tiles: 0.8–1.1×).
inline constexpr int64_t kForwardRouteMinQueries = 128;
inline constexpr int64_t kForwardRouteMinQueriesWideGrid = 64;

// The forward family's plan for the call, kept inside the decode family's plan.
struct ForwardRoute {
  static constexpr std::size_t kDetailBytes = 32;

  const Family* family = nullptr;  // null: the decode kernel runs the call
  std::size_t workspace_bytes = 0, workspace_alignment = 1;
  std::size_t detail_size = 0;
  alignas(16) unsigned char detail[kDetailBytes] = {};
};

// Whether the call goes to the forward: enough query rows (above, or the test knob), and a call the
// forward can express (no cache_leftpad, no num_splits asked of the decode kernel, q and out rows
// evenly spaced across the batch, 32-bit sequence offsets).
bool wants_forward_route(const KVCacheParams& p, int num_sms);

// ok with *route filled, or why no forward family takes the call (the decode kernel then runs it).
Status plan_forward_route(const KVCacheParams& p, ForwardRoute* route);

// Bytes of the sequence index (cu_seqlens_q, cu_seqlens_k, cache rows) in the workspace.
std::size_t sequence_index_bytes(const KVCacheParams& p);

// Writes the sequence index (of sequence_index_bytes) at `index_at`, from the call's cache `index`,
// and runs the forward on q (launch.hpp's query_rows) with `workspace` of route.workspace_bytes.
Status run_forward_route(const ForwardRoute& route, const KVCacheParams& p, const CacheIndex& index,
                         const QueryRows& q, void* index_at, void* workspace, cudaStream_t stream);

}  // namespace flashattn::cuda::decode
