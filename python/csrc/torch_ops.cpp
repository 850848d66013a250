// The PyTorch operators flashattn::fwd and flashattn::bwd, registered in C++ with a C++ autograd
// kernel (and the inference-only flashattn::kvcache, without one), the way PyTorch's own
// scaled_dot_product_attention is: a call from Python crosses into C++ once, and the backward runs on
// the autograd engine's thread without taking the GIL.
//
// Why C++ and not a Python autograd.Function (docs/python.md, "Host overhead"): the engine hands a
// Python node to its device thread, which must take the GIL and run Python before the backward's
// first launch while the GPU waits; measured on the H200 that cost 0.24-0.48 ms per backward, 2-5 %
// of a 9 ms one. Here the whole call -- checks, allocation through PyTorch's allocator, the current
// stream, the workspace, the launch -- is C++.
//
// Per backend key (CPU, CUDA) one kernel for each operator; the Autograd key gets the autograd
// kernel, which calls the operators below autograd. Fake (meta) implementations for torch.compile
// are in Python (flashattn/_ops.py): they only compute shapes.
#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/Allocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/TensorOptions.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/strides.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <tuple>

#include "flashattn/flashattn.hpp"
#include "torch_ops.hpp"

namespace flashattn::torch_ops {
namespace {

using at::Tensor;
using OptTensor = std::optional<Tensor>;

std::atomic<bool> g_poison_outputs{false};
std::atomic<bool> g_skip_library_calls{false};
std::atomic<bool> g_late_gradients{true};
thread_local int g_last_error_code = 0;

// The library's Status as the exception PyTorch turns into the matching Python one (ValueError,
// NotImplementedError, RuntimeError); the code is kept for flashattn's own exception classes.
[[noreturn]] void raise(StatusCode code, const std::string& message) {
  g_last_error_code = static_cast<int>(code);
  const std::string what = "flashattn: " + message;
  if (code == StatusCode::invalid_argument) throw c10::ValueError({__func__, __FILE__, __LINE__}, what);
  if (code == StatusCode::not_supported) throw c10::NotImplementedError({__func__, __FILE__, __LINE__}, what);
  throw c10::Error({__func__, __FILE__, __LINE__}, what);
}

void check(const Status& s) {
  if (!s.ok()) raise(s.code, s.message);
}

// ---- tensors as the library takes them -----------------------------------------------------------

// The CUDA tensor-core kernels move 16-byte vectors: they take a view only when its data pointer is
// 16-byte aligned and its strides are multiples of 8 elements (the C++ API reports others as
// not_supported). Such views are copied here instead, as are views whose last dimension is strided.
constexpr std::uintptr_t kCudaAlignBytes = 16;
constexpr int64_t kCudaStrideMultiple = 8;

bool aligned_for_cuda(const Tensor& t) {
  if (reinterpret_cast<std::uintptr_t>(t.data_ptr()) % kCudaAlignBytes != 0) return false;
  for (int64_t d = 0; d + 1 < t.dim(); ++d)
    if (t.stride(d) % kCudaStrideMultiple != 0 && t.size(d) > 1) return false;
  return true;
}

// `t` itself when the library takes its layout (any non-negative strides, last dimension contiguous;
// on CUDA also aligned as above), else a contiguous copy.
Tensor usable(const Tensor& t) {
  if (t.dim() == 0) return t;
  const bool last_contiguous = t.size(-1) <= 1 || t.stride(-1) == 1;
  if (last_contiguous && (!t.is_cuda() || t.numel() == 0 || aligned_for_cuda(t))) return t;
  return t.contiguous();
}

// A dtype as Python spells it (torch.float64), for messages.
std::string python_name(at::ScalarType t) {
  switch (t) {
    case at::kDouble: return "torch.float64";
    case at::kLong: return "torch.int64";
    case at::kShort: return "torch.int16";
    case at::kChar: return "torch.int8";
    case at::kByte: return "torch.uint8";
    case at::kBool: return "torch.bool";
    case at::kComplexFloat: return "torch.complex64";
    case at::kComplexDouble: return "torch.complex128";
    default: return std::string("torch.") + c10::toString(t);
  }
}

DType dtype_of(const char* name, const Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return DType::f32;
    case at::kHalf: return DType::f16;
    case at::kBFloat16: return DType::bf16;
    case at::kInt: return DType::i32;
    default:
      raise(StatusCode::invalid_argument,
            std::string(name) + ": dtype " + python_name(t.scalar_type()) +
                " is not supported (float16 or bfloat16 on CUDA; float32, float16 or bfloat16 on the CPU; int32 "
                "for cu_seqlens)");
  }
}

TensorView view_of(const char* name, const Tensor& t) {
  TensorView v;
  v.data = t.data_ptr();
  v.dtype = dtype_of(name, t);
  v.device = t.is_cuda() ? Device::cuda : Device::cpu;
  v.rank = t.dim() <= TensorView::kMaxRank ? static_cast<int>(t.dim()) : -1;  // validation names it
  for (int d = 0; d < v.rank; ++d) {
    v.shape[d] = t.size(d);
    v.stride[d] = t.stride(d);
  }
  return v;
}

TensorView view_of(const char* name, const OptTensor& t) { return t ? view_of(name, *t) : TensorView{}; }

// cu_seqlens are read as plain int32 arrays: contiguous.
OptTensor offsets(const OptTensor& t) { return t ? OptTensor(t->contiguous()) : std::nullopt; }

// ---- what allocation needs before the library's validation runs: ranks, one device ----------------

void refuse_rank(const char* name, const Tensor& t, int64_t rank, bool varlen) {
  std::string shape;
  for (int64_t d = 0; d < t.dim(); ++d) shape += (d ? ", " : "") + std::to_string(t.size(d));
  raise(StatusCode::invalid_argument,
        std::string(name) + ": rank " + std::to_string(t.dim()) + " (shape [" + shape + "]), expected " +
            std::to_string(rank) + ": " +
            (varlen ? "[total, heads, headdim] (varlen)" : "[batch, seqlen, heads, headdim]"));
}

void check_device(const char* name, const Tensor& t, const Tensor& q) {
  if (t.device() != q.device())
    raise(StatusCode::invalid_argument,
          std::string(name) + ": on " + t.device().str() + ", expected " + q.device().str() + " (as q)");
}

// Paged k, v (block_table given) are page pools of rank 4.
void refuse_page_pool_rank(const char* name, const Tensor& t) {
  raise(StatusCode::invalid_argument, std::string(name) + ": rank " + std::to_string(t.dim()) +
                                          ", expected 4: [num_pages, page_size, heads, headdim] (paged, block_table given)");
}

// Returns whether the call is varlen.
bool check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const OptTensor& cu_seqlens_q,
                  const OptTensor& cu_seqlens_k, const OptTensor& block_table = std::nullopt) {
  const bool varlen = cu_seqlens_q.has_value() || cu_seqlens_k.has_value();
  const int64_t rank = varlen ? 3 : 4;
  if (q.dim() != rank) refuse_rank("q", q, rank, varlen);
  if (block_table) {  // the library names a paged call without varlen offsets
    if (k.dim() != 4) refuse_page_pool_rank("k", k);
    if (v.dim() != 4) refuse_page_pool_rank("v", v);
    check_device("block_table", *block_table, q);
  } else {
    if (k.dim() != rank) refuse_rank("k", k, rank, varlen);
    if (v.dim() != rank) refuse_rank("v", v, rank, varlen);
  }
  if (!q.is_cuda() && !q.is_cpu())
    raise(StatusCode::invalid_argument, "q: device " + q.device().str() + " is not supported (cpu or cuda)");
  check_device("k", k, q);
  check_device("v", v, q);
  if (cu_seqlens_q) check_device("cu_seqlens_q", *cu_seqlens_q, q);
  if (cu_seqlens_k) check_device("cu_seqlens_k", *cu_seqlens_k, q);
  return varlen;
}

