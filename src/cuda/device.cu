// Whether a CUDA device is visible to this process.
#include <cuda_runtime.h>

#include "cuda/cuda_backend.hpp"

namespace flashattn::cuda {

bool device_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

}  // namespace flashattn::cuda
