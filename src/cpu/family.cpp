// The cpu family: the tiled online-softmax algorithm on host memory. It runs every valid call on
// CPU tensors; only the KV-cache call with rotary needs a workspace (q rotated).
#include "backend/status_try.hpp"
#include "cpu/cpu_backend.hpp"

namespace flashattn::cpu {
namespace {

template <class Params>
Status plan(const Params&, Plan* plan) {
  plan->workspace_bytes = 0;
  return Status::success();
}

Status run_forward(const Plan&, const FwdParams& p) { return forward(p); }
// The gradients first (allocated late when the caller asked: nothing runs before them here).
Status run_backward(const Plan&, const BwdParams& p) {
  BwdParams with = p;
  FLASHATTN_TRY(take_gradients(&with));
  return backward(with);
}

// The KV-cache call's workspace holds q rotated (only with rotary tables).
Status plan_kvcache(const KVCacheParams& p, Plan* plan) {
  plan->workspace_bytes = kvcache_workspace_bytes(p);
  return Status::success();
}
Status run_kvcache(const Plan&, const KVCacheParams& p) { return kvcache(p); }

}  // namespace

const Family& family() {
  static const Family kCpu{"cpu", Device::cpu, {plan<FwdParams>, run_forward}, {plan<BwdParams>, run_backward},
                            {plan_kvcache, run_kvcache}};
  return kCpu;
}

}  // namespace flashattn::cpu