// ---- outputs --------------------------------------------------------------------------------------

// A tensor from PyTorch's allocator for like's device, made without the dispatcher: at::empty's
// route through it cost ~2.6 µs of host time per CUDA tensor on the H200 host (docs/python.md). The
// same allocator at::empty takes (CUDA: the caching allocator of the current device, made like's by
// the caller's guard, and of the current stream, under graph capture the graph's pool).
Tensor new_tensor(at::IntArrayRef shape, const Tensor& like, at::ScalarType dtype) {
  const c10::DispatchKeySet keys(c10::computeDispatchKey(dtype, at::kStrided, like.device()));
  return at::detail::empty_generic(shape, c10::GetAllocator(like.device().type()), keys, dtype, std::nullopt);
}

Tensor empty(at::IntArrayRef shape, const Tensor& like, at::ScalarType dtype) {
  Tensor t = new_tensor(shape, like, dtype);
  if (g_poison_outputs.load(std::memory_order_relaxed)) t.fill_(at::isFloatingType(dtype) ? NAN : -1);
  return t;
}

// The LSE output when the caller wants it; else an empty tensor in its place, and the kernels write
// none (inference that does not ask for it: no allocation for it before the launch).
Tensor lse_output(bool wanted, at::IntArrayRef shape, const Tensor& like) {
  return wanted ? empty(shape, like, at::kFloat) : new_tensor({0}, like, at::kFloat);
}

std::vector<int64_t> out_shape(const Tensor& q, const Tensor& v) {
  std::vector<int64_t> s(q.sizes().begin(), q.sizes().end());
  s.back() = v.size(-1);
  return s;
}

