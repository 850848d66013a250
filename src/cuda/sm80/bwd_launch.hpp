// The sm80 backward's launch functions, as the host dispatch (bwd_plan.cu) sees them. The main
// kernel's are defined per (dtype, head dim) instance in generated translation units
// (bwd_instance.cu.in, listed by sm80.cmake); the pre/postprocess ones in bwd_prepost.cu.
// Each launches on `stream`, never synchronizes, and returns cuda_error if the launch failed.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "backend/params.hpp"
#include "cuda/common/host_runtime.hpp"
#include "cuda/sm80/bwd_params.cuh"

namespace flashattn::cuda::sm80 {

// Elem: ptx::F16 or ptx::BF16. big_smem: the device fits bwd_tile(kHeadDim, true).
template <class Elem, int kHeadDim>
Status launch_bwd_main(const BwdKernelParams& params, cudaStream_t stream, bool big_smem);
// ok when this build holds machine code (or PTX) of the instance for the current device; else
// not_supported naming FLASHATTN_CUDA_ARCHS. *pair_ptx: whether the tile's paired kernel
// (bwd_pair.cuh) runs here from PTX for sm_90+ (a build for sm_80 alone runs it without clusters).
template <class Elem, int kHeadDim>
Status check_bwd_main_image(bool big_smem, bool* pair_ptx);

// D = rowsum(dO ∘ O) and LSE·log2e into the workspace; zeroes dq_accum and the counters.
Status launch_bwd_preprocess(const BwdKernelParams& params, DType dtype, cudaStream_t stream);
// dq = dq_accum · scale, in the output dtype, strided.
Status launch_bwd_postprocess(const BwdKernelParams& params, DType dtype, cudaStream_t stream);

// The backward's cuda_error Statuses (ok for cudaSuccess).
inline Status bwd_cuda_status(cudaError_t err, const char* what) { return cuda_status("cuda sm80 backward", err, what); }

}  // namespace flashattn::cuda::sm80
