// Small helpers for the GPU unit tests: skip without a device (or without an sm_90 one), device
// buffers, 16-bit conversions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "cuda/ptx/mma.cuh"

namespace fa_test {

inline bool has_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define FA_REQUIRE_DEVICE()                                      \
  do {                                                           \
    if (!fa_test::has_device()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

// The current device's compute capability is major.minor (false without a device).
inline bool device_has_cc(int major, int minor) {
  int dev = 0, ma = 0, mi = 0;
  return has_device() && cudaGetDevice(&dev) == cudaSuccess &&
         cudaDeviceGetAttribute(&ma, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
         cudaDeviceGetAttribute(&mi, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess && ma == major &&
         mi == minor;
}

// sm_90a code (wgmma, setmaxnreg) runs on compute capability 9.0 only: not on a later GPU either.
#define FA_REQUIRE_SM90()                                                                             \
  do {                                                                                                \
    FA_REQUIRE_DEVICE();                                                                              \
    if (!fa_test::device_has_cc(9, 0)) GTEST_SKIP() << "needs a compute capability 9.0 GPU (sm_90a)"; \
  } while (0)

#define FA_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << cudaGetErrorString(cudaGetLastError())

// Launch check: the launch itself and the kernel's completion.
#define FA_KERNEL_OK()                                  \
  do {                                                  \
    FA_CUDA_OK(cudaGetLastError());                     \
    FA_CUDA_OK(cudaDeviceSynchronize());                \
  } while (0)

template <class T>
struct DeviceBuffer {
  T* ptr = nullptr;
  std::size_t n = 0;
  explicit DeviceBuffer(std::size_t count) : n(count) { cudaMalloc(&ptr, count * sizeof(T) + 16); }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void upload(const std::vector<T>& host) { cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice); }
  std::vector<T> download() const {
    std::vector<T> host(n);
    cudaMemcpy(host.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
  }
};

// 16-bit storage <-> float on the host, for either tag.
template <class Tag>
inline uint16_t to_bits(float x) {
  if constexpr (std::is_same_v<Tag, flashattn::ptx::BF16>) {
    const __nv_bfloat16_raw r = __float2bfloat16(x);
    return r.x;
  } else {
    const __half_raw r = __float2half(x);
    return r.x;
  }
}
template <class Tag>
inline float from_bits(uint16_t b) {
  if constexpr (std::is_same_v<Tag, flashattn::ptx::BF16>) {
    __nv_bfloat16_raw r;
    r.x = b;
    return __bfloat162float(__nv_bfloat16(r));
  } else {
    __half_raw r;
    r.x = b;
    return __half2float(__half(r));
  }
}
// Rounds x to the tag's precision.
template <class Tag>
inline float round_to(float x) {
  return from_bits<Tag>(to_bits<Tag>(x));
}

// Random values already representable in the 16-bit type, as bits and as floats.
template <class Tag>
inline void random_matrix(std::mt19937& rng, std::size_t n, std::vector<uint16_t>* bits, std::vector<float>* vals,
                          float scale = 1.f) {
  std::normal_distribution<float> dist(0.f, scale);
  bits->resize(n);
  vals->resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    (*bits)[i] = to_bits<Tag>(dist(rng));
    (*vals)[i] = from_bits<Tag>((*bits)[i]);
  }
}

}  // namespace fa_test
