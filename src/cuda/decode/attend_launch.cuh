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
  return check_kernel_fits("cuda decode", &attend_kernel<Traits>, Traits::kSmemBytes, Traits::kHeadDim, checked);
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
