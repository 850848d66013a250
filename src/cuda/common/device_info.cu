#include "cuda/common/device_info.hpp"

#include <cuda_runtime.h>

#include <atomic>
#include <mutex>

#include "backend/status_try.hpp"
#include "backend/testing.hpp"
#include "cuda/common/host_runtime.hpp"
#include "cuda/cuda_backend.hpp"

namespace flashattn::cuda {
namespace {

// One slot per device index below kMaxCachedDevices; `ready` is published last.
struct CachedInfo {
  std::atomic<bool> ready{false};
  DeviceInfo info;
};

Status query(int dev, DeviceInfo* d) {
  d->device = dev;
  cudaError_t e = cudaDeviceGetAttribute(&d->cc_major, cudaDevAttrComputeCapabilityMajor, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&d->cc_minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&d->num_sms, cudaDevAttrMultiProcessorCount, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&d->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (e != cudaSuccess) cudaGetLastError();  // an answer, not an error of the caller's stream
  FLASHATTN_TRY(cuda_status("cuda", e, "querying the current device"));
  // The memory's peak (a planning hint, not a requirement): left 0 where the device does not say.
  int clock_khz = 0, bus_bits = 0;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev) == cudaSuccess) {
    d->memory_bandwidth = 2.0 * clock_khz * 1e3 * bus_bits / 8;  // double data rate
  } else {
    cudaGetLastError();
  }
  return Status::success();
}

}  // namespace

bool device_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

Status device_info(DeviceInfo* info) {
  static CachedInfo cache[kMaxCachedDevices];
  int dev = -1;
  const cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return cuda_status("cuda", e, "cudaGetDevice");
  }
  if (dev >= 0 && dev < kMaxCachedDevices && cache[dev].ready.load(std::memory_order_acquire)) {
    *info = cache[dev].info;
  } else {
    Status s = query(dev, info);
    if (!s.ok()) return s;
    static std::mutex publishing;
    std::lock_guard<std::mutex> lock(publishing);
    if (dev >= 0 && dev < kMaxCachedDevices && !cache[dev].ready.load(std::memory_order_relaxed)) {
      cache[dev].info = *info;
      cache[dev].ready.store(true, std::memory_order_release);
    }
  }
  const testing::DeviceOverrides o = testing::device_overrides();
  if (o.num_sms > 0) info->num_sms = o.num_sms;
  if (o.smem_optin > 0) info->smem_optin = o.smem_optin;
  return Status::success();
}

}  // namespace flashattn::cuda
