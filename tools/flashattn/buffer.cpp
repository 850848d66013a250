#include "buffer.hpp"

#include <cstdlib>
#include <utility>

#include "gpu.hpp"

namespace fa_cli {

using flashattn::Device;

Buffer::~Buffer() { release(); }

void Buffer::release() {
  if (device_ == Device::cuda) gpu::free_bytes(data_);
  else std::free(data_);
  data_ = nullptr;
  bytes_ = 0;
}

Buffer::Buffer(Buffer&& o) noexcept { *this = std::move(o); }

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    device_ = o.device_;
  }
  return *this;
}

std::string Buffer::allocate(Device device, std::size_t bytes) {
  release();
  device_ = device;
  if (bytes == 0) return "";
  if (device == Device::cuda) {
    std::string e = gpu::malloc_bytes(&data_, bytes);
    if (!e.empty()) return e + " of " + std::to_string(bytes) + " bytes";
  } else {
    data_ = std::malloc(bytes);
    if (data_ == nullptr) return "out of host memory allocating " + std::to_string(bytes) + " bytes";
  }
  bytes_ = bytes;
  return "";
}

std::string copy_buffer(const Buffer& from, Buffer* to) {
  if (from.bytes() != to->bytes()) return "internal: buffer sizes differ";
  return to->device() == Device::cuda ? gpu::copy_to_device(to->data(), from.data(), from.bytes())
                                      : gpu::copy_to_host(to->data(), from.data(), from.bytes());
}

}  // namespace fa_cli
