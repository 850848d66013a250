#include "api/select.hpp"

#include "cpu/cpu_backend.hpp"
#include "cuda/cuda_backend.hpp"

namespace flashattn {

ForwardPlan select(const FwdParams& p) {
  ForwardPlan plan;
  if (p.device == Device::cpu) {
    plan.path = "cpu";
    plan.run = cpu::forward;
    return plan;
  }
  plan.status = cuda::sm80_forward_check(p);
  if (plan.status.ok()) {
    plan.path = "sm80";
    plan.run = cuda::sm80_forward;
  }
  return plan;
}

BackwardPlan select(const BwdParams& p) {
  BackwardPlan plan;
  if (p.device == Device::cpu) {
    plan.path = "cpu";
    plan.run = cpu::backward;
    return plan;
  }
  plan.status = cuda::sm80_backward_check(p);
  if (plan.status.ok()) {
    plan.path = "sm80";
    plan.run = cuda::sm80_backward;
    plan.workspace_bytes = cuda::sm80_backward_workspace(p);
  }
  return plan;
}

}  // namespace flashattn
