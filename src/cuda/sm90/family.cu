// The sm90 family (Hopper, sm_90a: TMA, mbarrier, wgmma): its instance registries and the plans and
// runs of the forward and the backward (the backward's at the end of this file).
//
// The forward plan accepts f16/bf16 on a compute capability 9.0 GPU with padded or varlen
// batches (varlen: packed tensors of fewer than 2^31 rows) whose Q, K, V views TMA can tile (16-byte aligned, strides multiples of 8 elements) and
// whose head dims fit a compiled instance (64, 128, 192, 256; others round up). Causal, sliding
// windows, soft cap and GQA/MQA run on it, and paged K/V (paged prefill) whose pages make up whole
// key blocks (check_paged). Everything else is not_supported with the reason.
#include <algorithm>
#include <climits>
#include <string>

#include "backend/status_try.hpp"
#include "cuda/common/device_info.hpp"
#include "cuda/common/host_runtime.hpp"
#include "cuda/common/instances.hpp"
#include "cuda/common/mask.cuh"
#include "cuda/cuda_backend.hpp"
#include "cuda/ptx/mma.cuh"
#include "cuda/sm80/bwd_launch.hpp"
#include "cuda/sm80/bwd_split.hpp"
#include "cuda/sm80/bwd_workspace.hpp"
#include "cuda/sm90/bwd_launch.hpp"
#include "cuda/sm90/bwd_maps.hpp"
#include "cuda/sm90/fwd_launch.hpp"
#include "cuda/sm90/fwd_maps.hpp"
#include "sm90/instances.h"

