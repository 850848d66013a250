// The timed loop: warm-up calls, then timed calls, each preceded by poisoning the outputs with NaN
// (outside the timed region) and timed alone: steady clock on the CPU, CUDA events on the stream.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "config.hpp"
#include "flashattn/flashattn.hpp"
#include "problem.hpp"

namespace fa_cli {

struct Timings {
  std::vector<double> ms;  // one per timed call
  double median_ms() const;
  double min_ms() const;
};

// Poisons (0xff bytes: NaN in f32, f16 and bf16) the buffers on `device`, enqueued on `stream`
// for cuda.
flashattn::Status poison(const std::vector<Buffer*>& buffers, flashattn::Device device, void* stream);

// Poisons the outputs the call writes: out and lse, or dq, dk, dv.
flashattn::Status poison_outputs(Tensors* t, bool backward, void* stream);

// How many calls to make and where: what time_calls needs of a command's configuration.
struct CallLoop {
  int64_t warmup = 0, repeats = 0;
  bool on_gpu = false;
  void* stream = nullptr;
  bool quiet = false;
  const char* label = "run";  // of the progress lines
};

// Runs `call` loop.warmup + loop.repeats times, each after `before_call` (outside the timed
// region). A failing call stops the loop and its Status is returned; a CUDA runtime error comes
// back as StatusCode::cuda_error. `after_call`, when set, runs after each call has finished,
// outside the timed region.
flashattn::Status time_calls(const CallLoop& loop, const std::function<flashattn::Status()>& before_call,
                             const std::function<flashattn::Status()>& call, Timings* timings,
                             const std::function<flashattn::Status()>& after_call = nullptr);

// The run command's loop: its outputs poisoned before each call.
flashattn::Status time_calls(const RunConfig& config, Tensors* t, bool backward, void* stream,
                             const std::function<flashattn::Status()>& call, Timings* timings,
                             const std::function<flashattn::Status()>& after_call = nullptr);

// A hash of the bytes of the backward's outputs (dq, dk, dv) of host tensors: equal hashes across
// calls mean bitwise identical results (what --deterministic promises).
uint64_t hash_gradients(const Tensors& host);

}  // namespace fa_cli
