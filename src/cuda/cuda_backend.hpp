// The CUDA kernel families as select() sees them. Built without CUDA, each is still in the table
// (cuda/no_cuda.cpp) and says so when planned.
#pragma once

#include "backend/family.hpp"

namespace flashattn::cuda {

bool device_available();

// The portable tensor-core path (mma.sync, ldmatrix, cp.async): sm_80 and later.
const Family& sm80_family();

// Hopper (sm_90a: TMA, mbarrier, wgmma): compute capability 9.0 only; "auto" takes its backward only
// where it measured faster than sm80's (sm90/bwd_launch.hpp's kBackwardAuto).
const Family& sm90_family();

// Writes 0 to the rows of `count` packed outputs that no sequence covers (params.hpp's PackedRows),
// on `stream` (a cudaStream_t), reading the offsets on the device.
Status zero_rows_outside(const PackedRows* rows, int count, void* stream);

// The KV-cache call (split-KV decode over contiguous or paged caches): sm_80 and later; only the
// kvcache direction.
const Family& decode_family();

}  // namespace flashattn::cuda
