// The C ABI: converts the flat fa_args into the C++ argument structs and reports Status codes.
#include "flashattn/flashattn_c.h"

#include <cstring>
#include <string>

#include "flashattn/flashattn.hpp"

namespace flashattn {
namespace {

TensorView view_of(const fa_tensor& t) {
  TensorView v;
  v.data = t.data;
  v.dtype = static_cast<DType>(t.dtype);
  v.device = static_cast<Device>(t.device);
  v.rank = t.rank < 0 || t.rank > TensorView::kMaxRank ? -1 : t.rank;
  for (int i = 0; i < TensorView::kMaxRank; ++i) {
    v.shape[i] = t.shape[i];
    v.stride[i] = t.stride[i];
  }
  return v;
}

void fill_common(const fa_args& a, AttentionArgs* c) {
  c->q = view_of(a.q);
  c->k = view_of(a.k);
  c->v = view_of(a.v);
  c->cu_seqlens_q = view_of(a.cu_seqlens_q);
  c->cu_seqlens_k = view_of(a.cu_seqlens_k);
  c->max_seqlen_q = a.max_seqlen_q;
  c->max_seqlen_k = a.max_seqlen_k;
  if (a.has_softmax_scale) c->softmax_scale = a.softmax_scale;
  c->causal = a.causal != 0;
  c->window_left = a.window_left;
  c->window_right = a.window_right;
  c->softcap = a.softcap;
  c->stream = a.stream;
}

ForwardArgs forward_args(const fa_args& a) {
  ForwardArgs f;
  fill_common(a, &f);
  f.out = view_of(a.out);
  f.lse = view_of(a.lse);
  f.workspace = a.workspace;
  f.workspace_bytes = a.workspace_bytes;
  return f;
}

BackwardArgs backward_args(const fa_args& a) {
  BackwardArgs b;
  fill_common(a, &b);
  b.out = view_of(a.out);
  b.lse = view_of(a.lse);
  b.dout = view_of(a.dout);
  b.dq = view_of(a.dq);
  b.dk = view_of(a.dk);
  b.dv = view_of(a.dv);
  b.deterministic = a.deterministic != 0;
  b.workspace = a.workspace;
  b.workspace_bytes = a.workspace_bytes;
  return b;
}

int report(const Status& s, char* msg, size_t cap) {
  if (msg != nullptr && cap > 0) {
    size_t n = s.message.size() < cap - 1 ? s.message.size() : cap - 1;
    std::memcpy(msg, s.message.data(), n);
    msg[n] = '\0';
  }
  return static_cast<int>(s.code);
}

Status null_args() { return Status::invalid("args: null pointer"); }

}  // namespace
}  // namespace flashattn

using namespace flashattn;

extern "C" {

int fa_forward(const fa_args* a, char* msg, size_t cap) {
  return report(a ? forward(forward_args(*a)) : null_args(), msg, cap);
}
int fa_backward(const fa_args* a, char* msg, size_t cap) {
  return report(a ? backward(backward_args(*a)) : null_args(), msg, cap);
}
int fa_forward_workspace_size(const fa_args* a, size_t* bytes, char* msg, size_t cap) {
  return report(a ? forward_workspace_size(forward_args(*a), bytes) : null_args(), msg, cap);
}
int fa_backward_workspace_size(const fa_args* a, size_t* bytes, char* msg, size_t cap) {
  return report(a ? backward_workspace_size(backward_args(*a), bytes) : null_args(), msg, cap);
}
const char* fa_forward_path(const fa_args* a) {
  static thread_local std::string path;
  path = a ? forward_path(forward_args(*a)) : "";
  return path.c_str();
}
const char* fa_backward_path(const fa_args* a) {
  static thread_local std::string path;
  path = a ? backward_path(backward_args(*a)) : "";
  return path.c_str();
}
int fa_cuda_available(void) { return cuda_available() ? 1 : 0; }

}  // extern "C"
