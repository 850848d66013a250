// flashattn._C: the thin, torch-free binding of the C++ API (include/flashattn/flashattn.hpp).
//
// Python passes each tensor as a plain tuple (data_ptr, dtype code, device code, shape, strides),
// the options by name (keyword arguments), and the CUDA stream as an integer; this file turns them
// into the API's arguments and calls the library once per forward or backward. Allocation,
// streams, autograd and the torch custom ops all live in Python (flashattn/_ops.py), so nothing
// here depends on libtorch.
//
// The run entry points are the per-call hot path (host time before the kernel launch is what a
// small problem pays): each is one Python → C++ transition that queries the workspace, asks
// Python's allocator for it only when the call needs one, and runs; it returns None on success
// and (status code, message) otherwise, so success allocates no Python object.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flashattn/flashattn.hpp"

namespace nb = nanobind;
using namespace nb::literals;

// A tensor from Python: the tuple (data_ptr, dtype code, device code, shape, strides) read straight
// into a TensorView (dtype and device use the codes of DType and Device; shape and strides are
// tuples, e.g. torch.Size). Read with the C API rather than through std::vector casters: a backward
// passes nine of them per call, and their conversion was most of the binding's time.
namespace nanobind::detail {
template <>
struct type_caster<flashattn::TensorView> {
  NB_TYPE_CASTER(flashattn::TensorView, const_name("tuple[int, int, int, tuple[int, ...], tuple[int, ...]]"))

  bool from_python(handle src, uint8_t, cleanup_list*) noexcept {
    PyObject* t = src.ptr();
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 5) return false;
    PyObject* shape = PyTuple_GET_ITEM(t, 3);
    PyObject* stride = PyTuple_GET_ITEM(t, 4);
    if (!PyTuple_Check(shape) || !PyTuple_Check(stride)) return false;
    value = flashattn::TensorView{};
    value.data = PyLong_AsVoidPtr(PyTuple_GET_ITEM(t, 0));
    value.dtype = static_cast<flashattn::DType>(PyLong_AsLong(PyTuple_GET_ITEM(t, 1)));
    value.device = static_cast<flashattn::Device>(PyLong_AsLong(PyTuple_GET_ITEM(t, 2)));
    const Py_ssize_t rank = PyTuple_GET_SIZE(shape);
    // A rank the API cannot hold is passed on as -1, which validation reports by name.
    const bool fits = rank <= flashattn::TensorView::kMaxRank && PyTuple_GET_SIZE(stride) == rank;
    value.rank = fits ? static_cast<int>(rank) : -1;
    for (Py_ssize_t i = 0; fits && i < rank; ++i) {
      value.shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
      value.stride[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(stride, i));
    }
    if (PyErr_Occurred()) {  // a non-integer somewhere: not a tensor tuple
      PyErr_Clear();
      return false;
    }
    return true;
  }

  static handle from_cpp(const flashattn::TensorView&, rv_policy, cleanup_list*) noexcept { return none().release(); }
};
}  // namespace nanobind::detail

