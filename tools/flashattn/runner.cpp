#include "runner.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

#include "gpu.hpp"
#include "progress.hpp"

namespace fa_cli {

using flashattn::Status;
using flashattn::StatusCode;

namespace {

Status cuda_status(const std::string& error) {
  if (error.empty()) return Status::success();
  return {StatusCode::cuda_error, error};
}

}  // namespace

double Timings::median_ms() const {
  if (ms.empty()) return 0;
  std::vector<double> s = ms;
  std::sort(s.begin(), s.end());
  const std::size_t n = s.size();
  return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

double Timings::min_ms() const { return ms.empty() ? 0 : *std::min_element(ms.begin(), ms.end()); }

Status poison(const std::vector<Buffer*>& buffers, flashattn::Device device, void* stream) {
  for (Buffer* b : buffers) {
    if (b->data() == nullptr) continue;
    if (device == flashattn::Device::cuda) {
      Status s = cuda_status(gpu::memset_async(b->data(), 0xff, b->bytes(), stream));
      if (!s.ok()) return s;
    } else {
      std::memset(b->data(), 0xff, b->bytes());
    }
  }
  return Status::success();
}

Status poison_outputs(Tensors* t, bool backward, void* stream) {
  return poison(backward ? std::vector<Buffer*>{&t->dq, &t->dk, &t->dv} : std::vector<Buffer*>{&t->out, &t->lse},
                t->device, stream);
}

Status time_calls(const CallLoop& loop, const std::function<Status()>& before_call, const std::function<Status()>& call,
                  Timings* timings, const std::function<Status()>& after_call) {
  const int64_t calls = loop.warmup + loop.repeats;
  Progress progress(!loop.quiet, loop.label);
  std::unique_ptr<gpu::EventTimer> events;
  if (loop.on_gpu) events = std::make_unique<gpu::EventTimer>();
  timings->ms.clear();
  for (int64_t n = 0; n < calls; ++n) {
    Status s = before_call();
    if (!s.ok()) return s;
    double ms = 0;
    if (loop.on_gpu) {
      if (s = cuda_status(events->start(loop.stream)); !s.ok()) return s;
      if (s = call(); !s.ok()) return s;
      if (s = cuda_status(events->stop_ms(loop.stream, &ms)); !s.ok()) return s;
    } else {
      const auto t0 = std::chrono::steady_clock::now();
      if (s = call(); !s.ok()) return s;
      ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
    if (n >= loop.warmup) timings->ms.push_back(ms);
    if (after_call) {
      if (s = after_call(); !s.ok()) return s;
    }
    progress.count(n + 1, calls);
  }
  return Status::success();
}

Status time_calls(const RunConfig& c, Tensors* t, bool backward, void* stream, const std::function<Status()>& call,
                  Timings* timings, const std::function<Status()>& after_call) {
  const CallLoop loop{c.warmup, c.repeats, t->device == flashattn::Device::cuda, stream, c.quiet, "run"};
  return time_calls(loop, [&] { return poison_outputs(t, backward, stream); }, call, timings, after_call);
}

uint64_t hash_gradients(const Tensors& host) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (const Buffer* b : {&host.dq, &host.dk, &host.dv}) {
    const auto* p = static_cast<const unsigned char*>(b->data());
    for (std::size_t i = 0; i < b->bytes(); ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  }
  return h;
}

}  // namespace fa_cli
