// flashattn._C, the nanobind side: what Python asks of the library outside the operators (the kernel
// families of this build, whether CUDA is there, the enum codes) and the operators' switches. The
// attention calls themselves are PyTorch operators registered in C++ (torch_ops.cpp, the same module).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstddef>
#include <string>

#include "backend/testing.hpp"
#include "flashattn/flashattn.hpp"
#include "torch_ops.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// A test knob's value by name (backend/testing.hpp's tables); any other name is a ValueError that
// names `what` and the choices.
template <class Value, std::size_t N>
Value knob_value(const char* what, const std::string& name, const flashattn::testing::Named<Value> (&table)[N]) {
  if (const Value* value = flashattn::testing::value_named(table, name)) return *value;
  throw nb::value_error(
      (std::string(what) + ": \"" + name + "\" is not one of " + flashattn::testing::names_of(table)).c_str());
}

void set_kvcache_route(const std::string& route) {
  flashattn::testing::set_kvcache_route(knob_value("route", route, flashattn::testing::kKVCacheRouteNames));
}

void set_decode_loads(const std::string& loads) {
  flashattn::testing::set_decode_loads(knob_value("loads", loads, flashattn::testing::kDecodeLoadsNames));
}

}  // namespace

NB_MODULE(_C, m) {
  using namespace flashattn;
  m.doc() = "flashattn: the library's kernel families and codes; the attention operators are torch.ops.flashattn";

  m.def("families", &families, "The kernel families of this build, in the order path=\"auto\" tries them.");
  m.def("cuda_available", &cuda_available, "True when the library was built with CUDA and a CUDA device is visible.");
  m.def("set_poison_outputs", &torch_ops::set_poison_outputs, "on"_a,
        "Testing aid: the operators fill their outputs with NaN before the kernel runs.");
  m.def("set_skip_library_calls", &torch_ops::set_skip_library_calls, "on"_a,
        "Testing aid: the operators allocate their outputs but do not call the library.");
  m.def("set_late_gradients", &torch_ops::set_late_gradients, "on"_a,
        "Timing aid: False allocates the backward's gradients before the library call instead of after its "
        "first launch.");
  m.def("set_kvcache_route", &set_kvcache_route, "route"_a,
        "Testing aid: where the GPU's KV-cache call attends: \"auto\" (the forward from 128 query rows), "
        "\"forward\" (wherever it can), \"decode\" (always the decode kernel).");
  m.def("set_decode_loads", &set_decode_loads, "loads"_a,
        "Testing aid: how the GPU decode kernel loads K/V: \"auto\" (its own choice), \"cp_async\" (16-byte "
        "chunks by every thread), \"tma\" (TMA boxes; sm_90), \"producer_cp_async\" (16-byte chunks by a producer "
        "warpgroup; sm_90).");
  m.def("last_error_code", &torch_ops::last_error_code,
        "The StatusCode of the last error a flashattn operator raised on this thread.");

  if (torch_ops::add_fast_calls(m.ptr()) != 0) throw nb::python_error();

  // The codes of the C++ enums, so Python never hard-codes them.
  m.attr("STATUS_OK") = static_cast<int>(StatusCode::ok);
  m.attr("STATUS_INVALID_ARGUMENT") = static_cast<int>(StatusCode::invalid_argument);
  m.attr("STATUS_NOT_SUPPORTED") = static_cast<int>(StatusCode::not_supported);
  m.attr("STATUS_CUDA_ERROR") = static_cast<int>(StatusCode::cuda_error);
  m.attr("STATUS_INTERNAL") = static_cast<int>(StatusCode::internal);
}
