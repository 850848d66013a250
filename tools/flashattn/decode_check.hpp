// The decode call's check: out and lse against reference::kvcache_forward (float64, and the same
// precision for the error rule's yardstick), as check.hpp's rule for `run`. Above kFullCheckEntries
// score entries it checks a sample of whole sequences (the first, the last and random ones), all
// their query rows and heads.
#pragma once

#include <cstdint>
#include <vector>

#include "check.hpp"
#include "config.hpp"
#include "decode_problem.hpp"

namespace fa_cli {

struct DecodeCheckResult {
  bool ran = false;
  bool sampled = false;
  int64_t sequences = 0, total_sequences = 0;  // checked, of all
  std::vector<TensorCheck> tensors;            // out, lse
  bool ok = true;
  double seconds = 0;
};

// Checks the host copies of out and lse. The reference reads the cache's first `cached` rows of
// each sequence and appends k_new / v_new itself, so the host cache may be the one the call
// appended to (cpu) or the untouched one (cuda). A failing reference call comes back as its Status.
flashattn::Status check_decode(const DecodeConfig& config, const DecodeTensors& host, DecodeCheckResult* result);

}  // namespace fa_cli
