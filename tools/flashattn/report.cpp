#include "report.hpp"

#include <cmath>

#include "json.hpp"

namespace fa_cli {

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string bytes_str(double b) {
  if (b < 0) return "unknown";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return fmt(u == 0 ? "%.0f " : "%.1f ", b) + units[u];
}

std::string time_str(double ms) { return ms >= 1000 ? fmt("%.3f s", ms / 1000) : fmt("%.3f ms", ms); }

std::string rate_str(double flops, double ms) {
  if (ms <= 0) return "n/a";
  const double per_s = flops / (ms * 1e-3);
  return per_s >= 1e12 ? fmt("%.1f TFLOP/s", per_s / 1e12) : fmt("%.2f GFLOP/s", per_s / 1e9);
}

std::string mask_str(const flashattn::AttentionOptions& o) {
  std::string m = o.causal ? "causal" : "non-causal";
  if (o.window_left >= 0 || o.window_right >= 0) {
    m += ", window (" + std::to_string(o.window_left) + ", " + std::to_string(o.window_right) + ")";
  }
  for (const ScoreOptionValue& s : score_option_values(o)) {
    if (s.value != 0) m += ", " + std::string(s.name) + fmt(" %g", s.value);
  }
  return m;
}

namespace {

const char* direction(const RunConfig& c) { return c.backward ? "backward" : "forward"; }

void error_json(Json& j, const TensorCheck& t) {
  const auto& e = t.error;
  j.begin_object(t.name.c_str())
      .field("max_error", e.max_error)
      .field("bound", e.bound)
      .field("same_precision_error", e.same_error)
      .field("atol", e.atol)
      .field("max_abs_ref", e.max_ref)
      .field("checked_elements", e.checked)
      .field("nan_mismatches", e.nan_mismatches)
      .field("pass", e.ok);
  if (!e.ok && e.worst_row >= 0) {
    j.field("worst_row", e.worst_row).field("worst_head", e.worst_col / t.dim).field("worst_col", e.worst_col % t.dim);
  }
  j.end_object();
}

}  // namespace

void print_tensor_checks(const std::vector<TensorCheck>& tensors, std::FILE* out) {
  for (const TensorCheck& t : tensors) {
    const auto& e = t.error;
    const std::string err = e.nan_mismatches > 0 ? "NaN x" + std::to_string(e.nan_mismatches) : fmt("%.3e", e.max_error);
    std::fprintf(out, "    %-4s max err %-9s  bound %.3e  (same-precision %.3e, atol %.1e)  %s\n", t.name.c_str(),
                 err.c_str(), e.bound, e.same_error, e.atol, e.ok ? "PASS" : "FAIL");
    if (!e.ok) std::fprintf(out, "         %s\n", e.describe(t.dim).c_str());
  }
}

void timing_json(int64_t warmup, const Timings& timings, Json* json) {
  json->begin_object("timing")
      .field("warmup", warmup)
      .field("repeats", static_cast<int64_t>(timings.ms.size()))
      .field("median_ms", timings.median_ms())
      .field("min_ms", timings.min_ms());
  json->begin_array("times_ms");
  for (double ms : timings.ms) json->value(ms);
  json->end_array().end_object();
}

void tensor_checks_json(const std::vector<TensorCheck>& tensors, Json* json) {
  for (const TensorCheck& t : tensors) error_json(*json, t);
}

void print_human(const RunReport& r, std::FILE* out) {
  const RunConfig& c = *r.config;
  const Layout& l = *r.layout;
  std::fprintf(out, "flashattn %s: %s on %s (%s), path %s%s\n", FLASHATTN_VERSION_STRING, direction(c),
               flashattn::to_string(c.device), r.device.c_str(), r.path.c_str(),
               c.path == "auto" ? "" : (" (--path " + c.path + ")").c_str());
  std::fprintf(out, "  problem  batch %lld, heads %lld/%lld (q/kv), seqlen %lld/%lld (q/k%s), headdim %lld/%lld (qk/v), %s, %s, scale %.6g\n",
               static_cast<long long>(l.batch), static_cast<long long>(l.heads_q), static_cast<long long>(l.heads_kv),
               static_cast<long long>(l.seqlen_q), static_cast<long long>(l.seqlen_k), l.varlen ? ", varlen maxima" : "",
               static_cast<long long>(l.hdim_qk), static_cast<long long>(l.hdim_v), flashattn::to_string(c.dtype),
               mask_str(c.options).c_str(), r.softmax_scale);
  if (l.varlen) {
    std::fprintf(out, "  varlen   %lld query and %lld key tokens packed (of %lld and %lld padded)\n",
                 static_cast<long long>(l.total_q), static_cast<long long>(l.total_k),
                 static_cast<long long>(l.batch * c.seqlen_q), static_cast<long long>(l.batch * c.seqlen_k));
  }
  std::fprintf(out, "  time     median %s, min %s over %lld calls (%lld warm-up)\n", time_str(r.timings.median_ms()).c_str(),
               time_str(r.timings.min_ms()).c_str(), static_cast<long long>(r.timings.ms.size()),
               static_cast<long long>(c.warmup));
  std::fprintf(out, "  speed    %s at the median, %s at the min (%.4g FLOP: exact visible pairs)\n",
               rate_str(r.flops, r.timings.median_ms()).c_str(), rate_str(r.flops, r.timings.min_ms()).c_str(), r.flops);
  const MemoryReport& m = r.memory;
  if (c.device == flashattn::Device::cpu) {
    std::fprintf(out, "  memory   peak RSS %s%s, tensors %s (workspace %s), extra during the calls %s\n",
                 bytes_str(m.peak_rss).c_str(), m.peak_covers_lifetime ? " (process lifetime)" : "",
                 bytes_str(m.tensors_bytes).c_str(), bytes_str(m.workspace_bytes).c_str(), bytes_str(m.extra).c_str());
  } else {
    std::fprintf(out, "  memory   device tensors %s (workspace %s); device in use %s before the calls, %s after, of %s\n",
                 bytes_str(m.tensors_bytes).c_str(), bytes_str(m.workspace_bytes).c_str(),
                 bytes_str(m.device_used_before).c_str(), bytes_str(m.device_used_after).c_str(),
                 bytes_str(m.device_total).c_str());
  }
  std::fprintf(out, "           a naive N x N fp32 score matrix would need %s\n", bytes_str(m.naive_scores_bytes).c_str());
  if (r.reproducible >= 0) {
    std::fprintf(out, "  bitwise  dq, dk, dv %s across the %lld calls (--deterministic)\n",
                 r.reproducible ? "identical" : "DIFFER: FAIL",
                 static_cast<long long>(c.warmup + c.repeats));
  }
  const CheckResult& k = r.check;
  if (!k.ran) {
    std::fprintf(out, "  check    skipped (--no-check)\n");
    if (r.reproducible == 0) std::fprintf(out, "  result   FAIL\n");
    return;
  }
  std::string rows = k.sampled ? std::to_string(k.q_rows) + " of " + std::to_string(k.total_q) + " query rows"
                               : "all " + std::to_string(k.total_q) + " query rows";
  if (c.backward) {
    rows += k.sampled ? ", " + std::to_string(k.k_rows) + " of " + std::to_string(k.total_k) + " key rows"
                      : ", all " + std::to_string(k.total_k) + " key rows";
  }
  std::fprintf(out, "  check    vs float64 reference on %s%s, %.1f s; rule: err <= 2 x same-precision err + atol\n",
               rows.c_str(), k.sampled ? " (sampled)" : "", k.seconds);
  print_tensor_checks(k.tensors, out);
  std::fprintf(out, "  result   %s\n", r.ok() ? "PASS" : "FAIL");
}

std::string to_json(const RunReport& r) {
  const RunConfig& c = *r.config;
  const Layout& l = *r.layout;
  Json j;
  j.begin_object();
  j.field("tool", "flashattn").field("version", FLASHATTN_VERSION_STRING);
  j.field("ok", r.ok()).field("exit_code", r.ok() ? 0 : 1);
  j.field("mode", direction(c)).field("backend", flashattn::to_string(c.device)).field("device", r.device);
  j.field("path", r.path).field("path_requested", c.path);
  j.begin_object("problem")
      .field("dtype", flashattn::to_string(c.dtype))
      .field("batch", l.batch)
      .field("heads_q", l.heads_q)
      .field("heads_kv", l.heads_kv)
      .field("seqlen_q", l.seqlen_q)
      .field("seqlen_k", l.seqlen_k)
      .field("hdim_qk", l.hdim_qk)
      .field("hdim_v", l.hdim_v)
      .field("causal", c.options.causal)
      .field("window_left", c.options.window_left)
      .field("window_right", c.options.window_right);
  for (const ScoreOptionValue& s : score_option_values(c.options)) j.field(s.name, s.value);
  j.field("softmax_scale", static_cast<double>(r.softmax_scale))
      .field("varlen", l.varlen)
      .field("total_q", l.total_q)
      .field("total_k", l.total_k)
      .field("deterministic", c.deterministic)
      .field("seed", static_cast<int64_t>(c.seed))
      .field("threads", c.threads)
      .end_object();
  timing_json(c.warmup, r.timings, &j);
  const double med_s = r.timings.median_ms() * 1e-3, min_s = r.timings.min_ms() * 1e-3;
  j.begin_object("flops")
      .field("convention", "exact visible pairs: fwd 2*pairs*(d_qk+d_v), bwd 2*pairs*(3*d_qk+2*d_v)")
      .field("visible_pairs", r.visible_pairs)
      .field("per_call", r.flops)
      .field("tflops_median", med_s > 0 ? r.flops / med_s / 1e12 : 0.0)
      .field("tflops_best", min_s > 0 ? r.flops / min_s / 1e12 : 0.0)
      .end_object();
  const MemoryReport& m = r.memory;
  j.begin_object("memory").field("tensors_bytes", m.tensors_bytes).field("workspace_bytes", m.workspace_bytes);
  if (c.device == flashattn::Device::cpu) {
    j.field("rss_before_bytes", m.rss_before)
        .field("peak_rss_bytes", m.peak_rss)
        .field("extra_bytes", m.extra)
        .field("peak_covers_lifetime", m.peak_covers_lifetime);
  } else {
    j.field("device_used_before_bytes", m.device_used_before)
        .field("device_used_after_bytes", m.device_used_after)
        .field("device_total_bytes", m.device_total);
  }
  j.field("naive_scores_bytes", m.naive_scores_bytes).end_object();
  if (r.reproducible >= 0) {
    j.field("bitwise_reproducible", r.reproducible == 1);
  } else {
    j.null_field("bitwise_reproducible");
  }
  const CheckResult& k = r.check;
  if (!k.ran) {
    j.null_field("check");
  } else {
    j.begin_object("check")
        .field("pass", k.ok)
        .field("sampled", k.sampled)
        .field("query_rows", k.q_rows)
        .field("total_q", k.total_q)
        .field("key_rows", k.k_rows)
        .field("total_k", k.total_k)
        .field("seconds", k.seconds);
    tensor_checks_json(k.tensors, &j);
    j.end_object();
  }
  j.end_object();
  return j.str();
}

void print_error(bool json, int exit_code, const std::string& message, const char* command) {
  std::fprintf(stderr, "flashattn %s: %s\n", command, message.c_str());
  if (json) {
    Json j;
    j.begin_object().field("tool", "flashattn").field("ok", false).field("exit_code", exit_code).field("error", message);
    j.end_object();
    std::printf("%s\n", j.str().c_str());
  }
}

}  // namespace fa_cli
