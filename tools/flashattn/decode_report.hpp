// What a decode run found, and its two renderings: text for people, one JSON object for programs.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "config.hpp"
#include "copy_bandwidth.hpp"
#include "decode_check.hpp"
#include "runner.hpp"

namespace fa_cli {

struct DecodeReport {
  const DecodeConfig* config = nullptr;
  std::string device;  // "2 threads" or the GPU's name
  std::string path;    // flashattn::kvcache_path
  float softmax_scale = 0;
  Timings timings;
  int64_t keys_read = 0;  // keys some query sees, summed over the sequences (each read for every kv head)
  double kv_bytes = 0;    // bytes of K and V a call reads: keys_read * heads_kv * (d_qk + d_v) * element size
  CopyBandwidth copy;     // the yardstick
  int64_t tensors_bytes = 0, cache_bytes = 0, workspace_bytes = 0;
  DecodeCheckResult check;

  double tbps(double ms) const { return ms > 0 ? kv_bytes / (ms * 1e-3) / 1e12 : 0.0; }
  double percent_of_copy() const;  // tbps at the median / copy.tbps(), in %; 0 when not measured
  bool ok() const { return !check.ran || check.ok; }
};

void print_human(const DecodeReport& report, std::FILE* out);
std::string to_json(const DecodeReport& report);

}  // namespace fa_cli
