#include "support/device.hpp"

#include <cstring>
#include <stdexcept>

#include "api/select.hpp"

#ifdef FLASHATTN_TESTS_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace fa_test {

std::vector<Backend> all_backends() {
  std::vector<Backend> all;
  for (const flashattn::Family* f : flashattn::family_table()) all.push_back({f->name, f->device, f->forward.plan != nullptr});
  return all;
}

std::string unavailable_reason(const Backend& b) {
  if (!b.on_host() && !flashattn::cuda_available()) return "no CUDA device: GPU test skipped";
  return "";
}

#ifdef FLASHATTN_TESTS_WITH_CUDA

namespace {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
}  // namespace

DeviceMirror::~DeviceMirror() {
  for (auto& kv : device_storage_) cudaFree(kv.second);
  for (void* p : scratch_) cudaFree(p);
}

// Poisoned (every byte 0xFF: NaN floats, −1 integers), so that a kernel reading workspace it did not
// write first fails its test instead of passing on fresh, zeroed pages.
void* DeviceMirror::scratch(std::size_t bytes) {
  if (backend_.on_host()) {
    host_scratch_.emplace_back(bytes);
    std::memset(host_scratch_.back().data(), 0xFF, bytes);
    return host_scratch_.back().data();
  }
  void* d = nullptr;
  check(cudaMalloc(&d, bytes), "cudaMalloc (workspace)");
  scratch_.push_back(d);
  check(cudaMemset(d, 0xFF, bytes), "cudaMemset (workspace poison)");
  return d;
}

TensorView DeviceMirror::view(const HostTensor& t) {
  if (backend_.on_host()) return t.view();
  auto it = device_storage_.find(&t);
  if (it == device_storage_.end()) {
    void* d = nullptr;
    check(cudaMalloc(&d, t.storage_bytes()), "cudaMalloc");
    check(cudaMemcpy(d, t.storage(), t.storage_bytes(), cudaMemcpyHostToDevice), "cudaMemcpy to device");
    it = device_storage_.emplace(&t, d).first;
  }
  return t.view_at(it->second, flashattn::Device::cuda);
}

void DeviceMirror::download(HostTensor& t) {
  if (backend_.on_host()) return;
  auto it = device_storage_.find(&t);
  if (it == device_storage_.end()) throw std::logic_error("DeviceMirror::download: tensor was never uploaded");
  check(cudaMemcpy(t.storage(), it->second, t.storage_bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy to host");
}

std::string DeviceMirror::synchronize() {
  if (backend_.on_host()) return "";
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = cudaGetLastError();
  return e == cudaSuccess ? "" : std::string("CUDA error after the call: ") + cudaGetErrorString(e);
}

#else  // built without CUDA: a CUDA case never gets here (unavailable_reason skips it)

DeviceMirror::~DeviceMirror() = default;

void* DeviceMirror::scratch(std::size_t bytes) {
  if (!backend_.on_host()) throw std::logic_error("DeviceMirror: the tests were built without CUDA");
  host_scratch_.emplace_back(bytes);
  return host_scratch_.back().data();
}

TensorView DeviceMirror::view(const HostTensor& t) {
  if (backend_.on_host()) return t.view();
  throw std::logic_error("DeviceMirror: the tests were built without CUDA");
}

void DeviceMirror::download(HostTensor&) {
  if (!backend_.on_host()) throw std::logic_error("DeviceMirror: the tests were built without CUDA");
}

std::string DeviceMirror::synchronize() { return ""; }

#endif

}  // namespace fa_test
