// Placeholder until the sm80 kernels land.
#include "cuda/cuda_backend.hpp"

namespace flashattn::cuda {
namespace {
Status todo() { return Status::unsupported("cuda: the sm80 kernels are not built yet"); }
}  // namespace
Status sm80_forward_check(const FwdParams&) { return todo(); }
Status sm80_forward(const FwdParams&) { return todo(); }
Status sm80_backward_check(const BwdParams&) { return todo(); }
std::size_t sm80_backward_workspace(const BwdParams&) { return 0; }
Status sm80_backward(const BwdParams&) { return todo(); }
}  // namespace flashattn::cuda
