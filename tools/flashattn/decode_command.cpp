#include "decode_command.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "config.hpp"
#include "copy_bandwidth.hpp"
#include "decode_check.hpp"
#include "decode_problem.hpp"
#include "decode_report.hpp"
#include "flops.hpp"
#include "gpu.hpp"
#include "host_memory.hpp"
#include "option_context.hpp"
#include "options.hpp"
#include "report.hpp"
#include "runner.hpp"

namespace fa_cli {

using flashattn::Device;
using flashattn::Status;

namespace {

constexpr const char* kCommand = "decode";

// The option behind the argument a library Status names (option_context.hpp), in decode's words.
std::string option_context(const std::string& message, const DecodeConfig& c) {
  const flashattn::AttentionOptions& o = c.options;
  const std::string window = "--window " + std::to_string(o.window_left) + "," + std::to_string(o.window_right);
  const std::string lengths = "--seqlen-k " + std::to_string(c.cached) + " --new " + std::to_string(c.new_rows);
  const std::string pages = c.paged() ? " --page-size " + std::to_string(c.page_size) : "";
  const OptionNeedles needles = {
      {"hdim_qk", "--headdim " + std::to_string(c.hdim_qk)},
      {"hdim_v", "--headdim-v " + std::to_string(c.hdim_v)},
      {"heads", "--heads " + std::to_string(c.heads_q) + " --heads-kv " + std::to_string(c.heads_kv)},
      {"softmax_scale", "--scale"},
      {"window", o.causal ? window + " --causal" : window},
      {"causal", "--causal"},
      {"dtype", std::string("--dtype ") + flashattn::to_string(c.dtype)},
      {"block_table", "--page-size " + std::to_string(c.page_size)},
      {"page_size", "--page-size " + std::to_string(c.page_size)},
      {"k_cache", lengths + pages},
      {"cache_seqlens", lengths + pages},
      {"k_new", "--new " + std::to_string(c.new_rows)},
      {"v_new", "--new " + std::to_string(c.new_rows)},
      {"rotary", "--rotary"},
      {"num_splits", "--num-splits " + std::to_string(c.num_splits)},
      {"q:", "--batch " + std::to_string(c.batch) + " --seqlen-q " + std::to_string(c.seqlen_q)},
      {"device", std::string("--backend ") + flashattn::to_string(c.device)},
      {"path = ", "--path " + c.path + " --backend " + flashattn::to_string(c.device)},
  };
  return fa_cli::option_context(message, needles, o);
}

// A CUDA call "auto" cannot place: the decode family runs by name until "auto" picks it.
std::string family_hint(const DecodeConfig& c) {
  const std::vector<std::string> names = flashattn::families();
  if (c.device != Device::cuda || c.path != "auto" ||
      std::find(names.begin(), names.end(), "decode") == names.end()) {
    return "";
  }
  return " (the CUDA decode family runs when named: --path decode)";
}

// A Status from the library: a rejected configuration names the option; a failed call (CUDA
// error, internal) says which call failed.
int fail(const DecodeConfig& c, const Status& s, const char* what) {
  const int code = exit_code_of(s);
  const std::string message = code == kExitBadOptions ? option_context(s.message, c) + s.message + family_hint(c)
                                                      : std::string(what) + " failed: " + s.message;
  print_error(c.json, code, message, kCommand);
  return code;
}

int fail_cuda(const DecodeConfig& c, const std::string& error) {
  print_error(c.json, kExitRunFailed, "cuda: " + error, kCommand);
  return kExitRunFailed;
}

int bad_option(bool json, const std::string& error) {
  print_error(json, kExitBadOptions, error, kCommand);
  return kExitBadOptions;
}

std::string sizes(const DecodeConfig& c) {
  return "--batch " + std::to_string(c.batch) + " --heads-kv " + std::to_string(c.heads_kv) + " --seqlen-k " +
         std::to_string(c.cached) + " --headdim " + std::to_string(c.hdim_qk);
}

// Bytes of K and V a call reads: the keys some query of a sequence sees (all of them unless a
// window cuts them), for every kv head. Every sequence has the same lengths.
void count_reads(const DecodeConfig& c, DecodeReport* r) {
  const int64_t right = c.options.causal ? 0 : c.options.window_right;
  r->keys_read = c.batch * keys_seen(c.seqlen_q, c.seqlen_k(), c.options.window_left, right);
  r->kv_bytes = static_cast<double>(r->keys_read) * static_cast<double>(c.heads_kv) *
                static_cast<double>(c.hdim_qk + c.hdim_v) * static_cast<double>(flashattn::element_size(c.dtype));
}

}  // namespace

int decode_command(const std::vector<std::string>& args) {
  Options options;
  std::string error;
  if (!parse_options(Command::decode, args, &options, &error)) {
    return bad_option(std::find(args.begin(), args.end(), "--json") != args.end(), error);
  }
  if (options.help) {
    std::fputs(decode_usage().c_str(), stdout);
    return kExitOk;
  }
  DecodeConfig c;
  if (!resolve_decode(options, &c, &error)) return bad_option(options.json, error);
  if (c.threads > 0) omp_set_num_threads(static_cast<int>(c.threads));
  c.threads = omp_get_max_threads();  // what the cpu backend, the copy and the check will use

  if (!fits_in_host_memory(decode_tensors_bytes(c), &error)) return bad_option(c.json, sizes(c) + ": " + error);
  DecodeTensors host;
  if (error = allocate_decode_tensors(c, Device::cpu, &host); !error.empty()) return bad_option(c.json, error);
  fill_decode_inputs(c, &host);

  // The tensors the call runs on: the host ones, or device copies.
  DecodeTensors device;
  gpu::Stream owned_stream;
  if (c.device == Device::cuda) {
    if (error = owned_stream.create(); !error.empty()) return fail_cuda(c, error);
    if (error = allocate_decode_tensors(c, Device::cuda, &device); !error.empty()) {
      // Almost always out of device memory: the sizes asked for are too large for this GPU.
      return bad_option(c.json, sizes(c) + ": device tensors: " + error);
    }
    if (error = copy_decode_inputs(host, &device); !error.empty()) return fail_cuda(c, error);
  }
  DecodeTensors& run_on = c.device == Device::cuda ? device : host;
  void* const stream = owned_stream.get();  // null on the CPU

  // Ask the library first: a configuration it rejects is a bad option (exit 2), with its message.
  Status s = flashattn::supports(kvcache_args(c, run_on, stream));
  if (!s.ok()) return fail(c, s, "kvcache_forward");
  std::size_t workspace = 0;
  flashattn::kvcache_workspace_size(kvcache_args(c, run_on, stream), &workspace);
  if (error = run_on.workspace.allocate(c.device, workspace); !error.empty()) {
    return c.device == Device::cuda ? fail_cuda(c, error)
                                    : (print_error(c.json, kExitRunFailed, error, kCommand), kExitRunFailed);
  }
  const flashattn::KVCacheArgs call_args = kvcache_args(c, run_on, stream);

  DecodeReport report;
  report.config = &c;
  report.device = c.device == Device::cuda ? gpu::device_name() : std::to_string(c.threads) + " threads";
  report.path = flashattn::kvcache_path(call_args);
  report.softmax_scale = c.options.softmax_scale.value_or(1.f / std::sqrt(static_cast<float>(c.hdim_qk)));
  count_reads(c, &report);
  report.tensors_bytes = static_cast<int64_t>(run_on.bytes());
  report.cache_bytes = static_cast<int64_t>(run_on.k_cache.bytes() + run_on.v_cache.bytes());
  report.workspace_bytes = static_cast<int64_t>(run_on.workspace.bytes());

  // Appending the same rows at the same positions again writes what is there: every call is the same call.
  const CallLoop loop{c.warmup, c.repeats, c.device == Device::cuda, stream, c.quiet, "decode"};
  s = time_calls(loop, [&] { return poison({&run_on.out, &run_on.lse}, c.device, stream); },
                 [&] { return flashattn::kvcache_forward(call_args); }, &report.timings);
  if (!s.ok()) return fail(c, s, "kvcache_forward");
  if (c.device == Device::cuda) {
    if (error = copy_decode_outputs(device, &host); !error.empty()) return fail_cuda(c, error);
  }

  report.copy = measure_copy_bandwidth(c.device, stream);
  if (c.check) {
    if (s = check_decode(c, host, &report.check); !s.ok()) return fail(c, s, "check");
  }
  if (c.json) {
    std::printf("%s\n", to_json(report).c_str());
  } else {
    print_human(report, stdout);
  }
  return report.ok() ? kExitOk : kExitCheckFailed;
}

}  // namespace fa_cli