std::vector<int64_t> lse_shape(const Tensor& q, bool varlen) {
  if (varlen) return {q.size(1), q.size(0)};
  return {q.size(0), q.size(2), q.size(1)};
}

// ---- the call: options, stream, workspace ---------------------------------------------------------

struct Call {
  OptTensor cu_seqlens_q, cu_seqlens_k;  // contiguous copies, alive until the call returns
  int64_t max_seqlen_q, max_seqlen_k;
  AttentionOptions options;
  std::string path;
};

// The views are read in argument order (q, k, v), so the first bad tensor is the one named.
void fill(AttentionArgs* a, const Tensor& q, const Tensor& k, const Tensor& v, const Call& c) {
  a->q = view_of("q", q);
  a->k = view_of("k", k);
  a->v = view_of("v", v);
  a->cu_seqlens_q = view_of("cu_seqlens_q", c.cu_seqlens_q);
  a->cu_seqlens_k = view_of("cu_seqlens_k", c.cu_seqlens_k);
  a->max_seqlen_q = c.max_seqlen_q;
  a->max_seqlen_k = c.max_seqlen_k;
  a->options = c.options;
  a->path = c.path;
  // Varlen outputs (out, dq, dk, dv) are 0 in the packed rows of no sequence, which the kernels do
  // not write: the library zeroes just those rows on the device after its kernels.
  a->zero_rows_outside_sequences = true;
  // CUDA kernels run on the current stream of q's device (made current by the caller's guard).
  if (q.is_cuda()) a->stream = c10::impl::getDeviceGuardImpl(c10::kCUDA)->getStream(q.device()).native_handle();
}

// Runs with PyTorch's allocator as the library's workspace allocator: the library plans the call
// once and asks for exactly what that plan needs (nothing when it needs none). The tensor is freed
// when the call returns; the stream-ordered caching allocator keeps the memory for the enqueued
// kernels, and under CUDA-graph capture it comes from the graph's pool.
struct TorchWorkspace {
  const Tensor& like;
  Tensor memory;

  static void* allocate(std::size_t bytes, void* context) {
    auto* self = static_cast<TorchWorkspace*>(context);
    self->memory = new_tensor({static_cast<int64_t>(bytes)}, self->like, at::kByte);
    return self->memory.data_ptr();
  }
};

template <class Args, class RunFn>
void run(Args& a, const Tensor& like, RunFn run_fn) {
  if (g_skip_library_calls.load(std::memory_order_relaxed)) return;
  TorchWorkspace workspace{like, {}};
  a.workspace_allocator = {&TorchWorkspace::allocate, &workspace};
  check(run_fn(a));
}

Call make_call(const OptTensor& cu_seqlens_q, const OptTensor& cu_seqlens_k, int64_t max_seqlen_q,
               int64_t max_seqlen_k, double softmax_scale, bool causal, int64_t window_left, int64_t window_right,
               double softcap, c10::string_view path) {
  Call c{offsets(cu_seqlens_q), offsets(cu_seqlens_k), max_seqlen_q, max_seqlen_k, {}, std::string(path)};
  c.options.softmax_scale = static_cast<float>(softmax_scale);
  c.options.causal = causal;
  c.options.window_left = window_left;
  c.options.window_right = window_right;
  c.options.softcap = static_cast<float>(softcap);
  return c;
}

std::optional<c10::Device> cuda_device_of(const Tensor& q) {
  return q.is_cuda() ? std::optional<c10::Device>(q.device()) : std::nullopt;
}

// ---- packed q, k, v (flash_attn_qkvpacked_func, flash_attn_kvpacked_func) ------------------------

// With packed_dim >= 0 the operators take packed tensors the way autograd sees them: q, k and v all
// the one qkv tensor (3 along packed_dim), or k and v the one kv tensor (2 along it) beside q; the
// kernels read the packed tensor from k (by its size there) and its members as slices of it. The
// backward then writes its gradients into one tensor shaped like the packed one, as flash-attn's
// does, instead of three that autograd would stack again (one more read and write of every gradient,
// and a second copy of them in memory).
struct Packing {
  int64_t dim = -1;  // packed_dim; -1: none
  int count = 0;     // 3: q, k, v all packed; 2: k, v packed; 0: none
};

Packing packing_of(const Tensor& k, int64_t packed_dim) {
  if (packed_dim < 0) return {};
  const int64_t size = packed_dim < k.dim() ? k.size(packed_dim) : 0;
  if (size != 2 && size != 3)
    raise(StatusCode::invalid_argument,
          "packed_dim " + std::to_string(packed_dim) + ": k (the packed tensor) has shape " + c10::str(k.sizes()) +
              ", expected size 3 (qkv) or 2 (kv) in that dimension");
  return {packed_dim, static_cast<int>(size)};
}

