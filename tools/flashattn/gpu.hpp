// The tool's few uses of the CUDA runtime: device memory, copies, a stream, event timing, memory
// info. gpu_cuda.cpp implements them when the library has CUDA; gpu_none.cpp otherwise, where
// every call fails with a message (the tool never reaches them: resolve() refuses --backend cuda).
// Each returns "" on success, else the error text.
#pragma once

#include <cstddef>
#include <string>

namespace fa_cli::gpu {

std::string device_name();
std::string malloc_bytes(void** ptr, std::size_t bytes);
void free_bytes(void* ptr);
std::string copy_to_device(void* dst, const void* src, std::size_t bytes);
std::string copy_to_host(void* dst, const void* src, std::size_t bytes);
std::string memset_async(void* ptr, int byte, std::size_t bytes, void* stream);
std::string copy_on_device_async(void* dst, const void* src, std::size_t bytes, void* stream);
std::string stream_create(void** stream);
void stream_destroy(void* stream);
std::string synchronize(void* stream);
std::string mem_info(std::size_t* free_bytes, std::size_t* total_bytes);
// Forgets the error of a failed call that was handled (an allocation retried smaller), so a later
// synchronize() does not report it.
void clear_last_error();

// A stream the tool owns, destroyed with it; null until create() (the CPU backend's calls take none).
class Stream {
 public:
  Stream() = default;
  ~Stream() { stream_destroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  std::string create() { return stream_create(&stream_); }
  void* get() const { return stream_; }

 private:
  void* stream_ = nullptr;
};

// Times work enqueued on `stream` between start() and stop_ms() with a pair of CUDA events;
// stop_ms() waits for the stop event.
class EventTimer {
 public:
  EventTimer();
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  std::string start(void* stream);
  std::string stop_ms(void* stream, double* ms);

 private:
  void* start_ = nullptr;
  void* stop_ = nullptr;
};

}  // namespace fa_cli::gpu
