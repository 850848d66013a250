// The C ABI: converts the versioned flat fa_args into the C++ argument structs and reports Status
// codes. Every read of caller memory is bounded by the caller's struct_size.
#include "flashattn/flashattn_c.h"

#include <cstring>
#include <string>

#include "backend/status_try.hpp"
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

// *out = the caller's struct as this library lays it out: the first struct_size bytes from
// `user`, the defaults `init` gives after them. A larger struct (a newer caller) is fine while the
// fields this library does not know are all zero.
template <class T>
Status read_versioned(const char* name, const T* user, std::size_t min_size, void (*init)(T*), T* out) {
  init(out);
  if (user == nullptr) return Status::success();
  const std::size_t size = user->struct_size;
  constexpr std::size_t kMaxPlausible = 4096;  // far beyond any layout: an unset struct_size
  if (size < min_size || size > kMaxPlausible) {
    return Status::invalid(std::string(name) + ".struct_size = " + std::to_string(size) + " is not a layout this library knows (" +
                           std::to_string(min_size) + ".." + std::to_string(sizeof(T)) + " bytes; call " + name +
                           "_init, or set it to sizeof)");
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(user);
  for (std::size_t i = sizeof(T); i < size; ++i) {
    if (bytes[i] != 0) {
      return Status::unsupported(std::string(name) + ": set a field at byte " + std::to_string(i) +
                                 " that this library (struct_size " + std::to_string(sizeof(T)) +
                                 ") does not know; update flashattn");
    }
  }
  std::memcpy(out, user, size < sizeof(T) ? size : sizeof(T));
  out->struct_size = sizeof(T);
  return Status::success();
}

Status options_of(const fa_options* user, AttentionOptions* o) {
  fa_options c;
  FLASHATTN_TRY(read_versioned("fa_options", user, FA_OPTIONS_SIZE_V1, fa_options_init, &c));
  if (c.has_softmax_scale) o->softmax_scale = c.softmax_scale;
  o->causal = c.causal != 0;
  o->window_left = c.window_left;
  o->window_right = c.window_right;
  o->softcap = c.softcap;
  return Status::success();
}

Status common_args(const fa_args* user, fa_args* a, AttentionArgs* c) {
  if (user == nullptr) return Status::invalid("args: null pointer");
  FLASHATTN_TRY(read_versioned("fa_args", user, FA_ARGS_SIZE_V1, fa_args_init, a));
  c->q = view_of(a->q);
  c->k = view_of(a->k);
  c->v = view_of(a->v);
  c->cu_seqlens_q = view_of(a->cu_seqlens_q);
  c->cu_seqlens_k = view_of(a->cu_seqlens_k);
  c->max_seqlen_q = a->max_seqlen_q;
  c->max_seqlen_k = a->max_seqlen_k;
  c->block_table = view_of(a->block_table);
  FLASHATTN_TRY(options_of(a->options, &c->options));
  c->path = a->path != nullptr ? a->path : "auto";
  c->stream = a->stream;
  c->zero_rows_outside_sequences = a->zero_rows_outside_sequences != 0;
  return Status::success();
}

Status forward_args(const fa_args* user, ForwardArgs* f) {
  fa_args a;
  FLASHATTN_TRY(common_args(user, &a, f));
  f->out = view_of(a.out);
  f->lse = view_of(a.lse);
  f->workspace = a.workspace;
  f->workspace_bytes = a.workspace_bytes;
  return Status::success();
}

Status backward_args(const fa_args* user, BackwardArgs* b) {
  fa_args a;
  FLASHATTN_TRY(common_args(user, &a, b));
  b->out = view_of(a.out);
  b->lse = view_of(a.lse);
  b->dout = view_of(a.dout);
  b->dq = view_of(a.dq);
  b->dk = view_of(a.dk);
  b->dv = view_of(a.dv);
  b->deterministic = a.deterministic != 0;
  b->workspace = a.workspace;
  b->workspace_bytes = a.workspace_bytes;
  return Status::success();
}

Status kvcache_args(const fa_kvcache_args* user, KVCacheArgs* k) {
  if (user == nullptr) return Status::invalid("args: null pointer");
  fa_kvcache_args a;
  FLASHATTN_TRY(read_versioned("fa_kvcache_args", user, FA_KVCACHE_ARGS_SIZE_V1, fa_kvcache_args_init, &a));
  k->q = view_of(a.q);
  k->k_cache = view_of(a.k_cache);
  k->v_cache = view_of(a.v_cache);
  k->cache_seqlens = view_of(a.cache_seqlens);
  k->block_table = view_of(a.block_table);
  k->cache_batch_idx = view_of(a.cache_batch_idx);
  k->cache_leftpad = view_of(a.cache_leftpad);
  k->k_new = view_of(a.k_new);
  k->v_new = view_of(a.v_new);
  k->rotary_cos = view_of(a.rotary_cos);
  k->rotary_sin = view_of(a.rotary_sin);
  k->rotary_interleaved = a.rotary_interleaved != 0;
  k->out = view_of(a.out);
  k->lse = view_of(a.lse);
  FLASHATTN_TRY(options_of(a.options, &k->options));
  k->num_splits = a.num_splits;
  k->path = a.path != nullptr ? a.path : "auto";
  k->stream = a.stream;
  k->workspace = a.workspace;
  k->workspace_bytes = a.workspace_bytes;
  return Status::success();
}

int report(const Status& s, char* msg, size_t cap) {
  if (msg != nullptr && cap > 0) {
    size_t n = s.message.size() < cap - 1 ? s.message.size() : cap - 1;
    std::memcpy(msg, s.message.data(), n);
    msg[n] = '\0';
  }
  return static_cast<int>(s.code);
}

// Converts the C arguments, then calls fn(cpp_args).
template <class CArgs, class Args, class Fn>
Status call(const CArgs* a, Status (*convert)(const CArgs*, Args*), Fn fn) {
  Args args;
  FLASHATTN_TRY(convert(a, &args));
  return fn(args);
}

}  // namespace
}  // namespace flashattn

