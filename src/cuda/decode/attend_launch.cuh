// Launch code of the decode attention kernel for one (Tag, D) instance: the contiguous- and the
// paged-cache kernel, their shared-memory opt-in, and their device check. Included only by the
// generated per-instance translation units.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "api/status_try.hpp"
#include "cuda/common/device_info.hpp"
#include "cuda/common/host_runtime.hpp"
#include "cuda/decode/attend_kernel.cuh"
#include "cuda/decode/launch.hpp"
#include "cuda/decode/shape.cuh"

namespace flashattn::cuda::decode {

template <class Traits>
Status attend_launch_traits(const AttendParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.num_splits), static_cast<unsigned>(p.num_m_blocks * p.heads_kv),
                  static_cast<unsigned>(p.batch));
  if (grid.y == 0 || grid.z == 0) return Status::success();
  auto* kernel = &attend_kernel<Traits>;
  static DeviceFlags opted_in;
  FLASHATTN_TRY(opt_in_dynamic_smem("cuda decode", kernel, Traits::kSmemBytes, opted_in));
  kernel<<<grid, dim3(Traits::kThreads), Traits::kSmemBytes, stream>>>(p);
  return cuda_status("cuda decode", cudaGetLastError(), "attention kernel launch");
}

// Whether the kernel has an image for this GPU and fits its shared memory (once per device).
template <class Traits>
Status attend_check_traits() {
  static DeviceFlags checked;
  const int current = current_device();
  if (checked.test(current)) return Status::success();
  DeviceInfo dev;
  FLASHATTN_TRY(device_info(&dev));
  cudaFuncAttributes attr{};
  const cudaError_t e = cudaFuncGetAttributes(&attr, &attend_kernel<Traits>);
  if (e != cudaSuccess) {
    cudaGetLastError();  // an answer, not a failure of the caller's stream
    return Status::unsupported("cuda decode: no kernel image for this GPU (compute capability " +
                               std::to_string(dev.cc_major) + "." + std::to_string(dev.cc_minor) + ", " +
                               cudaGetErrorName(e) + "); add its architecture to FLASHATTN_CUDA_ARCHS");
  }
  if (Traits::kSmemBytes + attr.sharedSizeBytes > static_cast<std::size_t>(dev.smem_optin)) {
    return Status::unsupported("cuda decode: head dim instance " + std::to_string(Traits::kHeadDim) + " needs " +
                               std::to_string(Traits::kSmemBytes) + " bytes of shared memory per block; this GPU allows " +
                               std::to_string(dev.smem_optin));
  }
  checked.set(current);
  return Status::success();
}

template <class Tag, int kHeadDim>
Status attend_run(const AttendParams& p, bool paged, cudaStream_t stream) {
  if (paged) return attend_launch_traits<DecodeTraits<Tag, kHeadDim, true>>(p, stream);
  return attend_launch_traits<DecodeTraits<Tag, kHeadDim, false>>(p, stream);
}

template <class Tag, int kHeadDim>
Status attend_device_check(bool paged) {
  if (paged) return attend_check_traits<DecodeTraits<Tag, kHeadDim, true>>();
  return attend_check_traits<DecodeTraits<Tag, kHeadDim, false>>();
}

}  // namespace flashattn::cuda::decode

// One instance: attend_run and attend_device_check of (Tag, D). Used by the generated attend_*_hdim*.cu.
#define FLASHATTN_DECODE_INSTANCE(Tag, D)                                                                       \
  template flashattn::Status flashattn::cuda::decode::attend_run<Tag, D>(const flashattn::cuda::decode::AttendParams&, \
                                                                          bool, cudaStream_t);                    \
  template flashattn::Status flashattn::cuda::decode::attend_device_check<Tag, D>(bool);
