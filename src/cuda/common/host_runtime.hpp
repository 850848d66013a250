// Host-side helpers every CUDA entry point shares: the current device, per-device "done once"
// flags for one-time host work (an instance's device check, check_kernel_fits; its shared-memory
// opt-in, opt_in_dynamic_smem), the cuda_error Status that names who failed and at what, a launch
// as the previous kernel's programmatic dependent (launch_dependent), and the 16-byte layout check
// of a tensor.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "backend/params.hpp"
#include "cuda/common/device_info.hpp"
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

// Lets `kernel` use `smem` bytes of dynamic shared memory (cudaFuncSetAttribute), once per device
// (`done` remembers, e.g. a function-local static of the kernel's launcher); nothing to do at or
// below the default 48 KB. cuda_error names `who` otherwise.
template <class Kernel>
Status opt_in_dynamic_smem(const char* who, Kernel kernel, std::size_t smem, DeviceFlags& done) {
  if (smem <= kDefaultDynamicSmemBytes) return Status::success();
  const int dev = current_device();
  if (done.test(dev)) return Status::success();
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return cuda_status(who, e, "raising the kernel's dynamic shared-memory limit");
  done.set(dev);
  return Status::success();
}

// Whether `kernel` has an image for the current GPU and fits its shared memory (`smem` dynamic bytes
// beside the kernel's static ones, against what a block may opt in to); asked once per device
// (`checked`, e.g. a function-local static of the instance). not_supported naming `who` (and the
// head dim instance) otherwise: the caller's plan falls back or says why.
template <class Kernel>
Status check_kernel_fits(const char* who, Kernel kernel, std::size_t smem, int head_dim, DeviceFlags& checked) {
  const int current = current_device();
  if (checked.test(current)) return Status::success();
  DeviceInfo dev;
  if (Status s = device_info(&dev); !s.ok()) return s;
  cudaFuncAttributes attr{};
  const cudaError_t e = cudaFuncGetAttributes(&attr, kernel);
  if (e != cudaSuccess) {
    cudaGetLastError();  // an answer, not a failure of the caller's stream
    return Status::unsupported(std::string(who) + ": no kernel image for this GPU (compute capability " +
                               std::to_string(dev.cc_major) + "." + std::to_string(dev.cc_minor) + ", " +
                               cudaGetErrorName(e) + "); add its architecture to FLASHATTN_CUDA_ARCHS");
  }
  if (smem + attr.sharedSizeBytes > static_cast<std::size_t>(dev.smem_optin)) {
    return Status::unsupported(std::string(who) + ": head dim instance " + std::to_string(head_dim) + " needs " +
                               std::to_string(smem) + " bytes of shared memory per block; this GPU allows " +
                               std::to_string(dev.smem_optin));
  }
  checked.set(current);
  return Status::success();
}

// Per-device answers of has_sm90_ptx: whether the kernel was asked about, and whether its image has
// PTX for sm_90+ (a function-local static of the kernel's launcher; launch_dependent's too, since
// griddepcontrol needs that PTX).
struct Sm90PtxFlags {
  DeviceFlags asked, has;
};

// Whether `kernel`, as the current device runs it, was compiled from PTX for sm_90+ (griddepcontrol,
// clusters; a build for sm_80 alone runs its sm_80 PTX there, where such code compiles to nothing).
// Asked once per device; cuda_error names `who` on failure.
template <class... Params>
Status has_sm90_ptx(const char* who, void (*kernel)(Params...), Sm90PtxFlags& flags, bool* has) {
  const int dev = current_device();
  if (!flags.asked.test(dev)) {
    cudaFuncAttributes attr{};
    const cudaError_t e = cudaFuncGetAttributes(&attr, kernel);
    if (e != cudaSuccess) return cuda_status(who, e, "querying the kernel's PTX version");
    if (attr.ptxVersion >= 90) flags.has.set(dev);
    flags.asked.set(dev);
  }
  *has = flags.has.test(dev);
  return Status::success();
}

// Launches `kernel`(args...) on `stream`; where `dependent` and the kernel has griddepcontrol (PTX for
// sm_90+, asked once per device), as a programmatic dependent of the kernel launched just before it
// (cudaLaunchAttributeProgrammaticStreamSerialization): it may start while that one's last blocks run
// and must griddep_wait() (ptx/griddep.cuh) before reading what that one wrote. Otherwise a plain
// launch in stream order. cuda_error names `who` and `what` on failure.
template <class... Params, class... Args>
Status launch_dependent(const char* who, const char* what, void (*kernel)(Params...), dim3 grid, dim3 block,
                        std::size_t smem, cudaStream_t stream, bool dependent, Sm90PtxFlags& flags, const Args&... args) {
  bool has_griddep = false;
  if (dependent) {
    const Status s = has_sm90_ptx(who, kernel, flags, &has_griddep);
    if (!s.ok()) return s;
  }
  cudaLaunchAttribute attribute[1] = {};
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = has_griddep ? 1 : 0;
  return cuda_status(who, cudaLaunchKernelEx(&config, kernel, args...), what);
}

// One dimension of a tensor view: its name (for the message), index count and stride in elements.
struct ViewDim {
  const char* name;
  int64_t extent;
  int64_t stride;
};

// The sm80 kernels move 16-byte chunks of 8 f16/bf16 elements: the data pointer must be 16-byte
// aligned and the stride of every dimension with more than one index a multiple of 8 elements
// (a stride of a dimension of extent 1 is never used). not_supported names `who`, the tensor and
// the dimension otherwise.
inline Status check_16byte_layout(const char* who, const char* tensor, const void* ptr,
                                  std::initializer_list<ViewDim> dims) {
  if (reinterpret_cast<std::uintptr_t>(ptr) % 16 != 0) {
    return Status::unsupported(std::string(who) + ": " + tensor +
                               ": data pointer is not 16-byte aligned (the kernels move 16-byte chunks)");
  }
  for (const ViewDim& d : dims) {
    if (d.extent > 1 && d.stride % 8 != 0) {
      return Status::unsupported(std::string(who) + ": " + tensor + ": " + d.name + " stride " +
                                 std::to_string(d.stride) + " is not a multiple of 8 elements (16 bytes)");
    }
  }
  return Status::success();
}

}  // namespace flashattn::cuda
