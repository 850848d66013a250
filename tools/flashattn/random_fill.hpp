// Reproducible random inputs: standard normal values (never zeros, as torch.randn), the same for a
// given (seed, stream) whatever the thread count, generated in parallel chunks.
#pragma once

#include <cstdint>

#include "flashattn/flashattn.hpp"

namespace fa_cli {

// Fills n elements of `dtype` (f32, f16, bf16) with N(0, 1) values rounded to the dtype.
void fill_normal(void* data, flashattn::DType dtype, int64_t n, uint64_t seed, uint64_t stream);

// A small counter-based generator for everything else random (sequence lengths, sampled rows).
class Rng {
 public:
  Rng(uint64_t seed, uint64_t stream);
  uint64_t next();
  int64_t uniform(int64_t lo, int64_t hi);  // in [lo, hi]

 private:
  uint64_t state_;
};

}  // namespace fa_cli
