// Launch code of the decode attention kernel for one (Tag, D) instance: the contiguous- and the
// paged-cache kernel, each with every way of loading (AttendLoads), their shared-memory opt-in, and
// their device check. Included only by the generated per-instance translation units.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "backend/status_try.hpp"
#include "cuda/common/device_info.hpp"
#include "cuda/common/host_runtime.hpp"
#include "cuda/decode/attend_kernel.cuh"
#include "cuda/decode/launch.hpp"
#include "cuda/decode/shape.cuh"

namespace flashattn::cuda::decode {

template <class Traits>
Status attend_launch_traits(const AttendParams& p, const AttendMaps* maps, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.num_splits), static_cast<unsigned>(p.num_m_blocks * p.heads_kv),
                  static_cast<unsigned>(p.batch));
  if (grid.y == 0 || grid.z == 0) return Status::success();
  static DeviceFlags opted_in;
  if constexpr (Traits::kTma) {
    if (maps == nullptr) return Status::invalid("cuda decode: TMA loads without tensor maps");
    auto* kernel = &attend_tma_kernel<Traits>;
    FLASHATTN_TRY(opt_in_dynamic_smem("cuda decode", kernel, Traits::kSmemBytes, opted_in));
    kernel<<<grid, dim3(Traits::kLaunchThreads), Traits::kSmemBytes, stream>>>(maps->k, maps->v, p);
  } else {
    auto* kernel = &attend_kernel<Traits>;
    FLASHATTN_TRY(opt_in_dynamic_smem("cuda decode", kernel, Traits::kSmemBytes, opted_in));
    kernel<<<grid, dim3(Traits::kLaunchThreads), Traits::kSmemBytes, stream>>>(p);
  }
  return cuda_status("cuda decode", cudaGetLastError(), "attention kernel launch");
}

// Whether the kernel has an image for this GPU and fits its shared memory (once per device); a
// kernel with a producer also needs its image to be sm_90's (an sm_80 image of it only traps).
template <class Traits, class Kernel>
Status attend_check_kernel(Kernel* kernel) {
  static DeviceFlags checked;
  const int current = current_device();
  if (checked.test(current)) return Status::success();
  static DeviceFlags fits;
  FLASHATTN_TRY(check_kernel_fits("cuda decode", kernel, Traits::kSmemBytes, Traits::kHeadDim, fits));
  if constexpr (Traits::kWarpSpecialized) {
    cudaFuncAttributes attr{};
    FLASHATTN_TRY(cuda_status("cuda decode", cudaFuncGetAttributes(&attr, kernel), "kernel attributes"));
    if (attr.binaryVersion < 90) {
      return Status::unsupported("cuda decode: the producer attention kernels need an sm_90 image (this GPU runs sm_" +
                                 std::to_string(attr.binaryVersion) + "'s)");
    }
  }
  checked.set(current);
  return Status::success();
}

template <class Tag, int kHeadDim, bool kPaged>
Status attend_run_layout(const AttendParams& p, AttendLoads loads, const AttendMaps* maps, cudaStream_t stream) {
  switch (loads) {
    case AttendLoads::tma:
      return attend_launch_traits<DecodeTraits<Tag, kHeadDim, kPaged, AttendLoads::tma>>(p, maps, stream);
    case AttendLoads::producer_cp_async:
      return attend_launch_traits<DecodeTraits<Tag, kHeadDim, kPaged, AttendLoads::producer_cp_async>>(p, maps, stream);
    case AttendLoads::cp_async:
      break;
  }
  return attend_launch_traits<DecodeTraits<Tag, kHeadDim, kPaged, AttendLoads::cp_async>>(p, maps, stream);
}

template <class Tag, int kHeadDim, bool kPaged>
Status attend_check_layout(AttendLoads loads) {
  using Tma = DecodeTraits<Tag, kHeadDim, kPaged, AttendLoads::tma>;
  using Producer = DecodeTraits<Tag, kHeadDim, kPaged, AttendLoads::producer_cp_async>;
  using CpAsync = DecodeTraits<Tag, kHeadDim, kPaged, AttendLoads::cp_async>;
  switch (loads) {
    case AttendLoads::tma:
      return attend_check_kernel<Tma>(&attend_tma_kernel<Tma>);
    case AttendLoads::producer_cp_async:
      return attend_check_kernel<Producer>(&attend_kernel<Producer>);
    case AttendLoads::cp_async:
      break;
  }
  return attend_check_kernel<CpAsync>(&attend_kernel<CpAsync>);
}

template <class Tag, int kHeadDim>
Status attend_run(const AttendParams& p, bool paged, AttendLoads loads, const AttendMaps* maps, cudaStream_t stream) {
  if (paged) return attend_run_layout<Tag, kHeadDim, true>(p, loads, maps, stream);
  return attend_run_layout<Tag, kHeadDim, false>(p, loads, maps, stream);
}

template <class Tag, int kHeadDim>
Status attend_device_check(bool paged, AttendLoads loads) {
  if (paged) return attend_check_layout<Tag, kHeadDim, true>(loads);
  return attend_check_layout<Tag, kHeadDim, false>(loads);
}

}  // namespace flashattn::cuda::decode

// One instance: attend_run and attend_device_check of (Tag, D). Used by the generated attend_*_hdim*.cu.
#define FLASHATTN_DECODE_INSTANCE(Tag, D)                                                                          \
  template flashattn::Status flashattn::cuda::decode::attend_run<Tag, D>(                                           \
      const flashattn::cuda::decode::AttendParams&, bool, flashattn::cuda::decode::AttendLoads,                     \
      const flashattn::cuda::decode::AttendMaps*, cudaStream_t);                                                    \
  template flashattn::Status flashattn::cuda::decode::attend_device_check<Tag, D>(bool,                             \
                                                                                 flashattn::cuda::decode::AttendLoads);
