// Honest FLOP and byte counts: only the (query, key) pairs the mask leaves visible are counted, and
// only the keys some query sees are read.
#pragma once

#include <cstdint>

#include "config.hpp"
#include "problem.hpp"

namespace fa_cli {

// Pairs (i, j), 0 <= i < seqlen_q, 0 <= j < seqlen_k, with
//   i + diag - left <= j <= i + diag + right,  diag = seqlen_k - seqlen_q  (left/right < 0: unbounded).
int64_t visible_pairs(int64_t seqlen_q, int64_t seqlen_k, int64_t left, int64_t right);

// Keys of one sequence that some query row sees: the union of the rows' ranges above (one span:
// each row's range moves by one key per row). A decode call must read these rows of K and V.
int64_t keys_seen(int64_t seqlen_q, int64_t seqlen_k, int64_t left, int64_t right);

// Visible pairs summed over the batch (each sequence with its own lengths) and the query heads.
double total_visible_pairs(const Layout& layout, const RunConfig& config);

// forward: 2 * pairs * (d_qk + d_v)   (S = Q K^T, then O = P V)
// backward: 2 * pairs * (3 d_qk + 2 d_v)   (S again, dV, dP, dQ, dK)
double forward_flops(const Layout& layout, const RunConfig& config);
double backward_flops(const Layout& layout, const RunConfig& config);

// Entries of the N x N score matrices a naive implementation would hold: batch * heads * sq * sk.
double score_entries(const Layout& layout);

}  // namespace fa_cli
