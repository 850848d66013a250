// The sm80 forward's plan and run: which compiled instance runs a call and with which of its tile
// shapes, or why none can. select() plans once per call; the run launches what the plan chose.
#include <climits>
#include <cstdint>
#include <string>

#include "backend/status_try.hpp"
#include "cuda/common/device_info.hpp"
#include "cuda/common/host_runtime.hpp"
#include "cuda/common/mask.cuh"
#include "cuda/common/scores.cuh"
#include "cuda/sm80/fwd_traits.cuh"
#include "cuda/sm80/instances.hpp"

namespace flashattn::cuda::sm80 {
namespace {

constexpr const char* kWho = "cuda sm80 forward";

struct FwdPlanDetail {
  FwdRunFn run;
  bool big_smem;  // the instance's big-shared-memory shape (fwd_traits.cuh)
};

Status check_layout(const FwdParams& p) {
  const int64_t rows_q = p.is_varlen() ? p.total_q : p.seqlen_q;
  const int64_t rows_k = p.is_varlen() ? p.total_k : p.seqlen_k;
  const int64_t batch = p.is_varlen() ? 1 : p.batch;  // varlen has no batch dimension
  FLASHATTN_TRY(check_16byte_layout(kWho, "q", p.q, {{"batch", batch, p.q_batch_stride}, {"row", rows_q, p.q_row_stride},
                                              {"head", p.heads_q, p.q_head_stride}}));
  if (p.is_paged()) {  // page pools [num_pages, page_size, heads_kv, d]
    FLASHATTN_TRY(check_16byte_layout(kWho, "k", p.k, {{"page", p.num_pages, p.k_batch_stride},
                                                {"row", p.page_size, p.k_row_stride}, {"head", p.heads_kv, p.k_head_stride}}));
    FLASHATTN_TRY(check_16byte_layout(kWho, "v", p.v, {{"page", p.num_pages, p.v_batch_stride},
                                                {"row", p.page_size, p.v_row_stride}, {"head", p.heads_kv, p.v_head_stride}}));
  } else {
    FLASHATTN_TRY(check_16byte_layout(kWho, "k", p.k, {{"batch", batch, p.k_batch_stride}, {"row", rows_k, p.k_row_stride},
                                                {"head", p.heads_kv, p.k_head_stride}}));
    FLASHATTN_TRY(check_16byte_layout(kWho, "v", p.v, {{"batch", batch, p.v_batch_stride}, {"row", rows_k, p.v_row_stride},
                                                {"head", p.heads_kv, p.v_head_stride}}));
  }
  FLASHATTN_TRY(check_16byte_layout(kWho, "out", p.out, {{"batch", batch, p.o_batch_stride}, {"row", rows_q, p.o_row_stride},
                                                  {"head", p.heads_q, p.o_head_stride}}));
  return Status::success();
}

Status check_sizes(const FwdParams& p, int head_dim, bool big_smem) {
  if (p.seqlen_q > kMaxSeqlen || p.seqlen_k > kMaxSeqlen) {
    return Status::unsupported(std::string(kWho) + ": seqlen_q = " + std::to_string(p.seqlen_q) + ", seqlen_k = " +
                               std::to_string(p.seqlen_k) + ": sequences longer than " + std::to_string(kMaxSeqlen) +
                               " are not supported");
  }
  if (p.is_paged() && p.num_pages > INT_MAX) {
    return Status::unsupported(std::string(kWho) + ": num_pages = " + std::to_string(p.num_pages) +
                               " is above 2^31 - 1, the most the paged forward addresses");
  }
  const FwdTileShape shape = fwd_tile_shape(head_dim, p.dtype, big_smem);
  const int64_t blocks = (p.seqlen_q + shape.block_m - 1) / shape.block_m * p.heads_q * p.batch;
  if (p.heads_q > INT_MAX || p.batch > INT_MAX || blocks > INT_MAX) {
    return Status::unsupported(std::string(kWho) + ": batch = " + std::to_string(p.batch) + ", heads_q = " +
                               std::to_string(p.heads_q) + ", seqlen_q = " + std::to_string(p.seqlen_q) +
                               " need more than 2^31 - 1 thread blocks");
  }
  return Status::success();
}

}  // namespace

Status plan_forward(const FwdParams& p, Plan* plan) {
  if (p.dtype != DType::f16 && p.dtype != DType::bf16) {
    return Status::unsupported(std::string(kWho) + ": dtype " + to_string(p.dtype) +
                               " is not supported: the tensor-core kernels take f16 or bf16 (f32 runs on the CPU "
                               "backend)");
  }
  const int64_t need = p.hdim_qk > p.hdim_v ? p.hdim_qk : p.hdim_v;
  const Instance* inst = find_instance(need);
  if (inst == nullptr) {
    return Status::unsupported(std::string(kWho) + ": head dim " + std::to_string(need) +
                               " (max of hdim_qk, hdim_v) has no compiled instance: this build has "
                               "FLASHATTN_HEADDIMS = \"" + compiled_head_dims() +
                               "\"; reconfigure with -DFLASHATTN_HEADDIMS including a head dim >= " +
                               std::to_string(need));
  }
  DeviceInfo dev;
  FLASHATTN_TRY(device_info(&dev));
  if (dev.cc_major < 8) {
    return Status::unsupported(std::string(kWho) + ": needs compute capability >= 8.0, the current device has " +
                               std::to_string(dev.cc_major) + "." + std::to_string(dev.cc_minor));
  }
  // Paged calls and those whose score transform's slope varies run a kernel of the common shape only.
  const bool big_smem = !p.is_paged() && !score_slope_varies(p.options) &&
                        fwd_has_big_smem_shape(inst->head_dim, p.dtype) &&
                        static_cast<std::size_t>(dev.smem_optin) >= kFwdBigSmemBytes;
  FLASHATTN_TRY(check_sizes(p, inst->head_dim, big_smem));
  FLASHATTN_TRY(check_layout(p));
  const int i = dtype_index(p.dtype);
  FLASHATTN_TRY(inst->fwd_check[i](p, big_smem));
  plan->workspace_bytes = 0;
  plan->set(FwdPlanDetail{inst->fwd_run[i], big_smem});
  return Status::success();
}

Status run_forward(const Plan& plan, const FwdParams& p) {
  const FwdPlanDetail d = plan.get<FwdPlanDetail>();
  return d.run(p, d.big_smem);
}

}  // namespace flashattn::cuda::sm80