// Where autograd routes the gradients (the packed tensor's to its first member's place), the packed
// arguments must be that one tensor.
void check_packed_arguments(const Tensor& q, const Tensor& k, const Tensor& v, const Packing& p) {
  const char* name = p.count == 3 ? "qkv" : "kv";
  if (p.count == 0 || (v.is_same(k) && (p.count == 2 || q.is_same(k)))) return;
  raise(StatusCode::invalid_argument, std::string(name) + ": packed_dim " + std::to_string(p.dim) + " given, but " +
                                          (p.count == 3 ? "q, k and v are" : "k and v are") +
                                          " not the one packed tensor");
}

// q, k, v as the library takes them: slices of the packed tensor where packed.
std::tuple<Tensor, Tensor, Tensor> unpacked(const Tensor& q, const Tensor& k, const Tensor& v, const Packing& p) {
  if (p.count == 0) return {q, k, v};
  const int first = p.count == 3 ? 1 : 0;  // k's place in the packed tensor
  return {p.count == 3 ? k.select(p.dim, 0) : q, k.select(p.dim, first), k.select(p.dim, first + 1)};
}

// ---- the backend kernels (CPU and CUDA keys) ------------------------------------------------------

std::tuple<Tensor, Tensor> fwd(const Tensor& q_arg, const Tensor& k_arg, const Tensor& v_arg,
                               const OptTensor& cu_seqlens_q, const OptTensor& cu_seqlens_k, int64_t max_seqlen_q,
                               int64_t max_seqlen_k, double softmax_scale, bool causal, int64_t window_left,
                               int64_t window_right, double softcap, bool /*deterministic: the backward's*/,
                               c10::string_view path, const OptTensor& block_table_in, bool return_lse,
                               int64_t packed_dim) {
  const auto [q_in, k_in, v_in] = unpacked(q_arg, k_arg, v_arg, packing_of(k_arg, packed_dim));
  const bool varlen = check_inputs(q_in, k_in, v_in, cu_seqlens_q, cu_seqlens_k, block_table_in);
  const c10::OptionalDeviceGuard guard(cuda_device_of(q_in));
  const Tensor q = usable(q_in), k = usable(k_in), v = usable(v_in);
  const Call c = make_call(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                           window_left, window_right, softcap, path);
  const OptTensor block_table = offsets(block_table_in);  // read as a plain int32 array
  Tensor out = empty(out_shape(q, v), q, q.scalar_type());
  Tensor lse = lse_output(return_lse, lse_shape(q, varlen), q);
  ForwardArgs a;
  fill(&a, q, k, v, c);
  a.block_table = view_of("block_table", block_table);
  a.out = view_of("out", out);
  if (return_lse) a.lse = view_of("lse", lse);
  run(a, q, [](const ForwardArgs& x) { return flashattn::forward(x); });
  return {out, lse};
}

// The gradients' tensors: dq, dk, dv of q's, k's and v's shapes; packed, the packed tensor's
// gradient in the place of its first member (dq for qkv, dk for kv) and its slices written, with
// 0-element tensors in the places of the others.
struct Gradients {
  Tensor returned[3];
  Tensor dq, dk, dv;  // what the library writes
};

Gradients gradients(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& packed, const Packing& p) {
  Gradients g;
  if (p.count == 0) {
    g.dq = g.returned[0] = empty(q.sizes(), q, q.scalar_type());
    g.dk = g.returned[1] = empty(k.sizes(), k, k.scalar_type());
    g.dv = g.returned[2] = empty(v.sizes(), v, v.scalar_type());
    return g;
  }
  const Tensor whole = empty(packed.sizes(), packed, packed.scalar_type());
  const int first = p.count == 3 ? 1 : 0;
  g.dq = p.count == 3 ? whole.select(p.dim, 0) : empty(q.sizes(), q, q.scalar_type());
  g.dk = whole.select(p.dim, first);
  g.dv = whole.select(p.dim, first + 1);
  g.returned[0] = p.count == 3 ? whole : g.dq;
  g.returned[1] = p.count == 3 ? new_tensor({0}, q, q.scalar_type()) : whole;
  g.returned[2] = new_tensor({0}, q, q.scalar_type());
  return g;
}

// Unpacked, dq, dk and dv are allocated by the library's call once its first kernel runs
// (BackwardArgs::gradient_allocator): on the autograd engine's device thread, which has just woken,
// each allocation is several µs that the GPU would otherwise spend waiting (docs/python.md).
struct LateGradientTensors {
  const Tensor& q;
  const Tensor& k;
  const Tensor& v;
  Tensor dq, dk, dv;
  std::exception_ptr error;  // what the allocation threw (out of memory), raised after the call

