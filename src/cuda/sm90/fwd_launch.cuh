// Launch code of the sm90 forward kernel: the tensor maps of Q, K, V (fwd_maps.hpp), the kernel's
// params, grid and shared memory from its traits, the launch. Included only by the per-instance
// translation units.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "backend/status_try.hpp"
#include "cuda/common/device_info.hpp"
#include "cuda/common/host_runtime.hpp"
#include "cuda/common/mask.cuh"
#include "cuda/sm90/fwd_kernel.cuh"
#include "cuda/sm90/fwd_launch.hpp"
#include "cuda/sm90/fwd_maps.hpp"

namespace flashattn::cuda::sm90 {

inline constexpr const char* kFwdWho = "cuda sm90 forward";

// (batch, head) pairs per section of the tile order (fwd_tile.cuh): as many as
// keep the K and V they read within a third of a 50 MB L2 (H100's; H200's is larger), at least one.
inline int section_heads(const FwdParams& p) {
  constexpr int64_t kBudget = int64_t{16} << 20;
  const int64_t kv_bytes = p.seqlen_k * (p.hdim_qk + p.hdim_v) * 2 / p.group_size();  // per query head
  const int64_t pairs = p.batch * p.heads_q;
  int64_t n = kv_bytes > 0 ? kBudget / kv_bytes : pairs;
  n = std::max<int64_t>(std::min(n, pairs), 1);  // 1 also for a call with no pairs: it divides by it
  return static_cast<int>(n);
}

template <class Traits>
FwdKernelParams fwd_kernel_params(const FwdParams& p) {
  FwdKernelParams k{};
  k.cu_seqlens_q = p.cu_seqlens_q;
  k.cu_seqlens_k = p.cu_seqlens_k;
  k.out = p.out;
  k.lse = p.lse;
  k.o_batch_stride = p.o_batch_stride;
  k.o_row_stride = p.o_row_stride;
  k.o_head_stride = p.o_head_stride;
  k.lse_batch_stride = p.lse_batch_stride;
  k.lse_head_stride = p.lse_head_stride;
  k.batch = static_cast<int>(p.batch);
  // The divisors are ≥ 1 even for a call with no tiles (batch, heads or seqlen_q 0), which launches
  // nothing: FastDivmod::of divides by them.
  const auto divisor = [](int64_t d) { return FastDivmod::of(static_cast<int>(std::max<int64_t>(d, 1))); };
  k.heads_q = divisor(p.heads_q);
  k.group_size = divisor(p.group_size());
  k.seqlen_q = static_cast<int>(p.seqlen_q);
  // No K rows: no key is ever loaded. Paged: no key past the table row's capacity, as on sm80 (so
  // a key below seqlen_k always has a table entry).
  k.seqlen_k = !fwd_has_keys(p)  ? 0
               : p.is_paged() ? static_cast<int>(std::min(p.seqlen_k, p.max_pages * p.page_size))
                              : static_cast<int>(p.seqlen_k);
  k.hdim_v = static_cast<int>(p.hdim_v);
  k.num_m_blocks = ceil_div(k.seqlen_q, Traits::kBlockM);
  k.num_tiles = k.num_m_blocks * static_cast<int>(p.heads_q) * k.batch;  // ≤ 2^30: the plan checks
  const int pairs = static_cast<int>(p.heads_q) * k.batch, per_section = section_heads(p);
  k.section_heads = divisor(per_section);
  k.last_section_heads = divisor(pairs - (pairs - 1) / per_section * per_section);
  k.section_tiles = divisor(int64_t{k.num_m_blocks} * per_section);
  k.tile_counter = fwd_dynamic_schedule(p) ? static_cast<int*>(p.workspace) : nullptr;  // may be null
  k.window_left = clamp_window(p.options.window_left);
  k.window_right = clamp_window(p.options.window_right);
  k.scores = make_score_transform(p.options);
  if (p.is_paged()) {  // the plan bounds these by INT_MAX
    k.block_table = p.block_table;
    k.block_table_batch_stride = p.block_table_batch_stride;
    k.page_size = FastDivmod::of(static_cast<int>(p.page_size));
    k.last_page = static_cast<int>(p.num_pages - 1);
  }
  return k;
}

template <class Traits>
Status fwd_launch(const FwdParams& p) {
  const FwdKernelParams kp = fwd_kernel_params<Traits>(p);
  if (kp.num_tiles == 0 || fwd_map_rows_q(p) == 0) return Status::success();  // no query rows: nothing to write
  DeviceInfo dev;
  FLASHATTN_TRY(device_info(&dev));
  // Persistent; but one CTA per tile where tiles differ and the caller gave no workspace for the
  // counter (the static stride then ends each CTA after its first tile).
  const bool one_per_tile = fwd_dynamic_schedule(p) && kp.tile_counter == nullptr;
  const int ctas = dev.num_sms < kp.num_tiles && !one_per_tile ? dev.num_sms : kp.num_tiles;
  const auto stream = static_cast<cudaStream_t>(p.stream);

  // K and V only when there are keys (make_tile_map reuses a map this thread encoded recently).
  const FwdMapSpecs specs = fwd_map_specs(p, Traits::kShape);
  CUtensorMap tm_q{}, tm_k{}, tm_v{};
  FLASHATTN_TRY(make_tile_map(&tm_q, p.dtype, specs.q, kFwdWho));
  if (fwd_has_keys(p)) {
    FLASHATTN_TRY(make_tile_map(&tm_k, p.dtype, specs.k, kFwdWho));
    FLASHATTN_TRY(make_tile_map(&tm_v, p.dtype, specs.v, kFwdWho));
  }

  auto* kernel = &fwd_kernel<Traits>;
  constexpr std::size_t smem = Traits::kShape.smem_bytes();
  static DeviceFlags opted_in;
  FLASHATTN_TRY(opt_in_dynamic_smem(kFwdWho, kernel, smem, opted_in));
  if (kp.tile_counter != nullptr) {
    const cudaError_t e = cudaMemsetAsync(kp.tile_counter, 0, sizeof(int), stream);
    if (e != cudaSuccess) return cuda_status(kFwdWho, e, "zeroing the tile counter");
  }
  kernel<<<dim3(static_cast<unsigned>(ctas)), dim3(Traits::kThreads), smem, stream>>>(tm_q, tm_k, tm_v, kp);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return cuda_status(kFwdWho, e, "kernel launch");
  return Status::success();
}

template <class Traits>
Status fwd_device_check_traits() {
  static DeviceFlags checked;
  return check_kernel_fits(kFwdWho, &fwd_kernel<Traits>, Traits::kShape.smem_bytes(), Traits::kD, checked);
}

// The traits of the call's tile (fwd_shape_of), handed to f: the tall masked tile is compiled for
// D = 64 only; paged calls have their own kernels of the masked tile (fwd_masked_instance).
template <class Tag, int kHeadDim, class F>
Status with_fwd_traits(const FwdParams& p, F&& f) {
  if constexpr (has_paged_fwd(kHeadDim)) {
    if (p.is_paged()) return f(FwdTraits<Tag, kHeadDim, true, false, true>{});
  }
  if (!fwd_masked_instance(p)) return f(FwdTraits<Tag, kHeadDim, false>{});
  if constexpr (kHeadDim <= 64) {
    if (fwd_tall_tiles(p, kHeadDim)) return f(FwdTraits<Tag, kHeadDim, true, true>{});
  }
  return f(FwdTraits<Tag, kHeadDim, true>{});
}

template <class Tag, int kHeadDim>
Status fwd_run(const FwdParams& p) {
  return with_fwd_traits<Tag, kHeadDim>(p, [&](auto traits) { return fwd_launch<decltype(traits)>(p); });
}

template <class Tag, int kHeadDim>
Status fwd_device_check(const FwdParams& p) {
  return with_fwd_traits<Tag, kHeadDim>(p, [](auto traits) { return fwd_device_check_traits<decltype(traits)>(); });
}

}  // namespace flashattn::cuda::sm90

// One instance: fwd_run and fwd_device_check of (Tag, D). Used by the generated sm90_fwd_*_hdim*.cu.
#define FLASHATTN_SM90_FWD_INSTANCE(Tag, D)                                                       \
  template flashattn::Status flashattn::cuda::sm90::fwd_run<Tag, D>(const flashattn::FwdParams&); \
  template flashattn::Status flashattn::cuda::sm90::fwd_device_check<Tag, D>(const flashattn::FwdParams&);
