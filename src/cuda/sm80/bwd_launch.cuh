// Definition of launch_bwd_main (declared in bwd_launch.hpp); only the generated per-instance
// translation units include this file, each instantiating it for one (dtype, head dim).
#pragma once

#include "cuda/sm80/bwd_kernel.cuh"
#include "cuda/sm80/bwd_launch.hpp"
#include "cuda/sm80/bwd_split.hpp"

namespace flashattn::cuda::sm80 {

// The split tail's parts (bwd_tail_kernel). dependent_of_main: the main kernel was launched just
// before; then, where this kernel has the griddepcontrol instructions (PTX for sm_90+), it launches
// as the main kernel's programmatic dependent, so that its blocks fill the SMs the main kernel's
// last wave frees. Otherwise in plain stream order (with no main kernel before it, its griddep_wait
// would not order it after the preprocess).
template <class Elem, int kHeadDim, bool kBigSmem>
Status launch_bwd_tail(const BwdKernelParams& p, cudaStream_t stream, bool dependent_of_main) {
  constexpr int kSmem = BwdShape<kHeadDim, kBigSmem>::kSmemBytes;
  const bool ordered = p.deterministic;  // the parts' sums kept apart (bwd_epilogue.cuh)
  const auto kernel = ordered ? bwd_tail_kernel<Elem, kHeadDim, kBigSmem, true>
                              : bwd_tail_kernel<Elem, kHeadDim, kBigSmem, false>;
  static DeviceFlags opted_in[2];  // [ordered]
  static Sm90PtxFlags griddep[2];
  Status s = opt_in_dynamic_smem("cuda sm80 backward", kernel, kSmem, opted_in[ordered]);
  if (!s.ok()) return s;
  // The spans' order is worked out here, after the main kernel's launch: host time the GPU does not
  // wait for.
  TailOrder order{};
  const int blocks = p.split_span > 0 ? tail_order(p, order) : p.split_tail * p.split_parts;
  return launch_dependent("cuda sm80 backward", "split-tail kernel launch", kernel, dim3(static_cast<unsigned>(blocks)),
                          dim3(kBwdThreads), kSmem, stream, dependent_of_main, griddep[ordered], p, order);
}

// The paired main kernel (bwd_pair.cuh) in clusters of two CTAs over the first split_first blocks.
// The plan pairs only where the kernel has its sm_90 PTX (check_bwd_main_image).
template <class Elem, int kHeadDim, bool kBigSmem>
Status launch_bwd_pair(const BwdKernelParams& p, cudaStream_t stream) {
  constexpr int kSmem = BwdShape<kHeadDim, kBigSmem>::kSmemBytes;
  const auto kernel = bwd_main_kernel<Elem, kHeadDim, kBigSmem, false, true>;
  static DeviceFlags opted_in;
  Status s = opt_in_dynamic_smem("cuda sm80 backward", kernel, kSmem, opted_in);
  if (!s.ok()) return s;
  cudaLaunchAttribute attribute[1] = {};
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = 2;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(p.split_first));
  config.blockDim = dim3(kBwdThreads);
  config.dynamicSmemBytes = kSmem;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = 1;
  return bwd_cuda_status(cudaLaunchKernelEx(&config, kernel, p), "paired main kernel launch");
}

template <class Elem, int kHeadDim, bool kBigSmem>
Status launch_bwd_main_tile(const BwdKernelParams& p, cudaStream_t stream) {
  constexpr int kSmem = BwdShape<kHeadDim, kBigSmem>::kSmemBytes;
  const bool slope_varies = score_slope_varies(p.scores);
  const auto kernel = slope_varies ? bwd_main_kernel<Elem, kHeadDim, kBigSmem, true>
                                   : bwd_main_kernel<Elem, kHeadDim, kBigSmem, false>;
  static DeviceFlags opted_in[2];  // [slope_varies]
  bool paired = false;
  if constexpr (bwd_tile(kHeadDim, kBigSmem).pair_dq) {  // the plan pairs only such tiles
    if (p.pair_dq && p.split_first > 0) {
      Status s = launch_bwd_pair<Elem, kHeadDim, kBigSmem>(p, stream);
      if (!s.ok()) return s;
      paired = true;
    }
  }
  if (p.split_first > 0 && !paired) {  // whole blocks (all of them unless split; bwd_params.cuh)
    Status s = opt_in_dynamic_smem("cuda sm80 backward", kernel, kSmem, opted_in[slope_varies]);
    if (!s.ok()) return s;
    kernel<<<static_cast<unsigned>(p.split_first), kBwdThreads, kSmem, stream>>>(p);
    s = bwd_cuda_status(cudaGetLastError(), "main kernel launch");
    if (!s.ok()) return s;
  }
  if constexpr (bwd_tile(kHeadDim, kBigSmem).split_tail) {  // split_for splits nothing else
    if (p.split_tail > 0) return launch_bwd_tail<Elem, kHeadDim, kBigSmem>(p, stream, p.split_first > 0);
  }
  return Status::success();
}

template <class Elem, int kHeadDim, bool kBigSmem>
Status check_bwd_main_image_tile(bool* pair_ptx) {
  static DeviceFlags checked;
  const int dev = current_device();
  if (!checked.test(dev)) {
    cudaFuncAttributes attr{};
    const cudaError_t e = cudaFuncGetAttributes(&attr, bwd_main_kernel<Elem, kHeadDim, kBigSmem, false>);
    if (e != cudaSuccess) {
      cudaGetLastError();  // an answer, not an error of the caller's stream
      return Status::unsupported(std::string("cuda sm80 backward: no kernel image for this GPU (") +
                                 cudaGetErrorName(e) + "); add its architecture to FLASHATTN_CUDA_ARCHS");
    }
    checked.set(dev);
  }
  *pair_ptx = false;
  if constexpr (bwd_tile(kHeadDim, kBigSmem).pair_dq) {
    static Sm90PtxFlags sm90_ptx;
    return has_sm90_ptx("cuda sm80 backward", bwd_main_kernel<Elem, kHeadDim, kBigSmem, false, true>, sm90_ptx,
                        pair_ptx);
  }
  return Status::success();
}

template <class Elem, int kHeadDim>
Status check_bwd_main_image(bool big_smem, bool* pair_ptx) {
  if constexpr (bwd_tile(kHeadDim, true).stages != bwd_tile(kHeadDim, false).stages) {
    if (big_smem) return check_bwd_main_image_tile<Elem, kHeadDim, true>(pair_ptx);
  }
  return check_bwd_main_image_tile<Elem, kHeadDim, false>(pair_ptx);
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
