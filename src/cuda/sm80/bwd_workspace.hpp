// The backward's workspace (its layout: bwd_params.cuh) and the device parameters built over it,
// planned on the host from the validated BwdParams and a tile's block sizes. The sm80 backward uses
// them with its tile (bwd_plan.cu); the sm90 backward with its own, sharing the pre/postprocess
// kernels (bwd_launch.hpp) that read and write this layout.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/params.hpp"
#include "cuda/sm80/bwd_params.cuh"
#include "cuda/sm80/bwd_split.hpp"

namespace flashattn::cuda::sm80 {

// Byte offsets of the sub-buffers within the workspace, and its size.
struct WorkspaceLayout {
  int64_t rows = 0;  // R, padded query rows per head
  std::size_t dq_accum = 0, lse_log2 = 0, dsum = 0, counters = 0, tail_dkv = 0, tail_done = 0, bytes = 0;
  BwdSplit split;
};

// For query tiles of block_m rows, key blocks of block_n and the head dim of the instance.
WorkspaceLayout workspace_layout(const BwdParams& p, int head_dim, int block_m, int block_n, const BwdSplit& split);

// Every tensor of the call 16-byte aligned with strides of whole 16 bytes (the pre/postprocess's and
// the kernels' vector accesses); not_supported naming `who` and the tensor otherwise.
Status check_all_aligned(const BwdParams& p, const char* who);

// Everything but the grid order (key_blocks_outer, the sm80 tile's choice), over p.workspace.
BwdKernelParams kernel_params(const BwdParams& p, int head_dim, int block_m, int block_n, const WorkspaceLayout& w);

// dq, dk, dv into k (gradient_pointers). Called after the preprocess, which writes only the
// workspace: a caller that allocates the gradients late does so while the GPU already works.
Status gradients_into(const BwdParams& p, BwdKernelParams* k);

}  // namespace flashattn::cuda::sm80
