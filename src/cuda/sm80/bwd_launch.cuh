// Definition of launch_bwd_main (declared in bwd_launch.hpp); only the generated per-instance
// translation units include this file, each instantiating it for one (dtype, head dim).
#pragma once

#include "cuda/sm80/bwd_kernel.cuh"
#include "cuda/sm80/bwd_launch.hpp"

namespace flashattn::cuda::sm80 {

template <class Elem, int kHeadDim, bool kBigSmem>
Status launch_bwd_main_tile(const BwdKernelParams& p, cudaStream_t stream) {
  constexpr int kSmem = BwdShape<kHeadDim, kBigSmem>::kSmemBytes;
  const bool softcap = p.scores.mode == ScoreMode::softcap;
  const auto kernel = softcap ? bwd_main_kernel<Elem, kHeadDim, kBigSmem, true>
                              : bwd_main_kernel<Elem, kHeadDim, kBigSmem, false>;
  const int64_t blocks = p.grid_blocks;  // whole blocks, then the split tail's parts (bwd_params.cuh)
  if (blocks == 0) return Status::success();
  static DeviceFlags opted_in[2];  // [softcap]
  const int dev = current_device();
  if (!opted_in[softcap].test(dev)) {
    Status s = bwd_cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
                           "raising the main kernel's shared-memory limit");
    if (!s.ok()) return s;
    opted_in[softcap].set(dev);
  }
  kernel<<<static_cast<unsigned>(blocks), kBwdThreads, kSmem, stream>>>(p);
  return bwd_cuda_status(cudaGetLastError(), "main kernel launch");
}

template <class Elem, int kHeadDim, bool kBigSmem>
Status check_bwd_main_image_tile() {
  static DeviceFlags checked;
  const int dev = current_device();
  if (checked.test(dev)) return Status::success();
  cudaFuncAttributes attr{};
  const cudaError_t e = cudaFuncGetAttributes(&attr, bwd_main_kernel<Elem, kHeadDim, kBigSmem, false>);
  if (e != cudaSuccess) {
    cudaGetLastError();  // an answer, not an error of the caller's stream
    return Status::unsupported(std::string("cuda sm80 backward: no kernel image for this GPU (") + cudaGetErrorName(e) +
                               "); add its architecture to FLASHATTN_CUDA_ARCHS");
  }
  checked.set(dev);
  return Status::success();
}

template <class Elem, int kHeadDim>
Status check_bwd_main_image(bool big_smem) {
  if constexpr (bwd_tile(kHeadDim, true).stages != bwd_tile(kHeadDim, false).stages) {
    if (big_smem) return check_bwd_main_image_tile<Elem, kHeadDim, true>();
  }
  return check_bwd_main_image_tile<Elem, kHeadDim, false>();
}

template <class Elem, int kHeadDim>
Status launch_bwd_main(const BwdKernelParams& p, cudaStream_t stream, bool big_smem) {
  // Only tiles that differ get a second kernel.
  if constexpr (bwd_tile(kHeadDim, true).stages != bwd_tile(kHeadDim, false).stages) {
    if (big_smem) return launch_bwd_main_tile<Elem, kHeadDim, true>(p, stream);
  }
  return launch_bwd_main_tile<Elem, kHeadDim, false>(p, stream);
}

}  // namespace flashattn::cuda::sm80
