// The sm80 backward's launch functions, as the host dispatch (bwd_api.cu) sees them. The main
// kernel's are defined per (dtype, head dim) instance in generated translation units
// (bwd_instance.cu.in, listed by backward.cmake); the pre/postprocess ones in bwd_prepost.cu.
// Each launches on `stream`, never synchronizes, and returns cuda_error if the launch failed.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <string>

#include "api/params.hpp"
#include "cuda/sm80/bwd_params.cuh"

namespace flashattn::cuda::sm80 {

// Elem: ptx::F16 or ptx::BF16. big_smem: the device fits bwd_tile(kHeadDim, true).
template <class Elem, int kHeadDim>
Status launch_bwd_main(const BwdKernelParams& params, cudaStream_t stream, bool big_smem);
// ok when this build holds machine code (or PTX) of the instance for the current device; else
// not_supported naming FLASHATTN_CUDA_ARCHS.
template <class Elem, int kHeadDim>
Status check_bwd_main_image(bool big_smem);

// Per-device "already done" flags of one-time host work (device queries, shared-memory opt-in),
// so that a call costs one cudaGetDevice, not a handful of driver queries.
inline constexpr int kBwdMaxCachedDevices = 64;
struct BwdDeviceFlags {
  std::atomic<bool> done[kBwdMaxCachedDevices] = {};
  bool test(int dev) const {
    return dev >= 0 && dev < kBwdMaxCachedDevices && done[dev].load(std::memory_order_acquire);
  }
  void set(int dev) {
    if (dev >= 0 && dev < kBwdMaxCachedDevices) done[dev].store(true, std::memory_order_release);
  }
};

inline int bwd_current_device() {
  int dev = -1;
  return cudaGetDevice(&dev) == cudaSuccess ? dev : -1;
}

// D = rowsum(dO ∘ O) and LSE·log2e into the workspace; zeroes dq_accum and the counters.
Status launch_bwd_preprocess(const BwdKernelParams& params, DType dtype, cudaStream_t stream);
// dq = dq_accum · scale, in the output dtype, strided.
Status launch_bwd_postprocess(const BwdKernelParams& params, DType dtype, cudaStream_t stream);

// A cuda_error Status naming what failed, or ok.
inline Status bwd_cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::success();
  return {StatusCode::cuda_error, std::string("cuda sm80 backward: ") + what + ": " + cudaGetErrorName(err) + " (" +
                                      cudaGetErrorString(err) + ")"};
}

}  // namespace flashattn::cuda::sm80
