// The C ABI's structs (flashattn_c.h) from the C++ API's, for the tests that call through it.
#pragma once

#include "flashattn/flashattn.hpp"
#include "flashattn/flashattn_c.h"

namespace fa_test {

inline fa_tensor to_c(const flashattn::TensorView& t) {
  fa_tensor c{};
  c.data = t.data;
  c.dtype = static_cast<int32_t>(t.dtype);
  c.device = static_cast<int32_t>(t.device);
  c.rank = t.rank;
  for (int i = 0; i < flashattn::TensorView::kMaxRank; ++i) c.shape[i] = t.shape[i], c.stride[i] = t.stride[i];
  return c;
}

// *c = the options (its struct_size and defaults from fa_options_init).
inline void to_c(const flashattn::AttentionOptions& o, fa_options* c) {
  fa_options_init(c);
  c->has_softmax_scale = o.softmax_scale.has_value();
  c->softmax_scale = o.softmax_scale.value_or(0.f);
  c->causal = o.causal;
  c->window_left = o.window_left;
  c->window_right = o.window_right;
  c->softcap = o.softcap;
}

}  // namespace fa_test
