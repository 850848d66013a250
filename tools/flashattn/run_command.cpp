#include "run_command.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>

#include "check.hpp"
#include "config.hpp"
#include "flops.hpp"
#include "gpu.hpp"
#include "host_memory.hpp"
#include "option_context.hpp"
#include "options.hpp"
#include "problem.hpp"
#include "report.hpp"
#include "runner.hpp"

namespace fa_cli {

using flashattn::Device;
using flashattn::Status;
using flashattn::StatusCode;

namespace {

// The option behind the argument a library Status names (option_context.hpp).
std::string option_context(const std::string& message, const RunConfig& c) {
  const flashattn::AttentionOptions& o = c.options;
  const std::string window = "--window " + std::to_string(o.window_left) + "," + std::to_string(o.window_right);
  const std::string heads = "--heads " + std::to_string(c.heads_q) + " --heads-kv " + std::to_string(c.heads_kv);
  const OptionNeedles needles = {
      {"hdim_qk", "--headdim " + std::to_string(c.hdim_qk)},
      {"hdim_v", "--headdim-v " + std::to_string(c.hdim_v)},
      {"head dim", "--headdim " + std::to_string(c.hdim_qk) +
                       (c.hdim_v != c.hdim_qk ? " --headdim-v " + std::to_string(c.hdim_v) : "")},
      {"heads", heads},
      {"softmax_scale", "--scale"},
      {"window", o.causal ? window + " --causal" : window},
      {"causal", "--causal"},
      {"dtype", std::string("--dtype ") + flashattn::to_string(c.dtype)},
      {"cu_seqlens", "--varlen"},
      {"varlen", "--varlen"},
      {"deterministic", "--deterministic"},
      {"device", std::string("--backend ") + flashattn::to_string(c.device)},
      {"path = ", "--path " + c.path + " --backend " + flashattn::to_string(c.device)},
  };
  return fa_cli::option_context(message, needles, o);
}

// A Status from the library: a rejected configuration names the option; a failed call (CUDA
// error, internal) says which call failed.
int fail(const RunConfig& c, const Status& s, const char* what) {
  const int code = exit_code_of(s);
  const std::string prefix = code == kExitBadOptions ? option_context(s.message, c) : std::string(what) + " failed: ";
  print_error(c.json, code, prefix + s.message);
  return code;
}

int fail_cuda(const RunConfig& c, const std::string& error) {
  print_error(c.json, kExitRunFailed, "cuda: " + error);
  return kExitRunFailed;
}

std::string device_description(const RunConfig& c) {
  if (c.device == Device::cuda) return gpu::device_name();
  return std::to_string(omp_get_max_threads()) + " threads";
}

std::size_t tensors_bytes_estimate(const Layout& l, const RunConfig& c) {
  const double e = static_cast<double>(flashattn::element_size(c.dtype));
  double n = static_cast<double>(l.total_q) * l.heads_q * (l.hdim_qk + l.hdim_v) * e +      // q, out
             static_cast<double>(l.total_k) * l.heads_kv * (l.hdim_qk + l.hdim_v) * e +     // k, v
             static_cast<double>(l.total_q) * l.heads_q * 4.0;                               // lse
  if (c.backward) n *= 2;  // dout, dq, dk, dv
  return static_cast<std::size_t>(n);
}

// The options read into *c; an exit code where the command ends here (--help, a bad option).
std::optional<int> read_config(const std::vector<std::string>& args, RunConfig* c) {
  Options options;
  std::string error;
  if (!parse_options(Command::run, args, &options, &error)) {
    bool json = false;
    for (const auto& a : args) json = json || a == "--json";
    print_error(json, kExitBadOptions, error);
    return kExitBadOptions;
  }
  if (options.help) {
    std::fputs(run_usage().c_str(), stdout);
    return kExitOk;
  }
  if (!resolve(options, c, &error)) {
    print_error(options.json, kExitBadOptions, error);
    return kExitBadOptions;
  }
  if (c->threads > 0) omp_set_num_threads(static_cast<int>(c->threads));
  c->threads = omp_get_max_threads();  // what the cpu backend and the check will use
  if (c->deterministic && !c->backward && !c->quiet) {
    std::fprintf(stderr, "flashattn run: note: --deterministic applies to --backward only\n");
  }
  return std::nullopt;
}

// Asks the library first: a configuration it rejects is a bad option (exit 2), with its message.
// Then allocates the workspace of the larger of the two calls.
std::optional<int> plan_workspace(const Layout& layout, const RunConfig& c, Tensors* run_on, void* stream) {
  Status s = flashattn::supports(forward_args(layout, c, *run_on, stream));
  if (!s.ok()) return fail(c, s, "forward");
  std::size_t ws_fwd = 0, ws_bwd = 0;
  flashattn::forward_workspace_size(forward_args(layout, c, *run_on, stream), &ws_fwd);
  if (c.backward) {
    s = flashattn::supports(backward_args(layout, c, *run_on, stream));
    if (!s.ok()) return fail(c, s, "backward");
    flashattn::backward_workspace_size(backward_args(layout, c, *run_on, stream), &ws_bwd);
  }
  if (std::string error = run_on->workspace.allocate(c.device, std::max(ws_fwd, ws_bwd)); !error.empty()) {
    if (c.device == Device::cuda) return fail_cuda(c, error);
    print_error(c.json, kExitRunFailed, error);
    return kExitRunFailed;
  }
  return std::nullopt;
}

// Memory just before the calls: resident (cpu) or device-wide (cuda); the device's work so far done.
std::optional<int> memory_before_calls(const RunConfig& c, void* stream, MemoryReport* mem) {
  if (c.device == Device::cuda) {
    if (std::string error = gpu::synchronize(stream); !error.empty()) return fail_cuda(c, error);
    std::size_t free_b = 0, total_b = 0;
    if (gpu::mem_info(&free_b, &total_b).empty()) {
      mem->device_total = static_cast<int64_t>(total_b);
      mem->device_used_before = static_cast<int64_t>(total_b - free_b);
    }
  } else {
    mem->peak_covers_lifetime = !reset_peak_rss();
    mem->rss_before = current_rss_bytes();
  }
  return std::nullopt;
}

// Memory after the calls: device-wide (cuda), or the resident peak during them (cpu).
void memory_after_calls(const RunConfig& c, MemoryReport* mem) {
  if (c.device == Device::cuda) {
    std::size_t free_b = 0, total_b = 0;
    if (gpu::mem_info(&free_b, &total_b).empty()) mem->device_used_after = static_cast<int64_t>(total_b - free_b);
  } else {
    mem->peak_rss = peak_rss_bytes();
    if (mem->peak_rss >= 0 && mem->rss_before >= 0) mem->extra = std::max<int64_t>(0, mem->peak_rss - mem->rss_before);
  }
}

}  // namespace

int run_command(const std::vector<std::string>& args) {
  RunConfig c;
  if (std::optional<int> done = read_config(args, &c)) return *done;
  std::string error;

  const Layout layout = make_layout(c);
  if (!fits_in_host_memory(tensors_bytes_estimate(layout, c), &error)) {
    print_error(c.json, kExitBadOptions, "--batch/--heads/--seqlen/--headdim: " + error);
    return kExitBadOptions;
  }
  Tensors host;
  if (error = allocate_tensors(layout, c, Device::cpu, &host); !error.empty()) {
    print_error(c.json, kExitBadOptions, error);
    return kExitBadOptions;
  }
  fill_inputs(layout, c, &host);

  // The tensors the call runs on: the host ones, or device copies.
  Tensors device;
  gpu::Stream owned_stream;
  if (c.device == Device::cuda) {
    if (error = owned_stream.create(); !error.empty()) return fail_cuda(c, error);
    if (error = allocate_tensors(layout, c, Device::cuda, &device); !error.empty()) {
      // Almost always out of device memory: the sizes asked for are too large for this GPU.
      print_error(c.json, kExitBadOptions, "--batch/--heads/--seqlen/--headdim: device tensors: " + error);
      return kExitBadOptions;
    }
    if (error = copy_inputs(host, &device); !error.empty()) return fail_cuda(c, error);
  }
  Tensors& run_on = c.device == Device::cuda ? device : host;
  void* const stream = owned_stream.get();  // null on the CPU

  if (std::optional<int> done = plan_workspace(layout, c, &run_on, stream)) return *done;
  const flashattn::ForwardArgs fwd = forward_args(layout, c, run_on, stream);
  const flashattn::BackwardArgs bwd = backward_args(layout, c, run_on, stream);

  RunReport report;
  report.config = &c;
  report.layout = &layout;
  report.device = device_description(c);
  report.path = c.backward ? flashattn::backward_path(bwd) : flashattn::forward_path(fwd);
  report.softmax_scale = c.options.softmax_scale.value_or(1.f / std::sqrt(static_cast<float>(c.hdim_qk)));
  report.visible_pairs = total_visible_pairs(layout, c);
  report.flops = c.backward ? backward_flops(layout, c) : forward_flops(layout, c);
  report.memory.tensors_bytes = static_cast<int64_t>(run_on.bytes());
  report.memory.workspace_bytes = static_cast<int64_t>(run_on.workspace.bytes());
  report.memory.naive_scores_bytes = score_entries(layout) * 4.0;

  // The backward needs out and lse: one untimed forward makes them (and is checked too).
  Status s;
  if (c.backward) {
    if (s = poison_outputs(&run_on, false, stream); !s.ok()) return fail(c, s, "forward");
    if (s = flashattn::forward(fwd); !s.ok()) return fail(c, s, "forward");
  }

  if (std::optional<int> done = memory_before_calls(c, stream, &report.memory)) return *done;

  const std::function<Status()> call = c.backward ? std::function<Status()>([&] { return flashattn::backward(bwd); })
                                                  : std::function<Status()>([&] { return flashattn::forward(fwd); });
  // --deterministic: hash dq, dk, dv after every call; all hashes must agree.
  std::vector<uint64_t> hashes;
  std::function<Status()> after_call;
  if (c.backward && c.deterministic) {
    after_call = [&]() -> Status {
      if (c.device == Device::cuda) {
        if (std::string e = copy_outputs(device, &host, true); !e.empty()) return {StatusCode::cuda_error, e};
      }
      hashes.push_back(hash_gradients(host));
      return Status::success();
    };
  }
  if (s = time_calls(c, &run_on, c.backward, stream, call, &report.timings, after_call); !s.ok()) {
    return fail(c, s, c.backward ? "backward" : "forward");
  }

  memory_after_calls(c, &report.memory);
  if (c.device == Device::cuda) {
    if (error = copy_outputs(device, &host, c.backward); !error.empty()) return fail_cuda(c, error);
  }

  if (!hashes.empty()) {
    report.reproducible = std::all_of(hashes.begin(), hashes.end(), [&](uint64_t h) { return h == hashes[0]; });
  }
  if (c.check) {
    if (s = check_outputs(layout, c, host, &report.check); !s.ok()) return fail(c, s, "check");
  }
  if (c.json) {
    std::printf("%s\n", to_json(report).c_str());
  } else {
    print_human(report, stdout);
  }
  return report.ok() ? kExitOk : kExitCheckFailed;
}

}  // namespace fa_cli
