// Definition of launch_bwd_main (declared in bwd_launch.hpp); only the generated per-instance
// translation units include this file, each instantiating it for one (dtype, head dim).
#pragma once

#include "cuda/sm80/bwd_kernel.cuh"
#include "cuda/sm80/bwd_launch.hpp"

namespace flashattn::cuda::sm80 {

template <class Elem, int kHeadDim, bool kBigSmem>
Status launch_bwd_main_tile(const BwdKernelParams& p, cudaStream_t stream) {
  constexpr int kSmem = BwdShape<kHeadDim, kBigSmem>::kSmemBytes;
  const bool softcap = p.scores.mode == ScoreMode::softcap;
  const auto kernel = softcap ? bwd_main_kernel<Elem, kHeadDim, kBigSmem, true>
                              : bwd_main_kernel<Elem, kHeadDim, kBigSmem, false>;
  Status s = cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
                         "raising the main kernel's shared-memory limit");
  if (!s.ok()) return s;
  const int64_t blocks = int64_t{p.num_n_blocks} * p.heads_kv * p.batch;
  if (blocks == 0) return Status::success();
  kernel<<<static_cast<unsigned>(blocks), kBwdThreads, kSmem, stream>>>(p);
  return cuda_status(cudaGetLastError(), "main kernel launch");
}

template <class Elem, int kHeadDim>
Status launch_bwd_main(const BwdKernelParams& p, cudaStream_t stream, bool big_smem) {
  // Only tiles that differ get a second kernel.
  if constexpr (bwd_tile(kHeadDim, true).stages != bwd_tile(kHeadDim, false).stages) {
    if (big_smem) return launch_bwd_main_tile<Elem, kHeadDim, true>(p, stream);
  }
  return launch_bwd_main_tile<Elem, kHeadDim, false>(p, stream);
}

}  // namespace flashattn::cuda::sm80
