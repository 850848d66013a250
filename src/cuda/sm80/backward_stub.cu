// Placeholder until the sm80 backward kernels land.
#include "cuda/cuda_backend.hpp"

namespace flashattn::cuda {
Status sm80_backward_check(const BwdParams&) { return Status::unsupported("cuda: the sm80 backward is not built yet"); }
std::size_t sm80_backward_workspace(const BwdParams&) { return 0; }
Status sm80_backward(const BwdParams& p) { return sm80_backward_check(p); }
}  // namespace flashattn::cuda
