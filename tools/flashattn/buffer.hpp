// Memory on the host or the device, owned: what every tensor of the tool lives in.
#pragma once

#include <cstddef>
#include <string>

#include "flashattn/flashattn.hpp"

namespace fa_cli {

// A buffer on the host or the device, freed with it.
class Buffer {
 public:
  Buffer() = default;
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  // Allocates `bytes` on `device`; "" or the error.
  std::string allocate(flashattn::Device device, std::size_t bytes);
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  flashattn::Device device() const { return device_; }

 private:
  void release();
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  flashattn::Device device_ = flashattn::Device::cpu;
};

// Copies all of `from` into `to`, host to device or device to host (the sizes must match); "" or
// the error.
std::string copy_buffer(const Buffer& from, Buffer* to);

}  // namespace fa_cli
