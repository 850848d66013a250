// CPU backend entry points: the tiled online-softmax algorithm (forward, backward by
// recomputation, and the KV-cache call), and the family that offers them to select(). Params are validated; memory
// beyond the outputs is O(threads × tile).
#pragma once

#include "backend/family.hpp"

namespace flashattn::cpu {

const Family& family();

Status forward(const FwdParams& params);
Status backward(const BwdParams& params);
// The KV-cache call (kvcache.cpp): append, rotate, attend; its workspace is the rotated q.
Status kvcache(const KVCacheParams& params);
std::size_t kvcache_workspace_bytes(const KVCacheParams& params);
// Writes 0 to the rows of `count` packed outputs that no sequence covers (params.hpp's PackedRows).
Status zero_rows_outside(const PackedRows* rows, int count);

}  // namespace flashattn::cpu
