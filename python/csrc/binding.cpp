// flashattn._C, the nanobind side: what Python asks of the library outside the operators (the kernel
// families of this build, whether CUDA is there, the enum codes) and the operators' switches. The
// attention calls themselves are PyTorch operators registered in C++ (torch_ops.cpp, the same module).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstddef>
#include <string>
#include <utility>

#include "backend/testing.hpp"
#include "flashattn/flashattn.hpp"
#include "torch_ops.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// A test knob's value by name (backend/testing.hpp): `choices` pairs each name with its value; any
// other name is a ValueError that names `what` and the choices.
template <class Value, std::size_t N>
Value knob_value(const char* what, const std::string& name, const std::pair<const char*, Value> (&choices)[N]) {
  std::string names;
  for (const auto& [choice, value] : choices) {
    if (name == choice) return value;
    names += std::string(names.empty() ? "" : ", ") + "\"" + choice + "\"";
  }
  throw nb::value_error((std::string(what) + ": \"" + name + "\" is not one of " + names).c_str());
}

// The decode family's KV-cache route by name: "auto", "forward", "decode".
void set_kvcache_route(const std::string& route) {
  using flashattn::testing::KVCacheRoute;
  static const std::pair<const char*, KVCacheRoute> kChoices[] = {
      {"auto", KVCacheRoute::automatic}, {"forward", KVCacheRoute::forward}, {"decode", KVCacheRoute::decode}};
  flashattn::testing::set_kvcache_route(knob_value("route", route, kChoices));
}

// How the GPU decode kernel loads K/V by name: "auto", "cp_async", "tma", "gather".
void set_decode_loads(const std::string& loads) {
  using flashattn::testing::DecodeLoads;
  static const std::pair<const char*, DecodeLoads> kChoices[] = {{"auto", DecodeLoads::automatic},
                                                                  {"cp_async", DecodeLoads::cp_async},
                                                                  {"tma", DecodeLoads::tma},
                                                                  {"gather", DecodeLoads::gather}};
  flashattn::testing::set_decode_loads(knob_value("loads", loads, kChoices));
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
  m.def("set_kvcache_route", &set_kvcache_route, "route"_a,
        "Testing aid: where the GPU's KV-cache call attends: \"auto\" (the forward from 128 query rows), "
        "\"forward\" (wherever it can), \"decode\" (always the decode kernel).");
  m.def("set_decode_loads", &set_decode_loads, "loads"_a,
        "Testing aid: how the GPU decode kernel loads K/V: \"auto\" (its own choice), \"cp_async\" (16-byte "
        "chunks), \"tma\" (TMA boxes; sm_90), \"gather\" (pages under a key block copied by the TMA kernel's "
        "producer warp with cp.async; sm_90).");
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
