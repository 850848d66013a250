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

Status poison_outputs(Tensors* t, bool backward, void* stream) {
  std::vector<Buffer*> outs = backward ? std::vector<Buffer*>{&t->dq, &t->dk, &t->dv}
                                       : std::vector<Buffer*>{&t->out, &t->lse};
  for (Buffer* b : outs) {
    if (b->data() == nullptr) continue;
    if (t->device == flashattn::Device::cuda) {
      Status s = cuda_status(gpu::memset_async(b->data(), 0xff, b->bytes(), stream));
      if (!s.ok()) return s;
    } else {
      std::memset(b->data(), 0xff, b->bytes());
    }
  }
  return Status::success();
}

Status time_calls(const RunConfig& c, Tensors* t, bool backward, void* stream, const std::function<Status()>& call,
                  Timings* timings, const std::function<Status()>& after_call) {
  const bool on_gpu = t->device == flashattn::Device::cuda;
  const int64_t calls = c.warmup + c.repeats;
  Progress progress(!c.quiet, "run");
  gpu::EventTimer* events = nullptr;
  std::unique_ptr<gpu::EventTimer> owned;
  if (on_gpu) {
    owned = std::make_unique<gpu::EventTimer>();
    events = owned.get();
  }
  timings->ms.clear();
  for (int64_t n = 0; n < calls; ++n) {
    Status s = poison_outputs(t, backward, stream);
    if (!s.ok()) return s;
    double ms = 0;
    if (on_gpu) {
      if (s = cuda_status(events->start(stream)); !s.ok()) return s;
      if (s = call(); !s.ok()) return s;
      if (s = cuda_status(events->stop_ms(stream, &ms)); !s.ok()) return s;
    } else {
      const auto t0 = std::chrono::steady_clock::now();
      if (s = call(); !s.ok()) return s;
      ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
    if (n >= c.warmup) timings->ms.push_back(ms);
    if (after_call) {
      if (s = after_call(); !s.ok()) return s;
    }
    progress.count(n + 1, calls);
  }
  return Status::success();
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
