// CUDA backend entry points, as select() sees them. Each *_check says whether the compiled kernels
// cover the params (ok) or why not; select() calls it, so supports() and run cannot disagree.
// When the library is built without CUDA, these report not_supported.
#pragma once

#include <cstddef>

#include "api/params.hpp"

namespace flashattn::cuda {

bool device_available();

Status sm80_forward_check(const FwdParams& params);
Status sm80_forward(const FwdParams& params);

Status sm80_backward_check(const BwdParams& params);
std::size_t sm80_backward_workspace(const BwdParams& params);
Status sm80_backward(const BwdParams& params);

}  // namespace flashattn::cuda
