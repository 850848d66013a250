// CPU backend entry points: the tiled online-softmax algorithm (forward, and backward by
// recomputation). Params are validated; memory beyond the outputs is O(threads × tile).
#pragma once

#include "api/params.hpp"

namespace flashattn::cpu {

Status forward(const FwdParams& params);
Status backward(const BwdParams& params);

}  // namespace flashattn::cpu
