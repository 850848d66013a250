#include "progress.hpp"

#include <cstdio>

namespace fa_cli {
namespace {
constexpr double kQuietSeconds = 1.0;
constexpr double kIntervalSeconds = 2.0;
}  // namespace

Progress::Progress(bool enabled, std::string label)
    : enabled_(enabled), label_(std::move(label)), start_(std::chrono::steady_clock::now()), last_(start_) {}

bool Progress::due() {
  if (!enabled_) return false;
  const auto now = std::chrono::steady_clock::now();
  const double since_start = std::chrono::duration<double>(now - start_).count();
  const double since_last = std::chrono::duration<double>(now - last_).count();
  if (since_start < kQuietSeconds || (printed_ && since_last < kIntervalSeconds)) return false;
  last_ = now;
  printed_ = true;
  return true;
}

void Progress::count(int64_t done, int64_t total) {
  if (due()) std::fprintf(stderr, "%s %lld/%lld\n", label_.c_str(), static_cast<long long>(done), static_cast<long long>(total));
}

void Progress::fraction(double f) {
  if (due()) std::fprintf(stderr, "%s: %.0f%%\n", label_.c_str(), 100.0 * f);
}

void Progress::note(const std::string& what) {
  if (!enabled_) return;
  std::fprintf(stderr, "%s: %s\n", label_.c_str(), what.c_str());
  last_ = std::chrono::steady_clock::now();
  printed_ = true;
}

}  // namespace fa_cli