  // The view the library validates before any launch: the shape and contiguous strides that
  // `allocate` will give, no data yet.
  static TensorView planned(const char* name, const Tensor& like) {
    TensorView view = view_of(name, like);
    view.data = nullptr;
    const c10::DimVector strides = c10::contiguous_strides(like.sizes());
    for (int d = 0; d < view.rank; ++d) view.stride[d] = strides[d];
    return view;
  }

  void allocate() {
    dq = empty(q.sizes(), q, q.scalar_type());
    dk = empty(k.sizes(), k, k.scalar_type());
    dv = empty(v.sizes(), v, v.scalar_type());
  }

  static bool allocate(void* context, void** dq, void** dk, void** dv) {
    auto* self = static_cast<LateGradientTensors*>(context);
    try {
      self->allocate();
    } catch (...) {
      self->error = std::current_exception();
      return false;
    }
    *dq = self->dq.data_ptr();
    *dk = self->dk.data_ptr();
    *dv = self->dv.data_ptr();
    return true;
  }
};

std::tuple<Tensor, Tensor, Tensor> bwd(const Tensor& dout_in, const Tensor& q_arg, const Tensor& k_arg,
                                       const Tensor& v_arg, const Tensor& out_in, const Tensor& lse_in,
                                       const OptTensor& cu_seqlens_q, const OptTensor& cu_seqlens_k,
                                       int64_t max_seqlen_q, int64_t max_seqlen_k, double softmax_scale, bool causal,
                                       int64_t window_left, int64_t window_right, double softcap, bool deterministic,
                                       c10::string_view path, int64_t packed_dim) {
  const Packing packing = packing_of(k_arg, packed_dim);
  const auto [q_in, k_in, v_in] = unpacked(q_arg, k_arg, v_arg, packing);
  check_inputs(q_in, k_in, v_in, cu_seqlens_q, cu_seqlens_k);
  check_device("out", out_in, q_in);
  check_device("lse", lse_in, q_in);
  check_device("dout", dout_in, q_in);
  const c10::OptionalDeviceGuard guard(cuda_device_of(q_in));
  const Tensor q = usable(q_in), k = usable(k_in), v = usable(v_in), out = usable(out_in), dout = usable(dout_in);
  const Tensor lse = lse_in.dim() > 0 && lse_in.size(-1) > 1 && lse_in.stride(-1) != 1 ? lse_in.contiguous() : lse_in;
  const Call c = make_call(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                           window_left, window_right, softcap, path);
  BackwardArgs a;
  fill(&a, q, k, v, c);
  a.out = view_of("out", out);
  a.lse = view_of("lse", lse);
  a.dout = view_of("dout", dout);
  a.deterministic = deterministic;
  if (packing.count != 0 || !g_late_gradients.load(std::memory_order_relaxed)) {
    // Packed: the packed tensor's gradient, one allocation, its slices written.
    Gradients g = gradients(q, k, v, k_arg, packing);
    a.dq = view_of("dq", g.dq);
    a.dk = view_of("dk", g.dk);
    a.dv = view_of("dv", g.dv);
    run(a, q, [](const BackwardArgs& x) { return flashattn::backward(x); });
    return {std::move(g.returned[0]), std::move(g.returned[1]), std::move(g.returned[2])};
  }
  LateGradientTensors late{q, k, v, {}, {}, {}, {}};
  a.dq = LateGradientTensors::planned("dq", q);
  a.dk = LateGradientTensors::planned("dk", k);
  a.dv = LateGradientTensors::planned("dv", v);
  a.gradient_allocator = {&LateGradientTensors::allocate, &late};
  try {
    run(a, q, [](const BackwardArgs& x) { return flashattn::backward(x); });
  } catch (...) {
    if (late.error) std::rethrow_exception(late.error);
    throw;
  }
  if (!late.dq.defined()) late.allocate();  // the library call was skipped (host-overhead probes)
  return {std::move(late.dq), std::move(late.dk), std::move(late.dv)};
}

// The kernel family that would run this forward ("cpu", "sm80", ...), or "" if none: the checks and
// the selection of fwd, without outputs or a launch.
std::string forward_path(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const OptTensor& cu_seqlens_q,
                         const OptTensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k, bool causal,
                         c10::string_view path) {
  const bool varlen = check_inputs(q_in, k_in, v_in, cu_seqlens_q, cu_seqlens_k);
  const Tensor q = usable(q_in), k = usable(k_in), v = usable(v_in);
  const Call c = make_call(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, 1.0, causal, -1, -1, 0.0, path);
  const Tensor out = at::empty(out_shape(q, v), q.options());
  const Tensor lse = at::empty(lse_shape(q, varlen), q.options().dtype(at::kFloat));
  ForwardArgs a;
  fill(&a, q, k, v, c);
  a.out = view_of("out", out);
  a.lse = view_of("lse", lse);
  return flashattn::forward_path(a);
}

