// A run's configuration with every default resolved: the backend chosen, sizes filled in.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "flashattn/flashattn.hpp"
#include "options.hpp"

namespace fa_cli {

// What a plain `flashattn run` does on each backend: a demo that finishes in a few seconds on a
// 2-core CPU, and a size that keeps a GPU busy.
struct Defaults {
  int64_t batch, heads, seqlen, headdim;
  flashattn::DType dtype;
  int64_t repeats, warmup;
};
Defaults defaults_for(flashattn::Device device);

struct RunConfig {
  flashattn::Device device = flashattn::Device::cpu;
  flashattn::DType dtype = flashattn::DType::f32;
  int64_t batch = 0, heads_q = 0, heads_kv = 0;
  int64_t seqlen_q = 0, seqlen_k = 0;  // varlen: the maxima of the random lengths
  int64_t hdim_qk = 0, hdim_v = 0;
  flashattn::AttentionOptions options;  // as given (the library applies the defaults)
  std::string path = "auto";            // the kernel family asked for (AttentionArgs::path)
  bool varlen = false, backward = false, deterministic = false;
  int64_t repeats = 0, warmup = 0;
  bool check = true;
  uint64_t seed = 0;
  bool json = false, quiet = false;
  int64_t threads = 0;
};

// Chooses the backend and fills the defaults. --backend auto: the backend of the --path family
// when one is named (cpu when the library runs it on cpu tensors, else cuda), else cuda when
// flashattn::cuda_available(). Returns false with a message naming the option at fault when the
// run cannot be set up (--backend cuda or a CUDA family without CUDA, sizes whose element counts
// overflow 64 bits, ...).
bool resolve(const RunOptions& options, RunConfig* config, std::string* error);

}  // namespace fa_cli
