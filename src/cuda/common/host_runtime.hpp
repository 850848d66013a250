// Host-side helpers every CUDA entry point shares: the current device, per-device "done once"
// flags for one-time host work (an instance's device check, its shared-memory opt-in), and the
// cuda_error Status that names who failed and at what.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <string>

#include "flashattn/flashattn.hpp"

namespace flashattn::cuda {

// Dynamic shared memory a kernel may use without opting in (cudaFuncSetAttribute).
inline constexpr std::size_t kDefaultDynamicSmemBytes = 48 * 1024;

// Devices with an index past this are served without the cache (queried every call).
inline constexpr int kMaxCachedDevices = 64;

// So that a call costs one cudaGetDevice, not a handful of driver queries.
struct DeviceFlags {
  std::atomic<bool> done[kMaxCachedDevices] = {};
  bool test(int dev) const { return dev >= 0 && dev < kMaxCachedDevices && done[dev].load(std::memory_order_acquire); }
  void set(int dev) {
    if (dev >= 0 && dev < kMaxCachedDevices) done[dev].store(true, std::memory_order_release);
  }
};

inline int current_device() {
  int dev = -1;
  return cudaGetDevice(&dev) == cudaSuccess ? dev : -1;
}

// ok for cudaSuccess; else cuda_error "<who>: <what>: <error name> (<error string>)".
inline Status cuda_status(const char* who, cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::success();
  return {StatusCode::cuda_error,
          std::string(who) + ": " + what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")"};
}

}  // namespace flashattn::cuda
