// What every CUDA family's instance registry shares: the index of a dtype in its per-dtype entry
// points, and the choice of the compiled instance for a call's head dim.
#pragma once

#include <cstdint>

#include "flashattn/flashattn.hpp"

namespace flashattn::cuda {

// [dtype_index]: f16, bf16 (the tensor-core kernels' two dtypes).
inline int dtype_index(DType dtype) { return dtype == DType::bf16 ? 1 : 0; }

// The smallest instance whose head dim holds `head_dim` (instances run any head dim up to theirs by
// zero-filling the columns past it), or null. An entry of head dim 0 is a placeholder and never
// matches (it keeps a registry array non-empty in a build without instances).
template <class Instance, std::size_t N>
const Instance* smallest_instance_holding(const Instance (&instances)[N], int64_t head_dim) {
  const Instance* best = nullptr;
  for (const Instance& inst : instances) {
    if (inst.head_dim >= head_dim && inst.head_dim > 0 && (best == nullptr || inst.head_dim < best->head_dim)) {
      best = &inst;
    }
  }
  return best;
}

}  // namespace flashattn::cuda
