// CPU backend entry points: the tiled online-softmax algorithm (forward, and backward by
// recomputation), and the family that offers them to select(). Params are validated; memory
// beyond the outputs is O(threads × tile).
#pragma once

#include "backend/family.hpp"

namespace flashattn::cpu {

const Family& family();

Status forward(const FwdParams& params);
Status backward(const BwdParams& params);

}  // namespace flashattn::cpu
