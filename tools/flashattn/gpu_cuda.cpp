// The tool's CUDA runtime calls (compiled only when the library has CUDA).
#include <cuda_runtime.h>

#include "gpu.hpp"

namespace fa_cli::gpu {
namespace {

std::string err(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return "";
  return std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
}

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

}  // namespace

std::string device_name() {
  int dev = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) return "unknown";
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ")";
}

std::string malloc_bytes(void** ptr, std::size_t bytes) {
  *ptr = nullptr;
  if (bytes == 0) return "";
  return err(cudaMalloc(ptr, bytes), "cudaMalloc");
}

void free_bytes(void* ptr) {
  if (ptr) cudaFree(ptr);
}

std::string copy_to_device(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return "";
  return err(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
}

std::string copy_to_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return "";
  return err(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
}

std::string memset_async(void* ptr, int byte, std::size_t bytes, void* stream) {
  if (bytes == 0) return "";
  return err(cudaMemsetAsync(ptr, byte, bytes, as_stream(stream)), "cudaMemsetAsync");
}

std::string copy_on_device_async(void* dst, const void* src, std::size_t bytes, void* stream) {
  if (bytes == 0) return "";
  return err(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, as_stream(stream)), "cudaMemcpyAsync on device");
}

std::string stream_create(void** stream) {
  cudaStream_t s = nullptr;
  std::string e = err(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  *stream = s;
  return e;
}

void stream_destroy(void* stream) {
  if (stream) cudaStreamDestroy(as_stream(stream));
}

std::string synchronize(void* stream) {
  std::string e = err(cudaStreamSynchronize(as_stream(stream)), "cudaStreamSynchronize");
  if (e.empty()) e = err(cudaGetLastError(), "CUDA error");
  return e;
}

std::string mem_info(std::size_t* free_bytes, std::size_t* total_bytes) {
  return err(cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo");
}

void clear_last_error() { cudaGetLastError(); }

EventTimer::EventTimer() {
  cudaEvent_t a = nullptr, b = nullptr;
  if (cudaEventCreate(&a) == cudaSuccess) start_ = a;
  if (cudaEventCreate(&b) == cudaSuccess) stop_ = b;
}

EventTimer::~EventTimer() {
  if (start_) cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  if (stop_) cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}

std::string EventTimer::start(void* stream) {
  if (!start_ || !stop_) return "cudaEventCreate failed";
  return err(cudaEventRecord(static_cast<cudaEvent_t>(start_), as_stream(stream)), "cudaEventRecord");
}

std::string EventTimer::stop_ms(void* stream, double* ms) {
  auto stop = static_cast<cudaEvent_t>(stop_);
  std::string e = err(cudaEventRecord(stop, as_stream(stream)), "cudaEventRecord");
  if (e.empty()) e = err(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float t = 0.f;
  if (e.empty()) e = err(cudaEventElapsedTime(&t, static_cast<cudaEvent_t>(start_), stop), "cudaEventElapsedTime");
  *ms = t;
  return e;
}

}  // namespace fa_cli::gpu
