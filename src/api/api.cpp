// The public entry points: validate → select → run. No exception leaves this file.
#include <cstdint>
#include <exception>
#include <limits>
#include <type_traits>

#include "api/select.hpp"
#include "api/validate.hpp"
#include "backend/status_try.hpp"
#include "cpu/cpu_backend.hpp"
#include "cuda/cuda_backend.hpp"

namespace flashattn {

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
  }
  return "unknown-dtype";
}

const char* to_string(Device device) {
  switch (device) {
    case Device::cpu: return "cpu";
    case Device::cuda: return "cuda";
  }
  return "unknown-device";
}

std::size_t element_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
  }
  return 0;
}

int64_t TensorView::numel() const {
  if (rank <= 0 || rank > kMaxRank) return 0;
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) {
    if (shape[i] <= 0) return 0;
    if (__builtin_mul_overflow(n, shape[i], &n)) return std::numeric_limits<int64_t>::max();
  }
  return n;
}

TensorView TensorView::contiguous(void* data, DType dtype, Device device, std::initializer_list<int64_t> shape) {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.rank = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  int64_t stride = 1;
  for (int j = t.rank - 1; j >= 0; --j) {
    t.stride[j] = stride;
    stride *= t.shape[j];
  }
  return t;
}

bool cuda_available() { return cuda::device_available(); }

std::vector<std::string> families() {
  std::vector<std::string> names;
  for (const Family* f : family_table()) names.emplace_back(f->name);
  return names;
}

std::optional<Device> family_device(const std::string& name) {
  for (const Family* f : family_table()) {
    if (name == f->name) return f->device;
  }
  return std::nullopt;
}

namespace {

// Validation, then the one selection: the Plan every entry point works from.
template <class Args, class Params>
Status plan_for(const Args& args, Params* params, Plan* plan) {
  Status status = to_params(args, params);
  return status.ok() ? select(*params, args.path, plan) : status;
}

// The caller's workspace, or (when it gave none and the plan needs some) the allocator's, sized by
// the plan itself.
template <class Args, class Params>
Status provide_workspace(const Args& args, const Plan& plan, Params* params) {
  if (plan.workspace_bytes == 0 || params->workspace != nullptr || !args.workspace_allocator) return Status::success();
  void* memory = args.workspace_allocator.allocate(plan.workspace_bytes, args.workspace_allocator.context);
  if (memory == nullptr) {
    return {params->device == Device::cuda ? StatusCode::cuda_error : StatusCode::internal,
            "workspace_allocator: returned null for the " + std::to_string(plan.workspace_bytes) +
                " bytes this call needs"};
  }
  params->workspace = memory;
  params->workspace_bytes = plan.workspace_bytes;
  return Status::success();
}

// A packed output's rows as PackedRows (strides in bytes).
PackedRows packed(const FwdParams& p, void* base, int64_t row_stride, int64_t head_stride, int64_t heads,
                  int64_t width, const int32_t* cu_seqlens, int64_t total) {
  const auto bytes = static_cast<int64_t>(element_size(p.dtype));
  return {base, row_stride * bytes, head_stride * bytes, heads, width * bytes, cu_seqlens, p.batch, total};
}

int packed_outputs(const FwdParams& p, PackedRows* rows) {
  rows[0] = packed(p, p.out, p.o_row_stride, p.o_head_stride, p.heads_q, p.hdim_v, p.cu_seqlens_q, p.total_q);
  return 1;
}

int packed_outputs(const BwdParams& p, PackedRows* rows) {
  rows[0] = packed(p, p.dq, p.dq_row_stride, p.dq_head_stride, p.heads_q, p.hdim_qk, p.cu_seqlens_q, p.total_q);
  rows[1] = packed(p, p.dk, p.dk_row_stride, p.dk_head_stride, p.heads_kv, p.hdim_qk, p.cu_seqlens_k, p.total_k);
  rows[2] = packed(p, p.dv, p.dv_row_stride, p.dv_head_stride, p.heads_kv, p.hdim_v, p.cu_seqlens_k, p.total_k);
  return 3;
}

// After the run, on its stream: the rows no sequence covers, when the caller asked for zeros there.
// (Never asked for by a KV-cache call: its params keep the default.)
template <class Params>
Status zero_rows_outside_sequences(const Params& p) {
  if (!p.zero_rows_outside_sequences) return Status::success();
  PackedRows rows[kMaxPackedOutputs];
  const int count = packed_outputs(p, rows);
  return p.device == Device::cuda ? cuda::zero_rows_outside(rows, count, p.stream) : cpu::zero_rows_outside(rows, count);
}

template <class Args, class Params>
Status run(const Args& args) try {
  Params params;
  Plan plan;
  Status status = plan_for(args, &params, &plan);
  if (!status.ok()) return status;
  // A backward whose caller allocates dq, dk, dv late: the family asks for them after its first
  // launch (gradient_pointers); one that launches nothing never asks, so they are asked for after
  // the run and the caller always gets them on success (the rows outside the sequences are zeroed
  // through them).
  LateGradients late;
  if constexpr (std::is_same_v<Args, BackwardArgs>) {
    if (args.gradient_allocator) {
      late.allocator = args.gradient_allocator;
      params.late_gradients = &late;
    }
  }
  status = provide_workspace(args, plan, &params);
  if (!status.ok()) return status;
  const bool served_without = plan.workspace_optional && params.workspace == nullptr && params.workspace_bytes == 0;
  if (!served_without) {
    if (params.workspace_bytes < plan.workspace_bytes) {
      return Status::invalid("workspace_bytes = " + std::to_string(params.workspace_bytes) + " is below the " +
                             std::to_string(plan.workspace_bytes) + " bytes this call needs (see *_workspace_size)");
    }
    if (plan.workspace_bytes > 0 && params.workspace == nullptr) {
      return Status::invalid("workspace: null, but this call needs " + std::to_string(plan.workspace_bytes) + " bytes");
    }
  }
  if (reinterpret_cast<std::uintptr_t>(params.workspace) % plan.workspace_alignment != 0) {
    return Status::invalid("workspace: not " + std::to_string(plan.workspace_alignment) + "-byte aligned, as the " +
                           plan.family->name + " kernels need");
  }
  const Direction<Params>& d = direction_of<Params>(*plan.family);
  FLASHATTN_TRY(d.run(plan, params));
  if constexpr (std::is_same_v<Args, BackwardArgs>) FLASHATTN_TRY(take_gradients(&params));
  return zero_rows_outside_sequences(params);
} catch (const std::exception& e) {
  return {StatusCode::internal, std::string("internal error: ") + e.what()};
} catch (...) {
  return {StatusCode::internal, "internal error: unknown exception"};
}

template <class Args, class Params>
Status workspace_size(const Args& args, std::size_t* bytes) try {
  if (bytes == nullptr) return Status::invalid("bytes: null output pointer");
  Params params;
  Plan plan;
  Status status = plan_for(args, &params, &plan);
  *bytes = status.ok() ? plan.workspace_bytes : 0;
  return status;
} catch (...) {
  return {StatusCode::internal, "internal error in workspace query"};
}

template <class Args, class Params>
std::string path_of(const Args& args) try {
  Params params;
  Plan plan;
  return plan_for(args, &params, &plan).ok() ? plan.family->name : "";
} catch (...) {
  return "";
}

}  // namespace

