// Placeholder until the sm80 forward kernels land.
#include "cuda/cuda_backend.hpp"

namespace flashattn::cuda {
Status sm80_forward_check(const FwdParams&) { return Status::unsupported("cuda: the sm80 forward is not built yet"); }
Status sm80_forward(const FwdParams& p) { return sm80_forward_check(p); }
}  // namespace flashattn::cuda
