// sm80_forward_check / sm80_forward: which compiled instance runs a call, or why none can. Both go
// through fwd_plan(), so what the check accepts is exactly what runs.
#include <cuda_runtime.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "api/status_try.hpp"
#include "cuda/common/mask.cuh"
#include "cuda/common/host_runtime.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/ptx/mma.cuh"
#include "cuda/sm80/fwd_launch.hpp"
#include "cuda/sm80/fwd_traits.cuh"
#include "sm80_fwd/fwd_instances.h"

namespace flashattn::cuda {
namespace {

using FwdFn = Status (*)(const FwdParams&, bool big_smem);

struct FwdInstance {
  int head_dim;
  FwdFn run_f16, run_bf16;
  FwdFn device_check_f16, device_check_bf16;
};

#define FLASHATTN_SM80_FWD_ENTRY(D)                                                                   \
  FwdInstance{D, &sm80::fwd_run<ptx::F16, D>, &sm80::fwd_run<ptx::BF16, D>, &sm80::fwd_device_check<ptx::F16, D>, \
              &sm80::fwd_device_check<ptx::BF16, D>},
const FwdInstance kFwdInstances[] = {FLASHATTN_SM80_FWD_HEADDIMS(FLASHATTN_SM80_FWD_ENTRY)};
#undef FLASHATTN_SM80_FWD_ENTRY

// The smallest compiled instance whose head dim covers `need`, or null.
const FwdInstance* find_instance(int64_t need) {
  const FwdInstance* best = nullptr;
  for (const FwdInstance& inst : kFwdInstances) {
    if (inst.head_dim >= need && (best == nullptr || inst.head_dim < best->head_dim)) best = &inst;
  }
  return best;
}

Status check_layout(const FwdParams& p) {
  const int64_t rows_q = p.is_varlen() ? p.total_q : p.seqlen_q;
  const int64_t rows_k = p.is_varlen() ? p.total_k : p.seqlen_k;
  const int64_t batch = p.is_varlen() ? 1 : p.batch;  // varlen has no batch dimension
  constexpr const char* kWho = "cuda sm80 forward";
  FLASHATTN_TRY(check_16byte_layout(kWho, "q", p.q, {{"batch", batch, p.q_batch_stride}, {"row", rows_q, p.q_row_stride},
                                              {"head", p.heads_q, p.q_head_stride}}));
  FLASHATTN_TRY(check_16byte_layout(kWho, "k", p.k, {{"batch", batch, p.k_batch_stride}, {"row", rows_k, p.k_row_stride},
                                              {"head", p.heads_kv, p.k_head_stride}}));
  FLASHATTN_TRY(check_16byte_layout(kWho, "v", p.v, {{"batch", batch, p.v_batch_stride}, {"row", rows_k, p.v_row_stride},
                                              {"head", p.heads_kv, p.v_head_stride}}));
  FLASHATTN_TRY(check_16byte_layout(kWho, "out", p.out, {{"batch", batch, p.o_batch_stride}, {"row", rows_q, p.o_row_stride},
                                                  {"head", p.heads_q, p.o_head_stride}}));
  return Status::success();
}

// Whether the current GPU takes the big_smem shapes (fwd_traits.cuh): a block may opt in to
// kFwdBigSmemBytes of shared memory. Queried once per device, and only for instances that have such
// a shape. A failed query answers no; the instance's device check then reports the device's state.
// Test hook: a set, non-empty FLASHATTN_SM80_FWD_SMALL_TILES forces the shapes every GPU runs, so
// that the A100 path can be checked on a Hopper GPU.
bool device_takes_big_smem() {
  static const bool force_small = [] {
    const char* v = std::getenv("FLASHATTN_SM80_FWD_SMALL_TILES");
    return v != nullptr && v[0] != '\0';
  }();
  if (force_small) return false;
  static std::atomic<int> cached_optin[kMaxCachedDevices] = {};  // 0: not queried yet
  const int dev = current_device();
  const bool cacheable = dev >= 0 && dev < kMaxCachedDevices;
  int optin = cacheable ? cached_optin[dev].load(std::memory_order_acquire) : 0;
  if (optin == 0) {
    if (dev < 0 || cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
      cudaGetLastError();  // an answer, not an error of the caller's stream
      return false;
    }
    if (cacheable) cached_optin[dev].store(optin, std::memory_order_release);
  }
  return static_cast<std::size_t>(optin) >= sm80::kFwdBigSmemBytes;
}

Status check_sizes(const FwdParams& p, int head_dim, bool big_smem) {
  if (p.seqlen_q > kMaxSeqlen || p.seqlen_k > kMaxSeqlen) {
    return Status::unsupported("cuda sm80 forward: seqlen_q = " + std::to_string(p.seqlen_q) + ", seqlen_k = " +
                               std::to_string(p.seqlen_k) + ": sequences longer than " + std::to_string(kMaxSeqlen) +
                               " are not supported");
  }
  const sm80::FwdTileShape shape = sm80::fwd_tile_shape(head_dim, p.dtype, big_smem);
  const int64_t blocks = (p.seqlen_q + shape.block_m - 1) / shape.block_m * p.heads_q * p.batch;
  if (p.heads_q > INT_MAX || p.batch > INT_MAX || blocks > INT_MAX) {
    return Status::unsupported("cuda sm80 forward: batch = " + std::to_string(p.batch) + ", heads_q = " +
                               std::to_string(p.heads_q) + ", seqlen_q = " + std::to_string(p.seqlen_q) +
                               " need more than 2^31 - 1 thread blocks");
  }
  return Status::success();
}

// Everything sm80_forward needs to know before launching; `run` is the instance to launch, with
// `big_smem` (which of its shapes).
Status fwd_plan(const FwdParams& p, FwdFn* run, bool* big_smem) {
  if (p.dtype != DType::f16 && p.dtype != DType::bf16) {
    return Status::unsupported(std::string("cuda sm80 forward: dtype ") + to_string(p.dtype) +
                               " is not supported: the tensor-core kernels take f16 or bf16 (f32 runs on the CPU "
                               "backend)");
  }
  const int64_t need = p.hdim_qk > p.hdim_v ? p.hdim_qk : p.hdim_v;
  const FwdInstance* inst = find_instance(need);
  if (inst == nullptr) {
    return Status::unsupported("cuda sm80 forward: head dim " + std::to_string(need) +
                               " (max of hdim_qk, hdim_v) has no compiled instance: this build has "
                               "FLASHATTN_HEADDIMS = \"" FLASHATTN_SM80_FWD_HEADDIMS_STRING
                               "\"; reconfigure with -DFLASHATTN_HEADDIMS including a head dim >= " +
                               std::to_string(need));
  }
  *big_smem = sm80::fwd_has_big_smem_shape(inst->head_dim, p.dtype) && device_takes_big_smem();
  FLASHATTN_TRY(check_sizes(p, inst->head_dim, *big_smem));
  FLASHATTN_TRY(check_layout(p));
  const bool bf16 = p.dtype == DType::bf16;
  FLASHATTN_TRY((bf16 ? inst->device_check_bf16 : inst->device_check_f16)(p, *big_smem));
  *run = bf16 ? inst->run_bf16 : inst->run_f16;
  return Status::success();
}

}  // namespace

Status sm80_forward_check(const FwdParams& params) {
  FwdFn run = nullptr;
  bool big_smem = false;
  return fwd_plan(params, &run, &big_smem);
}

Status sm80_forward(const FwdParams& params) {
  FwdFn run = nullptr;
  bool big_smem = false;
  FLASHATTN_TRY(fwd_plan(params, &run, &big_smem));
  return run(params, big_smem);
}

}  // namespace flashattn::cuda
