// Built when CUDA is not: every CUDA entry point says so instead of failing to link.
#include "cuda/cuda_backend.hpp"

namespace flashattn::cuda {
namespace {
Status no_cuda() { return Status::unsupported("device: cuda tensors given, but flashattn was built without CUDA"); }
}  // namespace

bool device_available() { return false; }
Status sm80_forward_check(const FwdParams&) { return no_cuda(); }
Status sm80_forward(const FwdParams&) { return no_cuda(); }
Status sm80_backward_check(const BwdParams&) { return no_cuda(); }
std::size_t sm80_backward_workspace(const BwdParams&) { return 0; }
Status sm80_backward(const BwdParams&) { return no_cuda(); }

}  // namespace flashattn::cuda
