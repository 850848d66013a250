#include "decode_report.hpp"

#include "json.hpp"
#include "report.hpp"

namespace fa_cli {
namespace {

const char* rotary_name(Rotary r) { return r == Rotary::interleaved ? "interleaved" : r == Rotary::half ? "half" : "none"; }

std::string tbps_str(double tbps) { return tbps >= 0.1 ? fmt("%.3f TB/s", tbps) : fmt("%.2f GB/s", tbps * 1e3); }

std::string cache_str(const DecodeConfig& c) {
  if (!c.paged()) return "contiguous cache";
  return "paged cache: pages of " + std::to_string(c.page_size) + " keys, " + std::to_string(c.pages_per_sequence()) +
         " per sequence, shuffled over a pool of " + std::to_string(c.pool_pages());
}

}  // namespace

double DecodeReport::percent_of_copy() const {
  const double copy_tbps = copy.tbps();
  return copy_tbps > 0 ? 100.0 * tbps(timings.median_ms()) / copy_tbps : 0.0;
}

void print_human(const DecodeReport& r, std::FILE* out) {
  const DecodeConfig& c = *r.config;
  std::fprintf(out, "flashattn %s: decode on %s (%s), path %s%s\n", FLASHATTN_VERSION_STRING,
               flashattn::to_string(c.device), r.device.c_str(), r.path.c_str(),
               c.path == "auto" ? "" : (" (--path " + c.path + ")").c_str());
  std::fprintf(out, "  problem  batch %lld, heads %lld/%lld (q/kv), %lld query token%s per sequence, %lld cached keys + %lld appended, headdim %lld/%lld (qk/v), %s\n",
               static_cast<long long>(c.batch), static_cast<long long>(c.heads_q), static_cast<long long>(c.heads_kv),
               static_cast<long long>(c.seqlen_q), c.seqlen_q == 1 ? "" : "s", static_cast<long long>(c.cached),
               static_cast<long long>(c.new_rows), static_cast<long long>(c.hdim_qk), static_cast<long long>(c.hdim_v),
               flashattn::to_string(c.dtype));
  std::fprintf(out, "           %s, %s%s, scale %.6g%s\n", cache_str(c).c_str(), mask_str(c.options).c_str(),
               c.rotary == Rotary::none ? "" : (std::string(", rotary ") + rotary_name(c.rotary)).c_str(),
               r.softmax_scale, c.num_splits ? (", num_splits " + std::to_string(c.num_splits)).c_str() : "");
  std::fprintf(out, "  time     median %s, min %s over %lld calls (%lld warm-up)\n", time_str(r.timings.median_ms()).c_str(),
               time_str(r.timings.min_ms()).c_str(), static_cast<long long>(r.timings.ms.size()),
               static_cast<long long>(c.warmup));
  std::fprintf(out, "  speed    %s at the median, %s at the min (K and V read: %s per call, %lld keys x %lld kv heads)\n",
               tbps_str(r.tbps(r.timings.median_ms())).c_str(), tbps_str(r.tbps(r.timings.min_ms())).c_str(),
               bytes_str(r.kv_bytes).c_str(), static_cast<long long>(r.keys_read), static_cast<long long>(c.heads_kv));
  if (r.copy.error.empty()) {
    std::fprintf(out, "  copy     %s (%s copied, read + written, median of 5): the call reaches %.1f%% of it\n",
                 tbps_str(r.copy.tbps()).c_str(), bytes_str(static_cast<double>(r.copy.bytes)).c_str(),
                 r.percent_of_copy());
  } else {
    std::fprintf(out, "  copy     not measured: %s\n", r.copy.error.c_str());
  }
  std::fprintf(out, "  memory   tensors %s (cache %s, workspace %s)\n", bytes_str(static_cast<double>(r.tensors_bytes)).c_str(),
               bytes_str(static_cast<double>(r.cache_bytes)).c_str(), bytes_str(static_cast<double>(r.workspace_bytes)).c_str());
  const DecodeCheckResult& k = r.check;
  if (!k.ran) {
    std::fprintf(out, "  check    skipped (--no-check)\n");
    return;
  }
  const std::string which = k.sampled ? std::to_string(k.sequences) + " of " + std::to_string(k.total_sequences) +
                                            " sequences (sampled)"
                                      : "all " + std::to_string(k.total_sequences) + " sequences";
  std::fprintf(out, "  check    vs float64 reference on %s, %.1f s; rule: err <= 2 x same-precision err + atol\n",
               which.c_str(), k.seconds);
  print_tensor_checks(k.tensors, out);
  std::fprintf(out, "  result   %s\n", r.ok() ? "PASS" : "FAIL");
}

std::string to_json(const DecodeReport& r) {
  const DecodeConfig& c = *r.config;
  Json j;
  j.begin_object();
  j.field("tool", "flashattn").field("version", FLASHATTN_VERSION_STRING);
  j.field("ok", r.ok()).field("exit_code", r.ok() ? 0 : 1);
  j.field("mode", "decode").field("backend", flashattn::to_string(c.device)).field("device", r.device);
  j.field("path", r.path).field("path_requested", c.path);
  j.begin_object("problem")
      .field("dtype", flashattn::to_string(c.dtype))
      .field("batch", c.batch)
      .field("heads_q", c.heads_q)
      .field("heads_kv", c.heads_kv)
      .field("seqlen_q", c.seqlen_q)
      .field("seqlen_k", c.cached)
      .field("new", c.new_rows)
      .field("capacity", c.capacity())
      .field("hdim_qk", c.hdim_qk)
      .field("hdim_v", c.hdim_v)
      .field("page_size", c.page_size)
      .field("pages_per_sequence", c.pages_per_sequence())
      .field("pool_pages", c.pool_pages())
      .field("rotary", rotary_name(c.rotary))
      .field("causal", c.options.causal)
      .field("window_left", c.options.window_left)
      .field("window_right", c.options.window_right);
  for (const ScoreOptionValue& s : score_option_values(c.options)) j.field(s.name, s.value);
  j.field("softmax_scale", static_cast<double>(r.softmax_scale))
      .field("num_splits", c.num_splits)
      .field("seed", static_cast<int64_t>(c.seed))
      .field("threads", c.threads)
      .end_object();
  timing_json(c.warmup, r.timings, &j);
  j.field("keys_read", r.keys_read).field("kv_bytes", r.kv_bytes);
  j.field("tbps", r.tbps(r.timings.median_ms())).field("tbps_best", r.tbps(r.timings.min_ms()));
  if (r.copy.error.empty()) {
    j.field("copy_bytes", static_cast<int64_t>(r.copy.bytes)).field("copy_ms", r.copy.ms);
    j.field("copy_tbps", r.copy.tbps()).field("percent_of_copy", r.percent_of_copy());
  } else {
    j.null_field("copy_tbps").null_field("percent_of_copy").field("copy_error", r.copy.error);
  }
  j.begin_object("memory")
      .field("tensors_bytes", r.tensors_bytes)
      .field("cache_bytes", r.cache_bytes)
      .field("workspace_bytes", r.workspace_bytes)
      .end_object();
  const DecodeCheckResult& k = r.check;
  if (!k.ran) {
    j.null_field("check");
  } else {
    j.begin_object("check")
        .field("pass", k.ok)
        .field("sampled", k.sampled)
        .field("sequences", k.sequences)
        .field("total_sequences", k.total_sequences)
        .field("seconds", k.seconds);
    tensor_checks_json(k.tensors, &j);
    j.end_object();
  }
  j.end_object();
  return j.str();
}

}  // namespace fa_cli