// ---- the KV-cache operator: inference only (no autograd), the caches written in place ---------------

void check_optional_device(const char* name, const OptTensor& t, const Tensor& q) {
  if (t) check_device(name, *t, q);
}

// q, k, v, rotary tables as the library takes them (a copy only when their layout needs one); the
// caches never: the new keys and values are written into them, so they are passed as they are and a
// layout the library cannot use is refused by name.
OptTensor usable(const OptTensor& t) { return t ? OptTensor(usable(*t)) : std::nullopt; }

std::tuple<Tensor, Tensor> kvcache(const Tensor& q_in, const Tensor& k_cache, const Tensor& v_cache,
                                   const OptTensor& k_new_in, const OptTensor& v_new_in,
                                   const OptTensor& rotary_cos_in, const OptTensor& rotary_sin_in,
                                   const OptTensor& cache_seqlens_in, const OptTensor& cache_batch_idx_in,
                                   const OptTensor& block_table_in, double softmax_scale, bool causal,
                                   int64_t window_left, int64_t window_right, double softcap, bool rotary_interleaved,
                                   int64_t num_splits, c10::string_view path, const OptTensor& cache_leftpad_in,
                                   bool return_lse) {
  if (q_in.dim() != 4) refuse_rank("q", q_in, 4, false);
  if (k_cache.dim() != 4) refuse_rank("k_cache", k_cache, 4, false);
  if (v_cache.dim() != 4) refuse_rank("v_cache", v_cache, 4, false);
  if (!q_in.is_cuda() && !q_in.is_cpu())
    raise(StatusCode::invalid_argument, "q: device " + q_in.device().str() + " is not supported (cpu or cuda)");
  check_device("k_cache", k_cache, q_in);
  check_device("v_cache", v_cache, q_in);
  check_optional_device("k", k_new_in, q_in);
  check_optional_device("v", v_new_in, q_in);
  check_optional_device("rotary_cos", rotary_cos_in, q_in);
  check_optional_device("rotary_sin", rotary_sin_in, q_in);
  check_optional_device("cache_seqlens", cache_seqlens_in, q_in);
  check_optional_device("cache_batch_idx", cache_batch_idx_in, q_in);
  check_optional_device("block_table", block_table_in, q_in);
  check_optional_device("cache_leftpad", cache_leftpad_in, q_in);
  const c10::OptionalDeviceGuard guard(cuda_device_of(q_in));
  const Tensor q = usable(q_in);
  const OptTensor k_new = usable(k_new_in), v_new = usable(v_new_in);
  const OptTensor rotary_cos = offsets(rotary_cos_in), rotary_sin = offsets(rotary_sin_in);  // one row stride
  const OptTensor cache_seqlens = offsets(cache_seqlens_in), cache_batch_idx = offsets(cache_batch_idx_in);
  const OptTensor block_table = offsets(block_table_in), cache_leftpad = offsets(cache_leftpad_in);
  Tensor out = empty({q.size(0), q.size(1), q.size(2), v_cache.size(3)}, q, q.scalar_type());
  Tensor lse = lse_output(return_lse, {q.size(0), q.size(2), q.size(1)}, q);

  // In argument order, so the first bad tensor is the one named.
  KVCacheArgs a;
  a.q = view_of("q", q);
  a.k_cache = view_of("k_cache", k_cache);
  a.v_cache = view_of("v_cache", v_cache);
  a.k_new = view_of("k", k_new);
  a.v_new = view_of("v", v_new);
  a.rotary_cos = view_of("rotary_cos", rotary_cos);
  a.rotary_sin = view_of("rotary_sin", rotary_sin);
  a.cache_seqlens = view_of("cache_seqlens", cache_seqlens);
  a.cache_batch_idx = view_of("cache_batch_idx", cache_batch_idx);
  a.block_table = view_of("block_table", block_table);
  a.cache_leftpad = view_of("cache_leftpad", cache_leftpad);
  a.rotary_interleaved = rotary_interleaved;
  a.out = view_of("out", out);
  if (return_lse) a.lse = view_of("lse", lse);
  a.options = make_call(std::nullopt, std::nullopt, 0, 0, softmax_scale, causal, window_left, window_right, softcap,
                        path).options;
  a.num_splits = static_cast<int>(std::clamp<int64_t>(num_splits, -1, std::numeric_limits<int>::max()));
  a.path = std::string(path);
  if (q.is_cuda()) a.stream = c10::impl::getDeviceGuardImpl(c10::kCUDA)->getStream(q.device()).native_handle();
  run(a, q, [](const KVCacheArgs& x) { return kvcache_forward(x); });
  return {out, lse};
}

