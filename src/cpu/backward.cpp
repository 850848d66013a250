#include "cpu/cpu_backend.hpp"
namespace flashattn::cpu {
Status backward(const BwdParams&) { return Status::unsupported("cpu backward: not yet implemented"); }
}  // namespace flashattn::cpu
