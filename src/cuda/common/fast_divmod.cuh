// Division by a divisor fixed per call, without a division instruction (page sizes: the decode
// family's caches and the sm80 forward's paged keys).
#pragma once

#include <cstdint>

#include "cuda/common/host_device.cuh"

namespace flashattn::cuda {

// n / d and n % d for 0 ≤ n < 2^31 and a divisor d ≥ 1 fixed per call, without a division
// instruction: q = (umulhi(n, m) + n) >> s with s = ceil(log2 d) and m = floor(2^32·(2^s − d) / d) + 1
// (Granlund and Montgomery, "Division by invariant integers using multiplication", 1994).
struct FastDivmod {
  uint32_t multiplier = 0;
  int shift = 0, divisor = 1;

  static FastDivmod of(int d) {
    FastDivmod f;
    f.divisor = d;
    while ((int64_t{1} << f.shift) < d) ++f.shift;
    f.multiplier = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << f.shift) - d)) / d + 1);
    return f;
  }
  FLASHATTN_HD int quotient(int n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi(static_cast<uint32_t>(n), multiplier);
#else
    const uint32_t hi = static_cast<uint32_t>((uint64_t{static_cast<uint32_t>(n)} * multiplier) >> 32);
#endif
    return static_cast<int>((hi + static_cast<uint32_t>(n)) >> shift);
  }
};

}  // namespace flashattn::cuda