namespace flashattn::cuda {
namespace sm90 {
namespace {

constexpr const char* kWho = "cuda sm90 forward";

Status refuse(const char* who, const std::string& why) { return Status::unsupported(std::string(who) + ": " + why); }

// What both directions' plans require first: the tensor cores' dtypes, a compute capability 9.0 GPU
// (sm_90a code runs only there; its info for the plan), and varlen tensors TMA can address.
Status check_dtype(const char* who, DType dtype) {
  if (dtype == DType::f16 || dtype == DType::bf16) return Status::success();
  return refuse(who, std::string("dtype ") + to_string(dtype) + " is not supported: the tensor-core kernels take f16 or bf16");
}

Status check_hopper(const char* who, DeviceInfo* dev) {
  FLASHATTN_TRY(device_info(dev));
  if (dev->cc_major == 9 && dev->cc_minor == 0) return Status::success();
  return refuse(who, "needs compute capability 9.0 (sm_90a), the current device has " + std::to_string(dev->cc_major) +
                         "." + std::to_string(dev->cc_minor));
}

// Varlen: the kernels' TMA row coordinate is 32-bit (keys_mapped: false where K and V are paged).
Status check_packed_rows(const char* who, const FwdParams& p, bool keys_mapped) {
  if (!p.is_varlen() || (p.total_q <= kMaxPackedRows && (!keys_mapped || p.total_k <= kMaxPackedRows))) {
    return Status::success();
  }
  return refuse(who, "varlen tensors of " + std::to_string(p.total_q) + " query and " + std::to_string(p.total_k) +
                         " key rows: TMA's row coordinate is 32-bit (at most " + std::to_string(kMaxPackedRows) +
                         " packed rows)");
}

using FwdRunFn = Status (*)(const FwdParams& params);
using FwdCheckFn = Status (*)(const FwdParams& params);

struct Instance {
  int head_dim;
  FwdRunFn fwd_run[2];  // [dtype]: f16, bf16
  FwdCheckFn fwd_check[2];
};

#define FLASHATTN_SM90_INSTANCE(D)                                                                            \
  Instance{D, {&fwd_run<ptx::F16, D>, &fwd_run<ptx::BF16, D>}, {&fwd_device_check<ptx::F16, D>, &fwd_device_check<ptx::BF16, D>}},
constexpr Instance kNoInstance{0, {nullptr, nullptr}, {nullptr, nullptr}};
// kNoInstance first keeps the array non-empty in a build without 90a; head_dim 0 never matches.
const Instance kInstances[] = {kNoInstance, FLASHATTN_SM90_HEADDIMS(FLASHATTN_SM90_INSTANCE)};
#undef FLASHATTN_SM90_INSTANCE

const Instance* find_instance(int64_t head_dim) { return smallest_instance_holding(kInstances, head_dim); }

struct FwdPlanDetail {
  FwdRunFn run;
};

Status check_sizes(const FwdParams& p, int head_dim) {
  if (p.seqlen_q > kMaxSeqlen || p.seqlen_k > kMaxSeqlen) {
    return Status::unsupported(std::string(kWho) + ": sequences longer than " + std::to_string(kMaxSeqlen) +
                               " are not supported");
  }
  const int64_t block_m = fwd_shape_of(p, head_dim).block_m();
  const int64_t m_blocks = (p.seqlen_q + block_m - 1) / block_m;
  FLASHATTN_TRY(check_packed_rows(kWho, p, !p.is_paged()));
  // The kernel's scheduler counts tiles in 32-bit ints: the next tile is the current one (or the
  // counter) plus the grid size, which stays far below 2^31. (2^30 tiles hold over 8·10^12 query
  // elements.)
  constexpr int64_t kMaxTiles = int64_t{1} << 30;
  if (p.heads_q > INT_MAX || p.batch > INT_MAX || m_blocks * p.heads_q * p.batch > kMaxTiles) {
    return Status::unsupported(std::string(kWho) + ": batch = " + std::to_string(p.batch) + ", heads_q = " +
                               std::to_string(p.heads_q) + ", seqlen_q = " + std::to_string(p.seqlen_q) +
                               " make more than " + std::to_string(kMaxTiles) + " tiles");
  }
  return Status::success();
}

// Paged K/V: pages that make up whole boxes of the instance's key blocks (fwd_paged_fits), and a
// pool whose page indices are 32-bit.
Status check_paged(const FwdParams& p, int head_dim) {
  if (!p.is_paged()) return Status::success();
  if (!has_paged_fwd(head_dim)) {
    return Status::unsupported(std::string(kWho) + ": block_table: head dim " + std::to_string(head_dim) +
                               " has no paged kernel in this family; the sm80 family reads its pages");
  }
  const FwdShape shape = fwd_shape_of(p, head_dim);
  if (!fwd_paged_fits(p.page_size, shape)) {
    return Status::unsupported(std::string(kWho) + ": block_table: page_size = " + std::to_string(p.page_size) +
                               " does not make whole " + std::to_string(shape.block_n) + "-key blocks (head dim " +
                               std::to_string(head_dim) + "): this family takes page sizes that are multiples of 16 "
                               "dividing the block, or multiples of it; the sm80 family takes any");
  }
  if (p.num_pages > INT_MAX) {
    return Status::unsupported(std::string(kWho) + ": block_table: num_pages = " + std::to_string(p.num_pages) +
                               " is above 2^31 - 1, the most the paged forward addresses");
  }
  return Status::success();
}

// The views as TMA sees them (check_tile_map), and out for the epilogue's 4-byte stores.
Status check_layout(const FwdParams& p, int head_dim) {
  const FwdMapSpecs specs = fwd_map_specs(p, fwd_shape_of(p, head_dim));
  const int64_t rows_q = fwd_map_rows_q(p);
  if (rows_q == 0) return Status::success();  // nothing is loaded or written
  FLASHATTN_TRY(check_tile_map(p.dtype, specs.q, "cuda sm90 forward: q"));
  if (fwd_has_keys(p)) {
    FLASHATTN_TRY(check_tile_map(p.dtype, specs.k, "cuda sm90 forward: k"));
    FLASHATTN_TRY(check_tile_map(p.dtype, specs.v, "cuda sm90 forward: v"));
  }
  return check_16byte_layout(kWho, "out", p.out, {{"batch", fwd_map_batch(p), p.o_batch_stride},
                                                  {"row", rows_q, p.o_row_stride},
                                                  {"head", p.heads_q, p.o_head_stride}});
}

Status plan_forward(const FwdParams& p, Plan* plan) {
  FLASHATTN_TRY(check_dtype(kWho, p.dtype));
  const int64_t need = p.hdim_qk > p.hdim_v ? p.hdim_qk : p.hdim_v;
  const Instance* inst = find_instance(need);
  if (inst == nullptr) {
    return Status::unsupported(std::string(kWho) + ": head dim " + std::to_string(need) +
                               " (max of hdim_qk, hdim_v) has no compiled sm90 instance: this build has \"" +
                               FLASHATTN_SM90_HEADDIMS_STRING +
                               "\" (FLASHATTN_HEADDIMS among 64, 128, 192, 256, with 90a in FLASHATTN_CUDA_ARCHS)");
  }
  DeviceInfo dev;
  FLASHATTN_TRY(check_hopper(kWho, &dev));
  FLASHATTN_TRY(check_sizes(p, inst->head_dim));
  FLASHATTN_TRY(check_paged(p, inst->head_dim));
  FLASHATTN_TRY(check_layout(p, inst->head_dim));
  const int i = dtype_index(p.dtype);
  FLASHATTN_TRY(inst->fwd_check[i](p));
  plan->workspace_bytes = fwd_workspace_bytes(p);  // the dynamic tile scheduler's counter
  plan->workspace_optional = true;                  // without it: one CTA per tile (fwd_launch.cuh)
  plan->workspace_alignment = alignof(int);         // the counter takes atomics
  plan->set(FwdPlanDetail{inst->fwd_run[i]});
  return Status::success();
}

Status run_forward(const Plan& plan, const FwdParams& p) { return plan.get<FwdPlanDetail>().run(p); }

// ---- the backward ---------------------------------------------------------------------------------
// The main kernel (bwd_kernel.cuh) between the sm80 family's preprocess (D, LSE·log2e, the zeroed dQ
// accumulator) and postprocess (dQ scaled and converted), over their workspace layout planned with
// this kernel's blocks. It takes padded and varlen batches of f16/bf16 with hdim_qk = hdim_v = 64,
// 128 or 256, any mask, soft cap, GQA/MQA, deterministic or not; everything else (and long chains on
// few key blocks, below) is not_supported with the reason, and "auto" runs the sm80 backward.
using BwdRunFn = Status (*)(const BwdParams&, const sm80::BwdKernelParams&);
using BwdCheckFn = Status (*)();

struct BwdInstance {
  int head_dim;
  BwdRunFn run[2];  // [dtype]: f16, bf16
  BwdCheckFn check[2];
};

#define FLASHATTN_SM90_BWD_INSTANCE(D)                                                                             \
  BwdInstance{D,                                                                                                   \
              {&bwd_run<ptx::F16, D>, &bwd_run<ptx::BF16, D>},                                                     \
              {&bwd_device_check<ptx::F16, D>, &bwd_device_check<ptx::BF16, D>}},
constexpr BwdInstance kNoBwdInstance{0, {nullptr, nullptr}, {nullptr, nullptr}};
const BwdInstance kBwdInstances[] = {kNoBwdInstance, FLASHATTN_SM90_BWD_HEADDIMS(FLASHATTN_SM90_BWD_INSTANCE)};
#undef FLASHATTN_SM90_BWD_INSTANCE

const BwdInstance* find_bwd_instance(int64_t hdim_qk, int64_t hdim_v) {
  if (hdim_qk != hdim_v) return nullptr;
  for (const BwdInstance& inst : kBwdInstances) {
    if (inst.head_dim != 0 && inst.head_dim == hdim_qk) return &inst;
  }
  return nullptr;
}

Status check_bwd_grid(const BwdParams& p, int head_dim, const DeviceInfo& dev, BwdChains* chains) {
  const BwdChains c = bwd_chains(p, head_dim, dev.num_sms, dev.memory_bandwidth);
  *chains = c;
  if (c.ctas > INT_MAX) return refuse(kBwdWho, "the problem needs more than 2^31 - 1 thread blocks");
  if (c.chain_bound) {
    return refuse(kBwdWho, "the longest key block (or part of one) walks " + std::to_string(c.longest) + " of " +
                           std::to_string(c.steps) + " steps, well over one of the " + std::to_string(dev.num_sms) +
                           " SMs' share; the sm80 backward splits such blocks further");
  }
  return Status::success();
}

Status check_bwd_layout(const BwdParams& p, int head_dim) {
  const BwdMapSpecs specs = bwd_map_specs(p, bwd_block_m(head_dim), bwd_block_n(head_dim));
  if (bwd_loads_queries(p)) {  // the maps the launch encodes (bwd_maps.hpp)
    FLASHATTN_TRY(check_tile_map(p.dtype, specs.q, "cuda sm90 backward: q"));
    FLASHATTN_TRY(check_tile_map(p.dtype, specs.dout, "cuda sm90 backward: dout"));
  }
  if (bwd_loads_keys(p)) {
    FLASHATTN_TRY(check_tile_map(p.dtype, specs.k, "cuda sm90 backward: k"));
    FLASHATTN_TRY(check_tile_map(p.dtype, specs.v, "cuda sm90 backward: v"));
  }
  // The pre/postprocess's and the epilogue's vector accesses (sm80's rule: they are its kernels).
  return sm80::check_all_aligned(p, kBwdWho);
}

struct BwdPlanDetail {
  BwdRunFn run;
  int head_dim;
  int order_pairs;
  sm80::WorkspaceLayout workspace;
};

Status plan_backward(const BwdParams& p, Plan* plan) {
  FLASHATTN_TRY(check_dtype(kBwdWho, p.dtype));
  const BwdInstance* inst = find_bwd_instance(p.hdim_qk, p.hdim_v);
  if (inst == nullptr) {
    return refuse(kBwdWho, "head dims (hdim_qk = " + std::to_string(p.hdim_qk) + ", hdim_v = " +
                           std::to_string(p.hdim_v) + ") have no compiled sm90 backward: it takes hdim_qk = hdim_v " +
                           "among this build's \"" + FLASHATTN_SM90_BWD_HEADDIMS_STRING +
                           "\" (FLASHATTN_HEADDIMS, with 90a in FLASHATTN_CUDA_ARCHS)");
  }
  FLASHATTN_TRY(check_packed_rows(kBwdWho, p, true));
  if (p.seqlen_q > kMaxSeqlen || p.seqlen_k > kMaxSeqlen || p.batch > INT_MAX || p.heads_q > INT_MAX) {
    return refuse(kBwdWho, "sequences longer than " + std::to_string(kMaxSeqlen) +
                           ", or batch or heads_q above 2^31 - 1, are not supported");
  }
  DeviceInfo dev;
  FLASHATTN_TRY(check_hopper(kBwdWho, &dev));
  BwdChains chains;
  FLASHATTN_TRY(check_bwd_grid(p, inst->head_dim, dev, &chains));
  FLASHATTN_TRY(check_bwd_layout(p, inst->head_dim));
  const int i = dtype_index(p.dtype);
  FLASHATTN_TRY(inst->check[i]());
  // The grid's order and "auto" read the call per CTA: a part's query heads (the parts are blockIdx.y:
  // part-major).
  const BackwardCall per_cta{inst->head_dim, p.seqlen_k, chains.heads_per_cta(p.group_size()),
                             mask_of(p.options).has_mask(), p.deterministic, dev.memory_bandwidth};
  const int pairs = static_cast<int>(std::max<int64_t>(1, p.heads_kv * p.batch));  // check_bwd_grid: under 2^31
  // Split cells: the parts' fp32 dK/dV sums and counters, zeroed by the preprocess (sm80's split
  // tail's buffers, every cell a tail block).
  const sm80::BwdSplit split = chains.parts > 1 ? sm80::BwdSplit{0, static_cast<int>(chains.parts),
                                                                 static_cast<int>(chains.cells)}
                                                : sm80::BwdSplit::whole(chains.cells);
  const BwdPlanDetail d{inst->run[i], inst->head_dim, bwd_order_pairs(per_cta, pairs, dev.num_sms),
                        sm80::workspace_layout(p, inst->head_dim, bwd_block_m(inst->head_dim),
                                               bwd_block_n(inst->head_dim), split)};
  plan->workspace_bytes = d.workspace.bytes;
  plan->workspace_alignment = 16;  // the pre/postprocess's vector accesses of the fp32 sums
  plan->in_auto = backward_in_auto(per_cta);
  plan->set(d);
  return Status::success();
}

Status run_backward(const Plan& plan, const BwdParams& p) {
  const BwdPlanDetail d = plan.get<BwdPlanDetail>();
  sm80::BwdKernelParams k =
      sm80::kernel_params(p, d.head_dim, bwd_block_m(d.head_dim), bwd_block_n(d.head_dim), d.workspace);
  k.dq_row_major = true;
  k.key_blocks_outer = mask_of(p.options).has_mask() && !p.deterministic;  // bwd_tile.cuh's grid order
  k.order_pairs = d.order_pairs;
  k.part_heads = k.group / k.split_parts;  // bwd_tile.cuh's bwd_key_block: the parts' query heads
  k.part_heads_extra = k.group % k.split_parts;
  cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  FLASHATTN_TRY(sm80::launch_bwd_preprocess(k, p.dtype, stream));
  FLASHATTN_TRY(sm80::gradients_into(p, &k));
  FLASHATTN_TRY(d.run(p, k));
  return sm80::launch_bwd_postprocess(k, p.dtype, stream);
}

}  // namespace

BwdChains bwd_chains(const BwdParams& p, int head_dim, int num_sms, double memory_bandwidth) {
  BwdChains c;
  const int block_n = bwd_block_n(head_dim);
  c.cells = (p.seqlen_k + block_n - 1) / block_n * p.heads_kv * p.batch;
  const sm80::BwdChainSteps counted = sm80::chain_steps(p, block_n, bwd_block_m(head_dim));
  c.steps = counted.steps;
  const int64_t longest = c.cells == 0 || c.steps == 0 ? 0 : counted.longest;  // nothing walks (an empty batch; no keys)
  c.parts = bwd_parts(head_dim, p.deterministic, memory_bandwidth < kFastMemory, p.group_size(), longest, c.steps,
                      num_sms);
  c.ctas = c.cells * c.parts;
  c.longest = longest / p.group_size() * c.heads_per_cta(p.group_size());  // a part's whole heads
  c.chain_bound = c.longest > kBwdShortChain &&
                  static_cast<double>(c.longest) * num_sms > kBwdChainMargin * static_cast<double>(c.steps);
  return c;
}

}  // namespace sm90


const Family& sm90_family() {
  static const Family kSm90{"sm90", Device::cuda, {sm90::plan_forward, sm90::run_forward},
                            {sm90::plan_backward, sm90::run_backward, !sm90::kBackwardAuto.empty()}, {}};
  return kSm90;
}

}  // namespace flashattn::cuda
