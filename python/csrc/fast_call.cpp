// flashattn._C.attention: the eager entry point of flash_attn_func, a CPython fast-call function that
// reads its 14 positional arguments straight into C++ and calls the flashattn::fwd operator through
// PyTorch's dispatcher (autograd, device keys, meta: everything but __torch_function__, which the
// Python caller rules out first: plain tensors, no mode active, not traced).
//
// Why not torch.ops.flashattn.fwd: its Python binding matches the arguments against the schema one by
// one, ~15-20 µs of host time per call for 14 arguments; PyTorch's own functions (scaled_dot_
// product_attention) use generated parsers that cost a few µs. A tiny problem pays all of it before
// the kernel launch (docs/python.md, "Host overhead").
#include <Python.h>
#include <torch/csrc/autograd/python_variable.h>

#include <optional>
#include <string_view>

#include "torch_ops_call.hpp"

namespace flashattn::torch_ops {
namespace {

// A plain tensor argument (torch.Tensor or Parameter): its at::Tensor, or nullptr with a TypeError set.
const at::Tensor* tensor_arg(PyObject* o, const char* name) {
  if (THPVariable_CheckExact(o)) return &THPVariable_Unpack(o);
  PyErr_Format(PyExc_TypeError, "flashattn: %s must be a torch.Tensor, got %s", name, Py_TYPE(o)->tp_name);
  return nullptr;
}

bool optional_tensor_arg(PyObject* o, const char* name, std::optional<at::Tensor>* out) {
  if (o == Py_None) return true;
  const at::Tensor* t = tensor_arg(o, name);
  if (t) *out = *t;
  return t != nullptr;
}

// The library's errors (and PyTorch's) as the Python exceptions PyTorch would raise for them; the
// Python caller turns the library's into flashattn's own classes.
PyObject* raise_python(const c10::Error& e) {
  PyObject* type = PyExc_RuntimeError;
  if (dynamic_cast<const c10::ValueError*>(&e)) type = PyExc_ValueError;
  if (dynamic_cast<const c10::NotImplementedError*>(&e)) type = PyExc_NotImplementedError;
  if (dynamic_cast<const c10::TypeError*>(&e)) type = PyExc_TypeError;
  PyErr_SetString(type, e.what_without_backtrace());
  return nullptr;
}

struct GilReleased {
  PyThreadState* state = PyEval_SaveThread();
  GilReleased() = default;
  GilReleased(const GilReleased&) = delete;
  GilReleased& operator=(const GilReleased&) = delete;
  ~GilReleased() { PyEval_RestoreThread(state); }
};

constexpr Py_ssize_t kArgs = 14;

// attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
//           window_left, window_right, softcap, deterministic, path) -> (out, lse)
PyObject* attention(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != kArgs) {
    PyErr_Format(PyExc_TypeError, "flashattn: attention takes %zd positional arguments, got %zd", kArgs, nargs);
    return nullptr;
  }
  const at::Tensor *q = tensor_arg(args[0], "q"), *k = q ? tensor_arg(args[1], "k") : nullptr;
  const at::Tensor* v = k ? tensor_arg(args[2], "v") : nullptr;
  std::optional<at::Tensor> cu_seqlens_q, cu_seqlens_k;
  if (!v || !optional_tensor_arg(args[3], "cu_seqlens_q", &cu_seqlens_q) ||
      !optional_tensor_arg(args[4], "cu_seqlens_k", &cu_seqlens_k))
    return nullptr;
  FwdCall c;
  c.max_seqlen_q = PyLong_AsLongLong(args[5]);
  c.max_seqlen_k = PyLong_AsLongLong(args[6]);
  c.softmax_scale = PyFloat_AsDouble(args[7]);
  c.causal = PyObject_IsTrue(args[8]) == 1;
  c.window_left = PyLong_AsLongLong(args[9]);
  c.window_right = PyLong_AsLongLong(args[10]);
  c.softcap = PyFloat_AsDouble(args[11]);
  c.deterministic = PyObject_IsTrue(args[12]) == 1;
  Py_ssize_t path_size = 0;
  const char* path = PyUnicode_AsUTF8AndSize(args[13], &path_size);
  if (PyErr_Occurred()) return nullptr;
  c.path = std::string_view(path, static_cast<std::size_t>(path_size));

  at::Tensor out, lse;
  try {
    const GilReleased no_gil;  // CPU kernels compute for a while; CUDA launches need no Python
    std::tie(out, lse) = call_fwd(*q, *k, *v, cu_seqlens_q, cu_seqlens_k, c);
  } catch (const c10::Error& e) {
    return raise_python(e);
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  PyObject* py_out = THPVariable_Wrap(std::move(out));
  PyObject* py_lse = py_out ? THPVariable_Wrap(std::move(lse)) : nullptr;
  if (!py_lse) {
    Py_XDECREF(py_out);
    return nullptr;
  }
  PyObject* result = PyTuple_Pack(2, py_out, py_lse);
  Py_DECREF(py_out);
  Py_DECREF(py_lse);
  return result;
}

PyMethodDef kMethods[] = {
    {"attention", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&attention)), METH_FASTCALL,
     "attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,\n"
     "window_left, window_right, softcap, deterministic, path) -> (out, lse): torch.ops.flashattn.fwd\n"
     "for plain tensors, without __torch_function__ handling."},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

int add_fast_calls(PyObject* module) { return PyModule_AddFunctions(module, kMethods); }

}  // namespace flashattn::torch_ops
