// A command's configuration with every default resolved: the backend chosen, sizes filled in.
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

// How a command times and reports, whatever it runs (run, decode): the calls, the check against the
// reference, the output format, the threads.
struct LoopConfig {
  int64_t repeats = 0, warmup = 0;
  bool check = true;
  uint64_t seed = 0;
  bool json = false, quiet = false;
  int64_t threads = 0;
};

struct RunConfig : LoopConfig {
  flashattn::Device device = flashattn::Device::cpu;
  flashattn::DType dtype = flashattn::DType::f32;
  int64_t batch = 0, heads_q = 0, heads_kv = 0;
  int64_t seqlen_q = 0, seqlen_k = 0;  // varlen: the maxima of the random lengths
  int64_t hdim_qk = 0, hdim_v = 0;
  flashattn::AttentionOptions options;  // as given (the library applies the defaults)
  std::string path = "auto";            // the kernel family asked for (AttentionArgs::path)
  bool varlen = false, backward = false, deterministic = false;
};

// Chooses the backend and fills the defaults. --backend auto: the backend of the --path family
// when one is named (cpu when the library runs it on cpu tensors, else cuda), else cuda when
// flashattn::cuda_available(). Returns false with a message naming the option at fault when the
// run cannot be set up (--backend cuda or a CUDA family without CUDA, sizes whose element counts
// overflow 64 bits, ...).
bool resolve(const Options& options, RunConfig* config, std::string* error);

// What a plain `flashattn decode` does: a few sequences of a small cache on the CPU; on a GPU the
// benchmark's GQA 32/8 shape at an 8k cache (repeats and warm-up are defaults_for's).
struct DecodeDefaults {
  int64_t batch, heads, heads_kv, seqlen_k, headdim;
  flashattn::DType dtype;
};
DecodeDefaults decode_defaults_for(flashattn::Device device);

struct DecodeConfig : LoopConfig {
  flashattn::Device device = flashattn::Device::cpu;
  flashattn::DType dtype = flashattn::DType::f32;
  int64_t batch = 0, heads_q = 0, heads_kv = 0;
  int64_t seqlen_q = 0;   // query tokens per sequence
  int64_t cached = 0;     // keys in the cache per sequence before the call (--seqlen-k)
  int64_t new_rows = 0;   // rows appended by the call (k_new / v_new); 0: none given
  int64_t hdim_qk = 0, hdim_v = 0;
  int64_t page_size = 0;  // 0: contiguous
  Rotary rotary = Rotary::none;
  flashattn::AttentionOptions options;
  int64_t num_splits = 0;
  std::string path = "auto";

  int64_t seqlen_k() const { return cached + new_rows; }  // keys each sequence attends to
  int64_t capacity() const { return cached + new_rows; }  // keys per sequence the cache holds
  bool paged() const { return page_size > 0; }
  // Paged: each sequence's pages, and the pool they are drawn from (a few spare pages no sequence
  // uses, so the block table is a real choice among more pages than needed).
  int64_t pages_per_sequence() const { return paged() ? (capacity() + page_size - 1) / page_size : 0; }
  int64_t pool_pages() const { return paged() ? batch * pages_per_sequence() + kSparePages : 0; }
  static constexpr int64_t kSparePages = 3;
};

// As resolve(), for `flashattn decode`.
bool resolve_decode(const Options& options, DecodeConfig* config, std::string* error);

}  // namespace fa_cli
