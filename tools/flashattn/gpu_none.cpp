// Built when the library has no CUDA: every device call says so.
#include "gpu.hpp"

namespace fa_cli::gpu {
namespace {
const char* kNoCuda = "flashattn was built without CUDA";
}  // namespace

std::string device_name() { return "none"; }
std::string malloc_bytes(void**, std::size_t) { return kNoCuda; }
void free_bytes(void*) {}
std::string copy_to_device(void*, const void*, std::size_t) { return kNoCuda; }
std::string copy_to_host(void*, const void*, std::size_t) { return kNoCuda; }
std::string memset_async(void*, int, std::size_t, void*) { return kNoCuda; }
std::string copy_on_device_async(void*, const void*, std::size_t, void*) { return kNoCuda; }
std::string stream_create(void**) { return kNoCuda; }
void stream_destroy(void*) {}
std::string synchronize(void*) { return kNoCuda; }
std::string mem_info(std::size_t*, std::size_t*) { return kNoCuda; }
void clear_last_error() {}

EventTimer::EventTimer() = default;
EventTimer::~EventTimer() = default;
std::string EventTimer::start(void*) { return kNoCuda; }
std::string EventTimer::stop_ms(void*, double*) { return kNoCuda; }

}  // namespace fa_cli::gpu
