// The flashattn::fwd operator called from C++ through PyTorch's dispatcher (torch_ops.cpp), for the
// CPython fast-call entry point (fast_call.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string_view>
#include <tuple>

namespace flashattn::torch_ops {

// fwd's scalar arguments, in the schema's order.
struct FwdCall {
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;
  double softmax_scale = 0;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  double softcap = 0;
  bool deterministic = false;
  std::string_view path = "auto";
};

// (out, lse) of torch.ops.flashattn.fwd: dispatched from the Autograd key down, as a Python call of
// the operator would be.
std::tuple<at::Tensor, at::Tensor> call_fwd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            const std::optional<at::Tensor>& cu_seqlens_q,
                                            const std::optional<at::Tensor>& cu_seqlens_k, const FwdCall& c);

}  // namespace flashattn::torch_ops