// ---- autograd: the forward saves q, k, v, O and LSE (never P); the backward recomputes P -------------

using FwdSignature = std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, const OptTensor&,
                                                 const OptTensor&, c10::SymInt, c10::SymInt, double, bool, int64_t,
                                                 int64_t, double, bool, c10::string_view, const OptTensor&, bool,
                                                 int64_t);
using BwdSignature = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                                         const Tensor&, const Tensor&, const OptTensor&,
                                                         const OptTensor&, c10::SymInt, c10::SymInt, double, bool,
                                                         int64_t, int64_t, double, bool, c10::string_view, int64_t);

const c10::TypedOperatorHandle<FwdSignature>& fwd_op() {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("flashattn::fwd", "").typed<FwdSignature>();
  return op;
}

const c10::TypedOperatorHandle<BwdSignature>& bwd_op() {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("flashattn::bwd", "").typed<BwdSignature>();
  return op;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class Attention : public torch::autograd::Function<Attention> {
 public:
  static variable_list forward(AutogradContext* ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                               const OptTensor& cu_seqlens_q, const OptTensor& cu_seqlens_k, c10::SymInt max_seqlen_q,
                               c10::SymInt max_seqlen_k, double softmax_scale, bool causal, int64_t window_left,
                               int64_t window_right, double softcap, bool deterministic, c10::string_view path,
                               int64_t packed_dim) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [out, lse] = fwd_op().call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                                    causal, window_left, window_right, softcap, deterministic, path, std::nullopt,
                                    /*return_lse=*/true, packed_dim);
    ctx->save_for_backward({q, k, v, out, lse, cu_seqlens_q.value_or(Tensor()), cu_seqlens_k.value_or(Tensor())});
    ctx->saved_data["max_seqlen_q"] = std::move(max_seqlen_q);
    ctx->saved_data["max_seqlen_k"] = std::move(max_seqlen_k);
    ctx->saved_data["softmax_scale"] = softmax_scale;
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["window_left"] = window_left;
    ctx->saved_data["window_right"] = window_right;
    ctx->saved_data["softcap"] = softcap;
    ctx->saved_data["deterministic"] = deterministic;
    ctx->saved_data["path"] = std::string(path);
    ctx->saved_data["packed_dim"] = packed_dim;
    // The LSE is returned for inspection (return_attn_probs); no gradient flows through it. Its
    // gradient stays undefined rather than materialized: autograd would otherwise allocate and zero
    // a b·h·s tensor on every backward (measured ~0.2 ms of host time before the first launch on
    // the H200, docs/python.md).
    ctx->mark_non_differentiable({lse});
    ctx->set_materialize_grads(false);
    return {out, lse};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list grad_inputs(15);
    if (!grads[0].defined()) return grad_inputs;  // out did not reach the loss: no gradients
    const variable_list saved = ctx->get_saved_variables();
    const auto& d = ctx->saved_data;
    const auto optional = [](const Tensor& t) { return t.defined() ? OptTensor(t) : std::nullopt; };
    // Straight to the device kernel unless a graph of the backward is being recorded (create_graph):
    // bwd has no autograd kernel, and the dispatcher's autograd fallback boxes all 17 arguments to
    // find that out, on the engine's device thread, before the first launch.
    std::optional<at::AutoDispatchBelowADInplaceOrView> below_autograd;
    if (!at::GradMode::is_enabled()) below_autograd.emplace();
    auto [dq, dk, dv] =
        bwd_op().call(grads[0], saved[0], saved[1], saved[2], saved[3], saved[4], optional(saved[5]),
                      optional(saved[6]), d.at("max_seqlen_q").toSymInt(), d.at("max_seqlen_k").toSymInt(),
                      d.at("softmax_scale").toDouble(), d.at("causal").toBool(), d.at("window_left").toInt(),
                      d.at("window_right").toInt(), d.at("softcap").toDouble(), d.at("deterministic").toBool(),
                      d.at("path").toStringRef(), d.at("packed_dim").toInt());
    // Packed, a packed tensor's gradient comes back once, in the place of its first member; its other
    // places (0-element tensors) stay undefined, and autograd adds nothing for them.
    const int packed_count = packing_of(saved[1], d.at("packed_dim").toInt()).count;
    grad_inputs[0] = dq;
    if (packed_count != 3) grad_inputs[1] = dk;
    if (packed_count == 0) grad_inputs[2] = dv;
    return grad_inputs;
  }
};

