// Launch code of the sm80 forward kernel: FwdParams → FwdKernelParams, grid and shared memory from
// the kernel's traits, launch on the caller's stream, error check. Included only by the per-instance
// translation units.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>

#include <string>

#include "backend/status_try.hpp"
#include "cuda/common/mask.cuh"
#include "cuda/common/device_info.hpp"
#include "cuda/common/host_runtime.hpp"
#include "cuda/common/scores.cuh"
#include "cuda/sm80/fwd_kernel.cuh"
#include "cuda/sm80/fwd_launch.hpp"
#include "cuda/sm80/fwd_traits.cuh"

namespace flashattn::cuda::sm80 {

// The forward's cuda_error Statuses.
inline Status fwd_cuda_status(cudaError_t e, const char* what) { return cuda_status("cuda sm80 forward", e, what); }

template <class Traits>
FwdKernelParams fwd_kernel_params(const FwdParams& p) {
  FwdKernelParams k{};
  k.q = p.q;
  k.k = p.k;
  k.v = p.v;
  k.out = p.out;
  k.lse = p.lse;
  k.q_batch_stride = p.q_batch_stride;
  k.q_row_stride = p.q_row_stride;
  k.q_head_stride = p.q_head_stride;
  k.k_batch_stride = p.k_batch_stride;
  k.k_row_stride = p.k_row_stride;
  k.k_head_stride = p.k_head_stride;
  k.v_batch_stride = p.v_batch_stride;
  k.v_row_stride = p.v_row_stride;
  k.v_head_stride = p.v_head_stride;
  k.o_batch_stride = p.o_batch_stride;
  k.o_row_stride = p.o_row_stride;
  k.o_head_stride = p.o_head_stride;
  k.lse_batch_stride = p.lse_batch_stride;
  k.lse_head_stride = p.lse_head_stride;
  k.cu_seqlens_q = p.cu_seqlens_q;
  k.cu_seqlens_k = p.cu_seqlens_k;
  if (p.is_paged()) {
    k.block_table = p.block_table;
    k.block_table_batch_stride = p.block_table_batch_stride;
    // Keys are < seqlen_k ≤ kMaxSeqlen (fwd_plan.cu), so a larger page is one page for every key.
    k.page_size = FastDivmod::of(static_cast<int>(std::min<int64_t>(p.page_size, kMaxSeqlen)));
    k.last_page = static_cast<int>(p.num_pages - 1);
  }
  k.batch = static_cast<int>(p.batch);
  k.heads_q = static_cast<int>(p.heads_q);
  k.group_size = static_cast<int>(p.group_size());
  k.seqlen_q = static_cast<int>(p.seqlen_q);
  // Paged: a sequence longer than its table row is cut to it on the device, so that no table read
  // leaves the row whatever cu_seqlens_k holds (host values were checked by validation).
  k.seqlen_k = static_cast<int>(p.is_paged() ? std::min(p.seqlen_k, p.max_pages * p.page_size) : p.seqlen_k);
  k.hdim_qk = static_cast<int>(p.hdim_qk);
  k.hdim_v = static_cast<int>(p.hdim_v);
  k.num_m_blocks = ceil_div(k.seqlen_q, Traits::kBlockM);
  k.window_left = clamp_window(p.options.window_left);
  k.window_right = clamp_window(p.options.window_right);
  k.scores = make_score_transform(p.options);
  return k;
}

template <class Traits>
Status fwd_launch(const FwdParams& p) {
  const FwdKernelParams kp = fwd_kernel_params<Traits>(p);
  const int64_t blocks = int64_t{kp.num_m_blocks} * kp.heads_q * kp.batch;
  if (blocks == 0) return Status::success();  // no query rows: nothing to write
  auto* kernel = &fwd_kernel<Traits>;
  constexpr std::size_t smem = Traits::kSmemBytes;
  static DeviceFlags opted_in;
  FLASHATTN_TRY(opt_in_dynamic_smem("cuda sm80 forward", kernel, smem, opted_in));
  kernel<<<dim3(static_cast<unsigned>(blocks)), dim3(Traits::kThreads), smem, static_cast<cudaStream_t>(p.stream)>>>(kp);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return fwd_cuda_status(e, "kernel launch");
  return Status::success();
}

template <class Traits>
Status fwd_device_check_traits() {
  static DeviceFlags checked;
  return check_kernel_fits("cuda sm80 forward", &fwd_kernel<Traits>, Traits::kSmemBytes, Traits::kHeadDim, checked);
}

// The kernel of (Tag, D, masked) for this GPU: the big_smem shape's when it has one and the GPU
// takes it (fwd_plan.cu decides), else the shape every sm_80+ GPU with 163 KB runs.
template <class Tag, int kHeadDim, bool kMasked>
Status fwd_run_shape(const FwdParams& p, bool big_smem) {
  if constexpr (fwd_has_big_smem_shape(kHeadDim, dtype_of<Tag>())) {
    if (big_smem) return fwd_launch<FwdTraits<Tag, kHeadDim, kMasked, true>>(p);
  }
  return fwd_launch<FwdTraits<Tag, kHeadDim, kMasked, false>>(p);
}

template <class Tag, int kHeadDim, bool kMasked>
Status fwd_device_check_shape(bool big_smem) {
  if constexpr (fwd_has_big_smem_shape(kHeadDim, dtype_of<Tag>())) {
    if (big_smem) return fwd_device_check_traits<FwdTraits<Tag, kHeadDim, kMasked, true>>();
  }
  return fwd_device_check_traits<FwdTraits<Tag, kHeadDim, kMasked, false>>();
}

// Paged K/V (paged prefill) runs one kernel per (Tag, D): the masked one (it also runs unmasked
// calls), at the shape every sm_80+ GPU takes, with every score transform's code; so do the other
// calls whose transform's slope varies (the soft cap), on one like it (fwd_traits.cuh).
template <class Tag, int kHeadDim>
using FwdPagedTraits = FwdTraits<Tag, kHeadDim, true, false, true, true>;
template <class Tag, int kHeadDim>
using FwdVaryingSlopeTraits = FwdTraits<Tag, kHeadDim, true, false, false, true>;

template <class Tag, int kHeadDim>
Status fwd_run(const FwdParams& p, bool big_smem) {
  if (p.is_paged()) return fwd_launch<FwdPagedTraits<Tag, kHeadDim>>(p);
  if (score_slope_varies(p.options)) return fwd_launch<FwdVaryingSlopeTraits<Tag, kHeadDim>>(p);
  if (mask_of(p.options).has_mask()) return fwd_run_shape<Tag, kHeadDim, true>(p, big_smem);
  return fwd_run_shape<Tag, kHeadDim, false>(p, big_smem);
}

template <class Tag, int kHeadDim>
Status fwd_device_check(const FwdParams& p, bool big_smem) {
  if (p.is_paged()) return fwd_device_check_traits<FwdPagedTraits<Tag, kHeadDim>>();
  if (score_slope_varies(p.options)) return fwd_device_check_traits<FwdVaryingSlopeTraits<Tag, kHeadDim>>();
  if (mask_of(p.options).has_mask()) return fwd_device_check_shape<Tag, kHeadDim, true>(big_smem);
  return fwd_device_check_shape<Tag, kHeadDim, false>(big_smem);
}

}  // namespace flashattn::cuda::sm80

// One instance: fwd_run and fwd_device_check of (Tag, D). Used by the generated fwd_*_hdim*.cu.
#define FLASHATTN_SM80_FWD_INSTANCE(Tag, D)                                                           \
  template flashattn::Status flashattn::cuda::sm80::fwd_run<Tag, D>(const flashattn::FwdParams&, bool); \
  template flashattn::Status flashattn::cuda::sm80::fwd_device_check<Tag, D>(const flashattn::FwdParams&, bool);
