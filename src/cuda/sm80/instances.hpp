// The one registry of this build's sm80 instances (FLASHATTN_HEADDIMS): per head dim, the forward
// and backward entry points of its f16 and bf16 kernels, which the generated per-instance
// translation units define. The forward and backward plans both pick from it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/family.hpp"
#include "cuda/common/instances.hpp"
#include "cuda/sm80/bwd_params.cuh"

namespace flashattn::cuda::sm80 {

using FwdRunFn = Status (*)(const FwdParams& params, bool big_smem);
using FwdCheckFn = Status (*)(const FwdParams& params, bool big_smem);
using BwdRunFn = Status (*)(const BwdKernelParams& params, cudaStream_t stream, bool big_smem);
using BwdCheckFn = Status (*)(bool big_smem, bool* pair_ptx);

struct Instance {
  int head_dim;
  FwdRunFn fwd_run[2];  // [dtype_index]: f16, bf16
  FwdCheckFn fwd_check[2];
  BwdRunFn bwd_run[2];
  BwdCheckFn bwd_check[2];
};

using cuda::dtype_index;  // cuda/common/instances.hpp

// The smallest compiled instance whose head dim holds `head_dim`, or null.
const Instance* find_instance(int64_t head_dim);
// The compiled head dims, for messages: "64;96;128;192;256".
const char* compiled_head_dims();

// The family's four entry points (fwd_plan.cu, bwd_plan.cu).
Status plan_forward(const FwdParams& params, Plan* plan);
Status run_forward(const Plan& plan, const FwdParams& params);
Status plan_backward(const BwdParams& params, Plan* plan);
Status run_backward(const Plan& plan, const BwdParams& params);

}  // namespace flashattn::cuda::sm80