using namespace flashattn;

extern "C" {

void fa_options_init(fa_options* o) {
  if (o == nullptr) return;
  *o = fa_options{};
  o->struct_size = sizeof(fa_options);
  o->window_left = -1;
  o->window_right = -1;
}

void fa_args_init(fa_args* a) {
  if (a == nullptr) return;
  *a = fa_args{};
  a->struct_size = sizeof(fa_args);
}

void fa_kvcache_args_init(fa_kvcache_args* a) {
  if (a == nullptr) return;
  *a = fa_kvcache_args{};
  a->struct_size = sizeof(fa_kvcache_args);
}

int fa_kvcache_forward(const fa_kvcache_args* a, char* msg, size_t cap) {
  return report(call(a, kvcache_args, [](const KVCacheArgs& k) { return kvcache_forward(k); }), msg, cap);
}
int fa_kvcache_workspace_size(const fa_kvcache_args* a, size_t* bytes, char* msg, size_t cap) {
  return report(call(a, kvcache_args, [&](const KVCacheArgs& k) { return kvcache_workspace_size(k, bytes); }), msg,
                cap);
}
const char* fa_kvcache_path(const fa_kvcache_args* a) {
  static thread_local std::string path;
  path.clear();
  call(a, kvcache_args, [&](const KVCacheArgs& k) { path = kvcache_path(k); return Status::success(); });
  return path.c_str();
}

int fa_forward(const fa_args* a, char* msg, size_t cap) {
  return report(call(a, forward_args, [](const ForwardArgs& f) { return forward(f); }), msg, cap);
}
int fa_backward(const fa_args* a, char* msg, size_t cap) {
  return report(call(a, backward_args, [](const BackwardArgs& b) { return backward(b); }), msg, cap);
}
int fa_forward_workspace_size(const fa_args* a, size_t* bytes, char* msg, size_t cap) {
  return report(call(a, forward_args, [&](const ForwardArgs& f) { return forward_workspace_size(f, bytes); }), msg,
                cap);
}
int fa_backward_workspace_size(const fa_args* a, size_t* bytes, char* msg, size_t cap) {
  return report(call(a, backward_args, [&](const BackwardArgs& b) { return backward_workspace_size(b, bytes); }),
                msg, cap);
}
const char* fa_forward_path(const fa_args* a) {
  static thread_local std::string path;
  path.clear();
  call(a, forward_args, [&](const ForwardArgs& f) { path = forward_path(f); return Status::success(); });
  return path.c_str();
}
const char* fa_backward_path(const fa_args* a) {
  static thread_local std::string path;
  path.clear();
  call(a, backward_args, [&](const BackwardArgs& b) { path = backward_path(b); return Status::success(); });
  return path.c_str();
}
const char* fa_families(void) {
  static const std::string names = [] {
    std::string s;
    for (const std::string& f : families()) s += (s.empty() ? "" : ",") + f;
    return s;
  }();
  return names.c_str();
}
int fa_cuda_available(void) { return cuda_available() ? 1 : 0; }

}  // extern "C"
