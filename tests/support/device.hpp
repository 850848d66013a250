// The backends a test case runs on. Every case is written once against host tensors; on CUDA its
// tensors are mirrored to device memory (the whole storage: gaps, guards and NaN poison included),
// the library runs there, and the storages are copied back for checking on the host.
#pragma once

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "support/host_tensor.hpp"

namespace fa_test {

// A kernel family of this build (the call's `path`) and the device whose tensors it runs. Cases
// run on every family, so a family that a faster one would shadow under "auto" is tested too.
struct Backend {
  std::string family;  // "cpu", "sm80", ...; "auto": whichever family the library picks
  flashattn::Device device = flashattn::Device::cpu;
  bool has_forward = true;  // false: a family with only the KV-cache entry (decode)

  static Backend host() { return {"cpu", flashattn::Device::cpu}; }
  static Backend any(flashattn::Device device) { return {"auto", device}; }
  bool on_host() const { return device == flashattn::Device::cpu; }
};
inline const char* to_string(const Backend& b) { return b.family.c_str(); }
inline std::ostream& operator<<(std::ostream& os, const Backend& b) { return os << b.family; }
// Every kernel family of this build, in the library's order.
std::vector<Backend> all_backends();

// Why `backend` cannot run in this process ("" when it can).
std::string unavailable_reason(const Backend& backend);

// Device copies of host tensors for one call. On the CPU, views are the host views themselves.
class DeviceMirror {
 public:
  explicit DeviceMirror(Backend backend) : backend_(backend) {}
  ~DeviceMirror();
  DeviceMirror(const DeviceMirror&) = delete;
  DeviceMirror& operator=(const DeviceMirror&) = delete;

  // The view of `t` on the backend: uploads its whole storage the first time.
  TensorView view(const HostTensor& t);
  // Copies the device storage of `t` back into it (nothing to do on the CPU).
  void download(HostTensor& t);
  // Scratch memory of `bytes` on the backend (a workspace), freed with the mirror.
  void* scratch(std::size_t bytes);
  // Waits for the device and reports an asynchronous CUDA error ("" when none).
  std::string synchronize();

 private:
  Backend backend_;
  std::map<const HostTensor*, void*> device_storage_;
  std::vector<void*> scratch_;
  std::vector<std::vector<unsigned char>> host_scratch_;
};

}  // namespace fa_test

// In a test body: skip (with the reason) when the backend cannot run here.
#define FA_REQUIRE_BACKEND(backend)                                            \
  do {                                                                         \
    const std::string fa_reason_ = ::fa_test::unavailable_reason(backend);     \
    if (!fa_reason_.empty()) GTEST_SKIP() << fa_reason_;                       \
  } while (0)
