// What a run found, and its two renderings: text for people, one JSON object for programs.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "check.hpp"
#include "config.hpp"
#include "problem.hpp"
#include "runner.hpp"

namespace fa_cli {

struct MemoryReport {
  int64_t tensors_bytes = 0;    // inputs, outputs and workspace the tool allocated for the call
  int64_t workspace_bytes = 0;  // of which the library's workspace
  // cpu backend (resident memory of the process)
  int64_t rss_before = -1;  // just before the calls, tensors already resident
  int64_t peak_rss = -1;    // peak during the calls
  int64_t extra = -1;       // peak_rss - rss_before: what the library used beyond the tensors
  bool peak_covers_lifetime = false;  // the peak could not be reset: it is the process's
  // cuda backend (cudaMemGetInfo: in use = total - free, the whole device)
  int64_t device_used_before = -1, device_used_after = -1, device_total = -1;
  double naive_scores_bytes = 0;  // batch * heads * seqlen_q * seqlen_k * 4 (fp32 S)
};

struct RunReport {
  const RunConfig* config = nullptr;
  const Layout* layout = nullptr;
  std::string device;  // "cpu, 2 threads" or the GPU's name
  std::string path;    // flashattn::forward_path / backward_path
  float softmax_scale = 0;
  Timings timings;
  double flops = 0;           // of one call
  double visible_pairs = 0;   // (query, key) pairs the mask leaves, summed over batch and heads
  MemoryReport memory;
  CheckResult check;
  // --deterministic --backward: were dq, dk, dv bitwise identical across all calls (-1: not tested)
  int reproducible = -1;
  bool ok() const { return (!check.ran || check.ok) && reproducible != 0; }
};

void print_human(const RunReport& report, std::FILE* out);
std::string to_json(const RunReport& report);

// Pieces the commands' reports share.
class Json;
std::string fmt(const char* format, double v);  // snprintf of one number
std::string bytes_str(double bytes);            // "1.5 MiB"; "unknown" when < 0
std::string time_str(double ms);                // "1.234 ms", "2.500 s"
std::string mask_str(const flashattn::AttentionOptions& options);  // "causal, window (8, -1)" and each score option set
// One line per checked tensor ("out  max err ... PASS"), and one JSON object per tensor.
void print_tensor_checks(const std::vector<TensorCheck>& tensors, std::FILE* out);
void tensor_checks_json(const std::vector<TensorCheck>& tensors, Json* json);
// {"timing": {"warmup", "repeats", "median_ms", "min_ms", "times_ms": [...]}}
void timing_json(int64_t warmup, const Timings& timings, Json* json);

// An error before or during the call: "flashattn <command>: <message>" on stderr, and with --json
// also {"ok": false, "exit_code": N, "error": "..."} on stdout.
void print_error(bool json, int exit_code, const std::string& message, const char* command = "run");

}  // namespace fa_cli
