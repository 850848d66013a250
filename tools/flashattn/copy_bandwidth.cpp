#include "copy_bandwidth.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "buffer.hpp"
#include "gpu.hpp"
#include "host_memory.hpp"

namespace fa_cli {
namespace {

constexpr std::size_t kLargestOnGpu = std::size_t{1} << 30;
constexpr std::size_t kLargestOnCpu = std::size_t{256} << 20;
constexpr std::size_t kSmallest = std::size_t{64} << 20;
constexpr int kCopies = 5;  // timed, after one warm-up copy

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One contiguous share of the bytes per thread, as a multi-threaded decode call reads its cache.
void parallel_memcpy(void* dst, const void* src, std::size_t bytes) {
#pragma omp parallel
  {
    const std::size_t threads = static_cast<std::size_t>(omp_get_num_threads());
    const std::size_t share = (bytes + threads - 1) / threads;
    const std::size_t begin = std::min(bytes, share * static_cast<std::size_t>(omp_get_thread_num()));
    const std::size_t end = std::min(bytes, begin + share);
    std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin, end - begin);
  }
}

// Source and destination of the largest size that can be had, the source non-zero (never time on
// zeros) and both touched once (the first touch of host pages is not what is measured).
std::string allocate_pair(flashattn::Device device, Buffer* src, Buffer* dst, void* stream) {
  std::string error;
  const std::size_t largest = device == flashattn::Device::cuda ? kLargestOnGpu : kLargestOnCpu;
  for (std::size_t bytes = largest; bytes >= kSmallest; bytes /= 2) {
    if (device == flashattn::Device::cpu && !fits_in_host_memory(2 * bytes, &error)) continue;
    error = src->allocate(device, bytes);
    if (error.empty()) error = dst->allocate(device, bytes);
    if (!error.empty()) {
      gpu::clear_last_error();
      continue;
    }
    if (device == flashattn::Device::cuda) {
      error = gpu::memset_async(src->data(), 0x3c, bytes, stream);
      if (error.empty()) error = gpu::memset_async(dst->data(), 0, bytes, stream);
      return error;
    }
    std::memset(src->data(), 0x3c, bytes);
    std::memset(dst->data(), 0, bytes);
    return "";
  }
  return "no memory for a copy of " + std::to_string(kSmallest >> 20) + " MiB: " + error;
}

}  // namespace

CopyBandwidth measure_copy_bandwidth(flashattn::Device device, void* stream) {
  CopyBandwidth r;
  Buffer src, dst;
  if (r.error = allocate_pair(device, &src, &dst, stream); !r.error.empty()) return r;
  r.bytes = src.bytes();
  std::vector<double> ms;
  if (device == flashattn::Device::cuda) {
    gpu::EventTimer events;
    for (int n = 0; n <= kCopies && r.error.empty(); ++n) {
      double t = 0;
      r.error = events.start(stream);
      if (r.error.empty()) r.error = gpu::copy_on_device_async(dst.data(), src.data(), r.bytes, stream);
      if (r.error.empty()) r.error = events.stop_ms(stream, &t);
      if (n > 0) ms.push_back(t);
    }
    if (!r.error.empty()) return r;
  } else {
    for (int n = 0; n <= kCopies; ++n) {
      const auto t0 = std::chrono::steady_clock::now();
      parallel_memcpy(dst.data(), src.data(), r.bytes);
      const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (n > 0) ms.push_back(t);
    }
  }
  r.ms = median(ms);
  return r;
}

}  // namespace fa_cli