std::tuple<Tensor, Tensor> fwd_autograd(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const OptTensor& cu_seqlens_q, const OptTensor& cu_seqlens_k,
                                        c10::SymInt max_seqlen_q, c10::SymInt max_seqlen_k, double softmax_scale,
                                        bool causal, int64_t window_left, int64_t window_right, double softcap,
                                        bool deterministic, c10::string_view path, const OptTensor& block_table,
                                        bool return_lse, int64_t packed_dim) {
  const bool needs_grad =
      at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
  if (!needs_grad) {  // inference: no graph node, no saved tensors
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return fwd_op().call(q, k, v, cu_seqlens_q, cu_seqlens_k, std::move(max_seqlen_q), std::move(max_seqlen_k),
                         softmax_scale, causal, window_left, window_right, softcap, deterministic, path, block_table,
                         return_lse, packed_dim);
  }
  check_packed_arguments(q, k, v, packing_of(k, packed_dim));
  if (block_table) {  // refused before the forward runs, not when backward() finds no gradient
    raise(StatusCode::not_supported,
          "block_table: the paged forward has no backward (neither has flash-attn's); q, k, v must not require "
          "grad, or run under torch.no_grad()");
  }
  // The backward needs the LSE: computed whatever return_lse says.
  const variable_list r =
      Attention::apply(q, k, v, cu_seqlens_q, cu_seqlens_k, std::move(max_seqlen_q), std::move(max_seqlen_k),
                       softmax_scale, causal, window_left, window_right, softcap, deterministic, path, packed_dim);
  return {r[0], r[1]};
}

}  // namespace

void set_poison_outputs(bool on) { g_poison_outputs.store(on); }
void set_skip_library_calls(bool on) { g_skip_library_calls.store(on); }
void set_late_gradients(bool on) { g_late_gradients.store(on); }
int last_error_code() { return g_last_error_code; }

}  // namespace flashattn::torch_ops

// Schemas: `int` windows, `SymInt` maxima (torch.compile may trace them symbolically), `float` is a
// double; fwd's block_table (paged k, v) and return_lse (False: lse comes back empty, unless autograd
// needs it), then fwd's and bwd's packed_dim (-1: q, k, v apart; else as "packed q, k, v" above says) come
// last, so callers without them pass nothing. fwd and bwd neither mutate nor alias their inputs;
// kvcache writes its caches.
TORCH_LIBRARY(flashattn, m) {
  m.def(
      "fwd(Tensor q, Tensor k, Tensor v, Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, SymInt max_seqlen_q, "
      "SymInt max_seqlen_k, float softmax_scale, bool causal, int window_left, int window_right, float softcap, "
      "bool deterministic, str path=\"auto\", Tensor? block_table=None, bool return_lse=True, int packed_dim=-1) "
      "-> (Tensor, Tensor)");
  m.def(
      "bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor? cu_seqlens_q, "
      "Tensor? cu_seqlens_k, SymInt max_seqlen_q, SymInt max_seqlen_k, float softmax_scale, bool causal, "
      "int window_left, int window_right, float softcap, bool deterministic, str path=\"auto\", "
      "int packed_dim=-1) -> (Tensor, Tensor, Tensor)");
  m.def(
      "forward_path(Tensor q, Tensor k, Tensor v, Tensor? cu_seqlens_q=None, Tensor? cu_seqlens_k=None, "
      "int max_seqlen_q=0, int max_seqlen_k=0, bool causal=False, str path=\"auto\") -> str",
      &flashattn::torch_ops::forward_path);
  // Attention against a KV cache (flash_attn_with_kvcache): appends k, v into the caches in place
  // (marked mutated: a!, b!), then returns (out, lse) (lse empty with return_lse=False). Inference
  // only: no autograd kernel.
  m.def(
      "kvcache(Tensor q, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor? k, Tensor? v, Tensor? rotary_cos, "
      "Tensor? rotary_sin, Tensor? cache_seqlens, Tensor? cache_batch_idx, Tensor? block_table, float softmax_scale, "
      "bool causal, int window_left, int window_right, float softcap, bool rotary_interleaved, int num_splits, "
      "str path=\"auto\", Tensor? cache_leftpad=None, bool return_lse=True) -> (Tensor, Tensor)");
  // The fake (meta) implementations of fwd, bwd and kvcache for torch.compile live in this Python module.
  m.set_python_module("flashattn._ops");
}

TORCH_LIBRARY_IMPL(flashattn, CPU, m) {
  m.impl("fwd", &flashattn::torch_ops::fwd);
  m.impl("bwd", &flashattn::torch_ops::bwd);
  m.impl("kvcache", &flashattn::torch_ops::kvcache);
}

TORCH_LIBRARY_IMPL(flashattn, CUDA, m) {
  m.impl("fwd", &flashattn::torch_ops::fwd);
  m.impl("bwd", &flashattn::torch_ops::bwd);
  m.impl("kvcache", &flashattn::torch_ops::kvcache);
}

TORCH_LIBRARY_IMPL(flashattn, Autograd, m) { m.impl("fwd", &flashattn::torch_ops::fwd_autograd); }