namespace flashattn {
namespace {

using OptTensor = std::optional<TensorView>;

TensorView view_of(const OptTensor& t) { return t ? *t : TensorView{}; }  // absent: the empty view

// The keyword arguments every entry point shares, in the order they are declared to nanobind
// (FLASHATTN_COMMON_ARGS below): varlen offsets and maxima, AttentionOptions' fields, path and stream.
struct Common {
  OptTensor cu_seqlens_q, cu_seqlens_k;
  int64_t max_seqlen_q, max_seqlen_k;
  AttentionOptions options;
  std::string path;
  std::uintptr_t stream;
};

void fill(AttentionArgs* a, const TensorView& q, const TensorView& k, const TensorView& v, const Common& c) {
  a->q = q;
  a->k = k;
  a->v = v;
  a->cu_seqlens_q = view_of(c.cu_seqlens_q);
  a->cu_seqlens_k = view_of(c.cu_seqlens_k);
  a->max_seqlen_q = c.max_seqlen_q;
  a->max_seqlen_k = c.max_seqlen_k;
  a->options = c.options;
  a->path = c.path;
  a->stream = reinterpret_cast<void*>(c.stream);
}

Common common(OptTensor cu_seqlens_q, OptTensor cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
              std::optional<float> softmax_scale, bool causal, int64_t window_left, int64_t window_right,
              float softcap, std::string path, std::uintptr_t stream) {
  AttentionOptions o;
  o.softmax_scale = softmax_scale;
  o.causal = causal;
  o.window_left = window_left;
  o.window_right = window_right;
  o.softcap = softcap;
  return {std::move(cu_seqlens_q), std::move(cu_seqlens_k), max_seqlen_q, max_seqlen_k, o, std::move(path), stream};
}

ForwardArgs forward_args(const TensorView& q, const TensorView& k, const TensorView& v, const OptTensor& out,
                         const OptTensor& lse, const Common& c) {
  ForwardArgs a;
  fill(&a, q, k, v, c);
  a.out = view_of(out);
  a.lse = view_of(lse);
  return a;
}

BackwardArgs backward_args(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                           const TensorView& lse, const TensorView& dout, const TensorView& dq, const TensorView& dk,
                           const TensorView& dv, bool deterministic, const Common& c) {
  BackwardArgs a;
  fill(&a, q, k, v, c);
  a.out = out;
  a.lse = lse;
  a.dout = dout;
  a.dq = dq;
  a.dk = dk;
  a.dv = dv;
  a.deterministic = deterministic;
  return a;
}

nb::object status_or_none(const Status& s) {
  if (s.ok()) return nb::none();
  return nb::make_tuple(static_cast<int>(s.code), s.message);
}

// Query the workspace, take it from `alloc` (a Python callable: bytes → a buffer object with
// data_ptr(), i.e. a torch tensor on the call's device) when one is needed, and run. The buffer is
// held until the call returns; PyTorch's stream-ordered allocator keeps its memory for the kernel.
// The run itself happens with the GIL released: a CPU call may take a while, and a CUDA call only
// enqueues work on the caller's stream.
template <class Args, class SizeFn, class RunFn>
nb::object query_alloc_run(Args& a, const std::optional<nb::callable>& alloc, SizeFn size_of, RunFn run) {
  std::size_t bytes = 0;
  Status s = size_of(a, &bytes);
  if (!s.ok()) return status_or_none(s);
  nb::object buffer;
  if (bytes > 0) {
    if (!alloc) return status_or_none(Status::invalid("workspace: this call needs " + std::to_string(bytes) +
                                                      " bytes and no workspace allocator was given"));
    buffer = (*alloc)(bytes);
    a.workspace = reinterpret_cast<void*>(nb::cast<std::uintptr_t>(buffer.attr("data_ptr")()));
    a.workspace_bytes = bytes;
  }
  {
    nb::gil_scoped_release release;
    s = run(a);
  }
  return status_or_none(s);
}

nb::object py_forward(const TensorView& q, const TensorView& k, const TensorView& v, const OptTensor& out,
                      const OptTensor& lse, OptTensor cu_seqlens_q, OptTensor cu_seqlens_k, int64_t max_seqlen_q,
                      int64_t max_seqlen_k, std::optional<float> softmax_scale, bool causal, int64_t window_left,
                      int64_t window_right, float softcap, std::string path, std::uintptr_t stream,
                      std::optional<nb::callable> workspace_alloc) {
  ForwardArgs a = forward_args(q, k, v, out, lse,
                               common(std::move(cu_seqlens_q), std::move(cu_seqlens_k), max_seqlen_q, max_seqlen_k,
                                      softmax_scale, causal, window_left, window_right, softcap, std::move(path),
                                      stream));
  return query_alloc_run(
      a, workspace_alloc, [](const ForwardArgs& x, std::size_t* b) { return forward_workspace_size(x, b); },
      [](const ForwardArgs& x) { return flashattn::forward(x); });
}

nb::object py_backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                       const TensorView& lse, const TensorView& dout, const TensorView& dq, const TensorView& dk,
                       const TensorView& dv, bool deterministic, OptTensor cu_seqlens_q, OptTensor cu_seqlens_k,
                       int64_t max_seqlen_q, int64_t max_seqlen_k, std::optional<float> softmax_scale, bool causal,
                       int64_t window_left, int64_t window_right, float softcap, std::string path,
                       std::uintptr_t stream, std::optional<nb::callable> workspace_alloc) {
  BackwardArgs a = backward_args(q, k, v, out, lse, dout, dq, dk, dv, deterministic,
                                 common(std::move(cu_seqlens_q), std::move(cu_seqlens_k), max_seqlen_q, max_seqlen_k,
                                        softmax_scale, causal, window_left, window_right, softcap, std::move(path),
                                        stream));
  return query_alloc_run(
      a, workspace_alloc, [](const BackwardArgs& x, std::size_t* b) { return backward_workspace_size(x, b); },
      [](const BackwardArgs& x) { return flashattn::backward(x); });
}

std::string py_forward_path(const TensorView& q, const TensorView& k, const TensorView& v, const OptTensor& out,
                            const OptTensor& lse, OptTensor cu_seqlens_q, OptTensor cu_seqlens_k,
                            int64_t max_seqlen_q, int64_t max_seqlen_k, std::optional<float> softmax_scale,
                            bool causal, int64_t window_left, int64_t window_right, float softcap, std::string path,
                            std::uintptr_t stream) {
  return forward_path(forward_args(q, k, v, out, lse,
                                   common(std::move(cu_seqlens_q), std::move(cu_seqlens_k), max_seqlen_q,
                                          max_seqlen_k, softmax_scale, causal, window_left, window_right, softcap,
                                          std::move(path), stream)));
}

}  // namespace
}  // namespace flashattn

