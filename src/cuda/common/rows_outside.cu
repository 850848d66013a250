// Zeroes the packed rows no sequence covers (AttentionArgs::zero_rows_outside_sequences), on the
// caller's stream, reading the offsets on the device: no synchronization, and nothing to do for the
// usual batch whose sequences fill the tensor (the kernel reads two offsets and returns).
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/host_runtime.hpp"
#include "cuda/cuda_backend.hpp"

namespace flashattn::cuda {
namespace {

struct PackedOutputs {
  PackedRows t[kMaxPackedOutputs];
};

constexpr int kThreads = 256;
constexpr int kBlocksPerOutput = 64;  // a grid-stride loop: gaps are rare and small

// blockIdx.y: which output. Every row is a whole number of 16-bit units (f16, bf16, f32).
__global__ void zero_rows_outside_kernel(PackedOutputs outputs) {
  const PackedRows t = outputs.t[blockIdx.y];
  const int64_t first = t.first(), last = t.last(first);
  const int64_t units = t.row_bytes / 2;
  const int64_t n = (first + t.total - last) * t.heads * units;
  auto* base = static_cast<char*>(t.base);
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t u = i % units, h = i / units % t.heads, r = i / units / t.heads;
    const int64_t row = r < first ? r : last + (r - first);
    *reinterpret_cast<uint16_t*>(base + row * t.row_stride + h * t.head_stride + u * 2) = 0;
  }
}

}  // namespace

Status zero_rows_outside(const PackedRows* rows, int count, void* stream) {
  PackedOutputs outputs;
  int n = 0;
  for (int i = 0; i < count && n < kMaxPackedOutputs; ++i) {
    if (rows[i].heads > 0 && rows[i].row_bytes > 0) outputs.t[n++] = rows[i];
  }
  if (n == 0) return Status::success();
  const dim3 grid(kBlocksPerOutput, static_cast<unsigned>(n));
  zero_rows_outside_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(outputs);
  return cuda_status("zero_rows_outside_sequences", cudaGetLastError(), "launching the kernel");
}

}  // namespace flashattn::cuda
