// flashattn._C: the thin, torch-free binding of the C++ API (include/flashattn/flashattn.hpp).
//
// Python passes each tensor as a plain tuple (data_ptr, dtype code, device code, shape, strides)
// and the CUDA stream as an integer; this file turns them into TensorViews, calls the library and
// returns the Status as (code, message). Allocation, streams, autograd and the torch custom ops
// all live in Python (flashattn/_ops.py), so nothing here depends on libtorch.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "flashattn/flashattn.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace flashattn {
namespace {

// (data_ptr, dtype, device, shape, strides): dtype and device use the codes of DType and Device.
using PyTensor = std::tuple<std::uintptr_t, int, int, std::vector<int64_t>, std::vector<int64_t>>;
using OptTensor = std::optional<PyTensor>;
using StatusTuple = std::tuple<int, std::string>;

TensorView view_of(const OptTensor& t) {
  TensorView v;
  if (!t) return v;  // absent: the empty view
  const auto& [data, dtype, device, shape, stride] = *t;
  v.data = reinterpret_cast<void*>(data);
  v.dtype = static_cast<DType>(dtype);
  v.device = static_cast<Device>(device);
  // A rank the API cannot hold is passed on as -1, which validation reports by name.
  const bool fits = shape.size() <= TensorView::kMaxRank && stride.size() == shape.size();
  v.rank = fits ? static_cast<int>(shape.size()) : -1;
  for (int i = 0; fits && i < v.rank; ++i) {
    v.shape[i] = shape[i];
    v.stride[i] = stride[i];
  }
  return v;
}

// The options shared by forward and backward, as one tuple from Python:
// (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left,
//  window_right, softcap, stream).
using Options = std::tuple<OptTensor, OptTensor, int64_t, int64_t, std::optional<float>, bool, int64_t, int64_t,
                           float, std::uintptr_t>;

void fill(AttentionArgs* a, const PyTensor& q, const PyTensor& k, const PyTensor& v, const Options& o) {
  const auto& [cu_q, cu_k, max_q, max_k, scale, causal, window_left, window_right, softcap, stream] = o;
  a->q = view_of(q);
  a->k = view_of(k);
  a->v = view_of(v);
  a->cu_seqlens_q = view_of(cu_q);
  a->cu_seqlens_k = view_of(cu_k);
  a->max_seqlen_q = max_q;
  a->max_seqlen_k = max_k;
  a->options.softmax_scale = scale;
  a->options.causal = causal;
  a->options.window_left = window_left;
  a->options.window_right = window_right;
  a->options.softcap = softcap;
  a->stream = reinterpret_cast<void*>(stream);
}

ForwardArgs forward_args(const PyTensor& q, const PyTensor& k, const PyTensor& v, const OptTensor& out,
                         const OptTensor& lse, const Options& o) {
  ForwardArgs a;
  fill(&a, q, k, v, o);
  a.out = view_of(out);
  a.lse = view_of(lse);
  return a;
}

BackwardArgs backward_args(const PyTensor& q, const PyTensor& k, const PyTensor& v, const OptTensor& out,
                           const OptTensor& lse, const OptTensor& dout, const OptTensor& dq, const OptTensor& dk,
                           const OptTensor& dv, bool deterministic, const Options& o) {
  BackwardArgs a;
  fill(&a, q, k, v, o);
  a.out = view_of(out);
  a.lse = view_of(lse);
  a.dout = view_of(dout);
  a.dq = view_of(dq);
  a.dk = view_of(dk);
  a.dv = view_of(dv);
  a.deterministic = deterministic;
  return a;
}

StatusTuple as_tuple(const Status& s) { return {static_cast<int>(s.code), s.message}; }

// Each entry point is called with the GIL released: a CPU call may run for a while, and a CUDA call
// only enqueues work on the caller's stream.
StatusTuple py_forward(const PyTensor& q, const PyTensor& k, const PyTensor& v, const OptTensor& out,
                    const OptTensor& lse, const Options& o, std::uintptr_t workspace, std::size_t workspace_bytes) {
  ForwardArgs a = forward_args(q, k, v, out, lse, o);
  a.workspace = reinterpret_cast<void*>(workspace);
  a.workspace_bytes = workspace_bytes;
  nb::gil_scoped_release release;
  return as_tuple(flashattn::forward(a));
}

std::tuple<int, std::string, std::size_t> py_forward_workspace(const PyTensor& q, const PyTensor& k, const PyTensor& v,
                                                            const OptTensor& out, const OptTensor& lse,
                                                            const Options& o) {
  std::size_t bytes = 0;
  Status s = forward_workspace_size(forward_args(q, k, v, out, lse, o), &bytes);
  return {static_cast<int>(s.code), s.message, bytes};
}

StatusTuple py_backward(const PyTensor& q, const PyTensor& k, const PyTensor& v, const OptTensor& out,
                     const OptTensor& lse, const OptTensor& dout, const OptTensor& dq, const OptTensor& dk,
                     const OptTensor& dv, bool deterministic, const Options& o, std::uintptr_t workspace,
                     std::size_t workspace_bytes) {
  BackwardArgs a = backward_args(q, k, v, out, lse, dout, dq, dk, dv, deterministic, o);
  a.workspace = reinterpret_cast<void*>(workspace);
  a.workspace_bytes = workspace_bytes;
  nb::gil_scoped_release release;
  return as_tuple(flashattn::backward(a));
}

std::tuple<int, std::string, std::size_t> py_backward_workspace(const PyTensor& q, const PyTensor& k, const PyTensor& v,
                                                             const OptTensor& out, const OptTensor& lse,
                                                             const OptTensor& dout, const OptTensor& dq,
                                                             const OptTensor& dk, const OptTensor& dv,
                                                             bool deterministic, const Options& o) {
  std::size_t bytes = 0;
  Status s = backward_workspace_size(backward_args(q, k, v, out, lse, dout, dq, dk, dv, deterministic, o), &bytes);
  return {static_cast<int>(s.code), s.message, bytes};
}

}  // namespace
}  // namespace flashattn

