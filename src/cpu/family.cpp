// The cpu family: the tiled online-softmax algorithm on host memory. It runs every valid call on
// CPU tensors, needs no workspace, and has nothing to plan beyond that.
#include "cpu/cpu_backend.hpp"

namespace flashattn::cpu {
namespace {

template <class Params>
Status plan(const Params&, Plan* plan) {
  plan->workspace_bytes = 0;
  return Status::success();
}

Status run_forward(const Plan&, const FwdParams& p) { return forward(p); }
Status run_backward(const Plan&, const BwdParams& p) { return backward(p); }

}  // namespace

const Family& family() {
  static const Family kCpu{"cpu", Device::cpu, {plan<FwdParams>, run_forward}, {plan<BwdParams>, run_backward}, {}};
  return kCpu;
}

}  // namespace flashattn::cpu
