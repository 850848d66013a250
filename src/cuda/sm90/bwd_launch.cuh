// Launch code of the sm90 backward's main kernel: the tensor maps (Q and dO boxes of a step's
// rows, K and V boxes of the CTA's keys; the forward's rank-4 views, fwd_maps.hpp), the grid (one
// CTA per key block, kv head and sequence) and shared memory from its traits. Included only by the
// per-instance translation units.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "backend/status_try.hpp"
#include "cuda/common/host_runtime.hpp"
#include "cuda/sm90/bwd_kernel.cuh"
#include "cuda/sm90/bwd_kernel_wide.cuh"
#include "cuda/sm90/bwd_launch.hpp"
#include "cuda/sm90/bwd_maps.hpp"

namespace flashattn::cuda::sm90 {

// The kernel of head dim D: the key side split by keys (bwd_kernel.cuh) up to D = 128, by columns
// above (bwd_kernel_wide.cuh); kParts: the instance whose key blocks run in parts (p.split_parts > 1).
template <class Tag, int kHeadDim>
struct BwdKernelOf {
  static constexpr bool kWide = kHeadDim > 128;
  using Traits = std::conditional_t<kWide, BwdWideTraits<Tag, kHeadDim>, BwdTraits<Tag, kHeadDim>>;
  template <bool kParts>
  static constexpr auto kernel() {
    static_assert(!kParts || bwd_has_parts(kHeadDim));
    if constexpr (kWide) {
      return &bwd_kernel_wide<Traits, kParts>;
    } else {
      return &bwd_kernel<Traits, kParts>;
    }
  }
  static_assert(Traits::kBlockN == bwd_block_n(kHeadDim) && Traits::kBlockM == bwd_block_m(kHeadDim));
};

template <class Tag, int kHeadDim>
Status bwd_run(const BwdParams& p, const sm80::BwdKernelParams& k) {
  using Of = BwdKernelOf<Tag, kHeadDim>;
  using Traits = typename Of::Traits;
  const int64_t ctas = int64_t{k.num_n_blocks} * k.heads_kv * k.batch;  // key blocks; in parts: blockIdx.y
  if (ctas == 0) return Status::success();
  const BwdMapSpecs specs = bwd_map_specs(p, Traits::kBlockM, Traits::kBlockN);
  CUtensorMap tm_q{}, tm_k{}, tm_v{}, tm_do{};
  if (bwd_loads_queries(p)) {
    FLASHATTN_TRY(make_tile_map(&tm_q, p.dtype, specs.q, kBwdWho));
    FLASHATTN_TRY(make_tile_map(&tm_do, p.dtype, specs.dout, kBwdWho));
  }
  if (bwd_loads_keys(p)) {
    FLASHATTN_TRY(make_tile_map(&tm_k, p.dtype, specs.k, kBwdWho));
    FLASHATTN_TRY(make_tile_map(&tm_v, p.dtype, specs.v, kBwdWho));
  }
  const bool parts = k.split_parts > 1;
  if (parts && !bwd_has_parts(kHeadDim)) {
    return Status{StatusCode::internal, std::string(kBwdWho) + ": key blocks in parts planned for a kernel without them"};
  }
  auto* kernel = Of::template kernel<false>();
  if constexpr (bwd_has_parts(kHeadDim)) {
    if (parts) kernel = Of::template kernel<true>();
  }
  static DeviceFlags opted_in[2];
  FLASHATTN_TRY(opt_in_dynamic_smem(kBwdWho, kernel, Traits::kSmemBytes, opted_in[parts]));
  kernel<<<dim3(static_cast<unsigned>(ctas), static_cast<unsigned>(k.split_parts)), dim3(Traits::kThreads), Traits::kSmemBytes,
           static_cast<cudaStream_t>(p.stream)>>>(tm_q, tm_k, tm_v, tm_do, k);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return cuda_status(kBwdWho, e, "kernel launch");
  return Status::success();
}

template <class Tag, int kHeadDim>
Status bwd_device_check() {
  using Of = BwdKernelOf<Tag, kHeadDim>;
  static DeviceFlags checked[2];
  FLASHATTN_TRY(check_kernel_fits(kBwdWho, Of::template kernel<false>(), Of::Traits::kSmemBytes, kHeadDim, checked[0]));
  if constexpr (bwd_has_parts(kHeadDim)) {
    return check_kernel_fits(kBwdWho, Of::template kernel<true>(), Of::Traits::kSmemBytes, kHeadDim, checked[1]);
  }
  return Status::success();
}

}  // namespace flashattn::cuda::sm90

// One instance: bwd_run and bwd_device_check of (Tag, D). Used by the generated sm90_bwd_*_hdim*.cu.
#define FLASHATTN_SM90_BWD_INSTANCE(Tag, D)                                                        \
  template flashattn::Status flashattn::cuda::sm90::bwd_run<Tag, D>(const flashattn::BwdParams&,  \
                                                                    const flashattn::cuda::sm80::BwdKernelParams&); \
  template flashattn::Status flashattn::cuda::sm90::bwd_device_check<Tag, D>();