NB_MODULE(_C, m) {
  using namespace flashattn;
  m.doc() = "flashattn C++ API, torch-free: tensors are (data_ptr, dtype, device, shape, strides) tuples";

  // The keyword-only arguments shared by every entry point (see Common), with their defaults.
#define FLASHATTN_COMMON_ARGS                                                                                  \
  nb::kw_only(), "cu_seqlens_q"_a.none() = nb::none(), "cu_seqlens_k"_a.none() = nb::none(),                  \
      "max_seqlen_q"_a = 0, "max_seqlen_k"_a = 0, "softmax_scale"_a.none() = nb::none(), "causal"_a = false, \
      "window_left"_a = -1, "window_right"_a = -1, "softcap"_a = 0.f, "path"_a = "auto", "stream"_a = 0

  m.def("forward", &py_forward, "q"_a, "k"_a, "v"_a, "out"_a.none(), "lse"_a.none(), FLASHATTN_COMMON_ARGS,
        "workspace_alloc"_a.none() = nb::none(),
        "Runs the forward (querying the workspace and taking it from workspace_alloc(bytes) when one is\n"
        "needed); returns None on success, else (status code, message).");
  m.def("backward", &py_backward, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a, "dout"_a, "dq"_a, "dk"_a, "dv"_a,
        "deterministic"_a, FLASHATTN_COMMON_ARGS, "workspace_alloc"_a.none() = nb::none(),
        "Runs the backward, as forward; returns None on success, else (status code, message).");
  m.def("forward_path", &py_forward_path, "q"_a, "k"_a, "v"_a, "out"_a.none(), "lse"_a.none(),
        FLASHATTN_COMMON_ARGS, "Kernel family that would run this forward (\"cpu\", \"sm80\", ...), or \"\".");
#undef FLASHATTN_COMMON_ARGS
  m.def("families", &families, "The kernel families of this build, in the order path=\"auto\" tries them.");
  m.def("cuda_available", &cuda_available, "True when the library was built with CUDA and a CUDA device is visible.");

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
