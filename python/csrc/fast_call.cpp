// flashattn._C.attention and _C.kvcache: the eager entry points of flash_attn_func and
// flash_attn_with_kvcache, CPython fast-call functions that read their positional arguments straight
// into the flashattn::fwd (flashattn::kvcache) operator's argument stack, by the operator's schema,
// and call the operator through PyTorch's dispatcher (autograd, device keys, meta: everything but
// __torch_function__, which the Python caller rules out first: no mode active, not traced; a tensor
// argument that is not a plain torch.Tensor returns NotImplemented, and the caller takes the
// operator's Python binding).
//
// Why not torch.ops.flashattn.fwd: its Python binding matches the arguments against the schema
// with general-purpose machinery, ~8-14 µs of host time per call for 14 arguments; PyTorch's own
// functions (scaled_dot_product_attention) use generated parsers that cost a few µs. A tiny problem
// pays all of it before the kernel launch (docs/python.md, "Host overhead"). Reading by the schema
// keeps this file free of the operator's argument list: a new option is a schema change only.
#include <Python.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/python_variable.h>

#include <string>
#include <vector>

#include "torch_ops.hpp"

namespace flashattn::torch_ops {
namespace {

enum class Pushed { ok, error, not_plain };

// One Python argument as the IValue the schema's argument type asks for: error (a Python error set)
// when it is not one, not_plain for a tensor of a subclass (whose __torch_function__ must run).
Pushed push_argument(PyObject* o, const c10::Argument& arg, torch::jit::Stack* stack) {
  const c10::TypePtr& type = arg.type();
  if (o == Py_None && type->kind() == c10::TypeKind::OptionalType) {
    stack->emplace_back();
    return Pushed::ok;
  }
  const auto pushed = [](bool ok) { return ok ? Pushed::ok : Pushed::error; };
  const c10::TypeKind kind = type->kind() == c10::TypeKind::OptionalType
                                 ? type->expectRef<c10::OptionalType>().getElementType()->kind()
                                 : type->kind();
  switch (kind) {
    case c10::TypeKind::TensorType:
      if (!THPVariable_CheckExact(o)) {
        if (THPVariable_Check(o)) return Pushed::not_plain;
        PyErr_Format(PyExc_TypeError, "flashattn: %s must be a torch.Tensor, got %s", arg.name().c_str(),
                     Py_TYPE(o)->tp_name);
        return Pushed::error;
      }
      stack->emplace_back(THPVariable_Unpack(o));
      return Pushed::ok;
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType:
      stack->emplace_back(static_cast<int64_t>(PyLong_AsLongLong(o)));
      return pushed(!PyErr_Occurred());
    case c10::TypeKind::FloatType:
      stack->emplace_back(PyFloat_AsDouble(o));
      return pushed(!PyErr_Occurred());
    case c10::TypeKind::BoolType:
      stack->emplace_back(PyObject_IsTrue(o) == 1);
      return pushed(!PyErr_Occurred());
    case c10::TypeKind::StringType: {
      Py_ssize_t size = 0;
      const char* s = PyUnicode_AsUTF8AndSize(o, &size);
      if (s == nullptr) return Pushed::error;
      stack->emplace_back(std::string(s, static_cast<std::size_t>(size)));
      return Pushed::ok;
    }
    default:
      PyErr_Format(PyExc_TypeError, "flashattn: argument %s has a type the fast call does not read",
                   arg.name().c_str());
      return Pushed::error;
  }
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

// The operator's returns, as a Python tuple of tensors.
PyObject* returns_to_python(torch::jit::Stack& stack) {
  PyObject* result = PyTuple_New(static_cast<Py_ssize_t>(stack.size()));
  for (std::size_t i = 0; result != nullptr && i < stack.size(); ++i) {
    PyObject* t = THPVariable_Wrap(std::move(stack[i]).toTensor());
    if (t == nullptr) {
      Py_CLEAR(result);
      break;
    }
    PyTuple_SET_ITEM(result, static_cast<Py_ssize_t>(i), t);
  }
  return result;
}

// The operator called with the positional arguments (schema order; trailing ones may take the
// schema's defaults) -> its returns as a tuple, or NotImplemented for a tensor that is not plain.
PyObject* call_by_schema(const c10::OperatorHandle& op, const char* name, PyObject* const* args,
                         Py_ssize_t nargs) {
  const std::vector<c10::Argument>& params = op.schema().arguments();
  const auto n = static_cast<Py_ssize_t>(params.size());
  if (nargs > n || (nargs < n && !params[nargs].default_value())) {
    PyErr_Format(PyExc_TypeError, "flashattn: %s takes up to %zd positional arguments, got %zd", name, n, nargs);
    return nullptr;
  }
  torch::jit::Stack stack;
  stack.reserve(params.size());
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    const Pushed pushed = push_argument(args[i], params[i], &stack);
    if (pushed == Pushed::error) return nullptr;
    if (pushed == Pushed::not_plain) Py_RETURN_NOTIMPLEMENTED;
  }
  for (Py_ssize_t i = nargs; i < n; ++i) {  // the schema's defaults (trailing arguments only)
    if (!params[i].default_value()) {
      PyErr_Format(PyExc_TypeError, "flashattn: %s: argument %s is missing", name, params[i].name().c_str());
      return nullptr;
    }
    stack.push_back(*params[i].default_value());
  }
  try {
    const GilReleased no_gil;  // CPU kernels compute for a while; CUDA launches need no Python
    op.callBoxed(&stack);
  } catch (const c10::Error& e) {
    return raise_python(e);
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  return returns_to_python(stack);
}

c10::OperatorHandle operator_named(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
}

// attention(*fwd's arguments, in schema order, all positional) -> fwd's returns
PyObject* attention(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  static const c10::OperatorHandle op = operator_named("flashattn::fwd");
  return call_by_schema(op, "attention", args, nargs);
}

// kvcache(*kvcache's arguments, in schema order, all positional) -> kvcache's returns
PyObject* kvcache(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  static const c10::OperatorHandle op = operator_named("flashattn::kvcache");
  return call_by_schema(op, "kvcache", args, nargs);
}

PyMethodDef kMethods[] = {
    {"attention", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&attention)), METH_FASTCALL,
     "attention(*args) -> (out, lse): torch.ops.flashattn.fwd with its arguments in schema order, without\n"
     "__torch_function__ handling; NotImplemented when a tensor argument is not a plain torch.Tensor."},
    {"kvcache", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&kvcache)), METH_FASTCALL,
     "kvcache(*args) -> (out, lse): torch.ops.flashattn.kvcache with its arguments in schema order, without\n"
     "__torch_function__ handling; NotImplemented when a tensor argument is not a plain torch.Tensor."},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

int add_fast_calls(PyObject* module) { return PyModule_AddFunctions(module, kMethods); }

}  // namespace flashattn::torch_ops