Status gradient_pointers(const BwdParams& p, GradientPointers* g) {
  LateGradients* late = p.late_gradients;
  if (late == nullptr) {
    *g = {p.dq, p.dk, p.dv};
    return Status::success();
  }
  if (!late->given) {
    const StatusCode failed = p.device == Device::cuda ? StatusCode::cuda_error : StatusCode::internal;
    if (!late->allocator.allocate(late->allocator.context, &late->dq, &late->dk, &late->dv)) {
      return {failed, "gradient_allocator: could not allocate dq, dk and dv"};
    }
    const struct {
      const char* name;
      const void* data;
      int64_t elements;
    } given[] = {{"dq", late->dq, p.total_q * p.heads_q * p.hdim_qk},
                 {"dk", late->dk, p.total_k * p.heads_kv * p.hdim_qk},
                 {"dv", late->dv, p.total_k * p.heads_kv * p.hdim_v}};
    for (const auto& t : given) {
      if (t.data == nullptr && t.elements > 0) {
        return {failed, std::string("gradient_allocator: gave a null ") + t.name};
      }
      if (reinterpret_cast<std::uintptr_t>(t.data) % 16 != 0) {
        return Status::invalid(std::string("gradient_allocator: ") + t.name + " is not 16-byte aligned");
      }
    }
    late->given = true;
  }
  *g = {late->dq, late->dk, late->dv};
  return Status::success();
}

Status take_gradients(BwdParams* p) {
  GradientPointers g;
  FLASHATTN_TRY(gradient_pointers(*p, &g));
  p->dq = g.dq;
  p->dk = g.dk;
  p->dv = g.dv;
  return Status::success();
}

Status supports(const ForwardArgs& args) {
  std::size_t b;
  return workspace_size<ForwardArgs, FwdParams>(args, &b);
}
Status supports(const BackwardArgs& args) {
  std::size_t b;
  return workspace_size<BackwardArgs, BwdParams>(args, &b);
}
Status forward_workspace_size(const ForwardArgs& args, std::size_t* bytes) {
  return workspace_size<ForwardArgs, FwdParams>(args, bytes);
}
Status backward_workspace_size(const BackwardArgs& args, std::size_t* bytes) {
  return workspace_size<BackwardArgs, BwdParams>(args, bytes);
}
std::string forward_path(const ForwardArgs& args) { return path_of<ForwardArgs, FwdParams>(args); }
std::string backward_path(const BackwardArgs& args) { return path_of<BackwardArgs, BwdParams>(args); }
Status forward(const ForwardArgs& args) { return run<ForwardArgs, FwdParams>(args); }
Status kvcache_forward(const KVCacheArgs& args) { return run<KVCacheArgs, KVCacheParams>(args); }
Status supports(const KVCacheArgs& args) {
  std::size_t b;
  return workspace_size<KVCacheArgs, KVCacheParams>(args, &b);
}
Status kvcache_workspace_size(const KVCacheArgs& args, std::size_t* bytes) {
  return workspace_size<KVCacheArgs, KVCacheParams>(args, bytes);
}
std::string kvcache_path(const KVCacheArgs& args) { return path_of<KVCacheArgs, KVCacheParams>(args); }
Status backward(const BackwardArgs& args) { return run<BackwardArgs, BwdParams>(args); }

}  // namespace flashattn
