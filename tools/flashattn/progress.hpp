// Progress lines on stderr for long phases ("run 3/10", "reference: 37%"): silent for the first
// second, then at most one line every two seconds, so short runs print nothing.
#pragma once

#include <chrono>
#include <string>

namespace fa_cli {

class Progress {
 public:
  Progress(bool enabled, std::string label);
  void count(int64_t done, int64_t total);  // "label 3/10"
  void fraction(double f);                  // "label: 37%"
  void note(const std::string& what);       // "label: what", now (when enabled)

 private:
  bool due();
  bool enabled_;
  std::string label_;
  std::chrono::steady_clock::time_point start_, last_;
  bool printed_ = false;
};

}  // namespace fa_cli
