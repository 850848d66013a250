// The bandwidth a plain copy reaches on the device a decode call runs on: the yardstick of its
// TB/s (a decode call streams K and V once, so a copy's read + write rate is what it can hope for).
// Measured once per run: CUDA, cudaMemcpyAsync device to device timed with events on the stream;
// CPU, memcpy split over the OpenMP threads, wall clock. Median of a few copies after a warm-up one.
#pragma once

#include <cstddef>
#include <string>

#include "flashattn/flashattn.hpp"

namespace fa_cli {

struct CopyBandwidth {
  std::size_t bytes = 0;  // copied per copy (read once and written once)
  double ms = 0;          // median time of one copy
  std::string error;      // why it was not measured ("" when it was)

  double tbps() const { return ms > 0 ? 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e12 : 0.0; }
};

// Copies 1 GiB on cuda and 256 MiB on the cpu (source and destination together twice the largest
// CPU L3s), less when the memory for them is not there, down to 64 MiB.
CopyBandwidth measure_copy_bandwidth(flashattn::Device device, void* stream);

}  // namespace fa_cli