NB_MODULE(_C, m) {
  using namespace flashattn;
  m.doc() = "flashattn C++ API, torch-free: tensors are (data_ptr, dtype, device, shape, strides) tuples";

  m.def("forward", &flashattn::py_forward, "q"_a, "k"_a, "v"_a, "out"_a.none(), "lse"_a.none(), "options"_a,
        "workspace"_a, "workspace_bytes"_a, "Runs the forward; returns (status code, message).");
  m.def("forward_workspace_size", &flashattn::py_forward_workspace, "q"_a, "k"_a, "v"_a, "out"_a.none(),
        "lse"_a.none(), "options"_a, "Returns (status code, message, workspace bytes).");
  m.def("backward", &flashattn::py_backward, "q"_a, "k"_a, "v"_a, "out"_a.none(), "lse"_a.none(), "dout"_a.none(),
        "dq"_a.none(), "dk"_a.none(), "dv"_a.none(), "deterministic"_a, "options"_a, "workspace"_a,
        "workspace_bytes"_a, "Runs the backward; returns (status code, message).");
  m.def("backward_workspace_size", &flashattn::py_backward_workspace, "q"_a, "k"_a, "v"_a, "out"_a.none(),
        "lse"_a.none(), "dout"_a.none(), "dq"_a.none(), "dk"_a.none(), "dv"_a.none(), "deterministic"_a,
        "options"_a, "Returns (status code, message, workspace bytes).");
  m.def(
      "forward_path",
      [](const PyTensor& q, const PyTensor& k, const PyTensor& v, const OptTensor& out, const OptTensor& lse,
         const Options& o) { return flashattn::forward_path(forward_args(q, k, v, out, lse, o)); },
      "q"_a, "k"_a, "v"_a, "out"_a.none(), "lse"_a.none(), "options"_a,
      "Kernel family that would run this forward (\"cpu\", \"sm80\", ...), or \"\".");
  m.def("cuda_available", &flashattn::cuda_available,
        "True when the library was built with CUDA and a CUDA device is visible.");

  // The codes of the C++ enums, so Python never hard-codes them.
  m.attr("DTYPE_F32") = static_cast<int>(DType::f32);
  m.attr("DTYPE_F16") = static_cast<int>(DType::f16);
  m.attr("DTYPE_BF16") = static_cast<int>(DType::bf16);
  m.attr("DTYPE_I32") = static_cast<int>(DType::i32);
  m.attr("DEVICE_CPU") = static_cast<int>(Device::cpu);
  m.attr("DEVICE_CUDA") = static_cast<int>(Device::cuda);
  m.attr("STATUS_OK") = static_cast<int>(StatusCode::ok);
  m.attr("STATUS_INVALID_ARGUMENT") = static_cast<int>(StatusCode::invalid_argument);
  m.attr("STATUS_NOT_SUPPORTED") = static_cast<int>(StatusCode::not_supported);
  m.attr("STATUS_CUDA_ERROR") = static_cast<int>(StatusCode::cuda_error);
  m.attr("STATUS_INTERNAL") = static_cast<int>(StatusCode::internal);
}
