// What the CUDA kernel families ask of the current GPU, queried once per device for all of them:
// compute capability, multiprocessor count, the shared memory a block may opt in to, and the peak
// bandwidth of device memory.
#pragma once

#include "flashattn/flashattn.hpp"

namespace flashattn::cuda {

struct DeviceInfo {
  int device = -1;
  int cc_major = 0, cc_minor = 0;
  int num_sms = 0;
  int smem_optin = 0;  // bytes of shared memory one block may opt in to
  double memory_bandwidth = 0;  // peak bytes/s of device memory: 2 × memory clock × bus width; 0 unknown

  int compute_capability() const { return cc_major * 10 + cc_minor; }
};

// Where the families' rules part "fast" from "slow" device memory (bytes/s): the H200's 4.8 TB/s
// above, the H100's 3.35 below (an unknown bandwidth, 0, counts as slow).
inline constexpr double kFastMemory = 4e12;

// ok with *info of the current device, or cuda_error naming the failed query. Test overrides
// (backend/testing.hpp) are applied to the answer.
Status device_info(DeviceInfo* info);

}  // namespace flashattn::cuda
