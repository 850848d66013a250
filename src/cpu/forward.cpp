#include "cpu/cpu_backend.hpp"
namespace flashattn::cpu {
Status forward(const FwdParams&) { return Status::unsupported("cpu forward: not yet implemented"); }
}  // namespace flashattn::cpu
