#include "flops.hpp"

#include <algorithm>

namespace fa_cli {

int64_t visible_pairs(int64_t seqlen_q, int64_t seqlen_k, int64_t left, int64_t right) {
  const int64_t diag = seqlen_k - seqlen_q;
  int64_t pairs = 0;
  for (int64_t i = 0; i < seqlen_q; ++i) {
    const int64_t lo = left < 0 ? 0 : std::max<int64_t>(0, i + diag - left);
    const int64_t hi = right < 0 ? seqlen_k - 1 : std::min<int64_t>(seqlen_k - 1, i + diag + right);
    pairs += std::max<int64_t>(0, hi - lo + 1);
  }
  return pairs;
}

int64_t keys_seen(int64_t seqlen_q, int64_t seqlen_k, int64_t left, int64_t right) {
  const int64_t diag = seqlen_k - seqlen_q;
  int64_t first = seqlen_k, last = -1;
  for (int64_t i = 0; i < seqlen_q; ++i) {
    const int64_t lo = left < 0 ? 0 : std::max<int64_t>(0, i + diag - left);
    const int64_t hi = right < 0 ? seqlen_k - 1 : std::min<int64_t>(seqlen_k - 1, i + diag + right);
    if (lo > hi) continue;
    first = std::min(first, lo);
    last = std::max(last, hi);
  }
  return std::max<int64_t>(0, last - first + 1);
}

double total_visible_pairs(const Layout& l, const RunConfig& c) {
  const int64_t right = c.options.causal ? 0 : c.options.window_right;
  double pairs = 0;
  for (int64_t b = 0; b < l.batch; ++b) {
    pairs += static_cast<double>(visible_pairs(l.len_q(b), l.len_k(b), c.options.window_left, right));
    if (!l.varlen) {  // every sequence alike
      pairs *= static_cast<double>(l.batch);
      break;
    }
  }
  return pairs * static_cast<double>(l.heads_q);
}

double forward_flops(const Layout& l, const RunConfig& c) {
  return 2.0 * total_visible_pairs(l, c) * static_cast<double>(l.hdim_qk + l.hdim_v);
}

double backward_flops(const Layout& l, const RunConfig& c) {
  return 2.0 * total_visible_pairs(l, c) * static_cast<double>(3 * l.hdim_qk + 2 * l.hdim_v);
}

double score_entries(const Layout& l) {
  double e = 0;
  for (int64_t b = 0; b < l.batch; ++b) e += static_cast<double>(l.len_q(b)) * static_cast<double>(l.len_k(b));
  return e * static_cast<double>(l.heads_q);
}

}  // namespace fa_cli
