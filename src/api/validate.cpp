#include "api/validate.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "api/status_try.hpp"

namespace flashattn {
namespace {

constexpr int64_t kMaxHeadDim = 256;
constexpr int64_t kHeadDimMultiple = 8;

// Builds a Status message. Numbers go through std::to_string, not iostreams: messages must not
// depend on the caller's global C++ locale (digit grouping), and a process may hold more than one
// copy of the iostreams machinery (a Python extension built against one libstdc++ loaded beside
// another: number formatting through Message crashed there on the H200 machine).
class Message {
 public:
  Message& operator<<(const char* s) {
    text_ += s;
    return *this;
  }
  Message& operator<<(const std::string& s) {
    text_ += s;
    return *this;
  }
  template <class Int, class = std::enable_if_t<std::is_integral_v<Int>>>
  Message& operator<<(Int n) {
    text_ += std::to_string(n);
    return *this;
  }
  const std::string& str() const { return text_; }

 private:
  std::string text_;
};

std::string shape_str(const TensorView& t) {
  Message s;
  s << "[";
  for (int i = 0; i < t.rank; ++i) s << (i ? ", " : "") << t.shape[i];
  s << "]";
  return s.str();
}

// Checks what every tensor argument must satisfy: rank, non-negative sizes, a data pointer when
// it holds elements, dtype, device, last dimension contiguous, non-negative strides.
Status check_view(const char* name, const TensorView& t, int rank, DType dtype, Device device) {
  Message m;
  if (t.rank != rank) {
    m << name << ": rank " << t.rank << ", expected " << rank;
    return Status::invalid(m.str());
  }
  for (int i = 0; i < rank; ++i) {
    if (t.shape[i] < 0) {
      m << name << ": negative size " << t.shape[i] << " in dimension " << i << " of shape " << shape_str(t);
      return Status::invalid(m.str());
    }
    if (t.stride[i] < 0) {
      m << name << ": negative stride " << t.stride[i] << " in dimension " << i;
      return Status::invalid(m.str());
    }
  }
  if (t.dtype != dtype) {
    m << name << ": dtype " << to_string(t.dtype) << ", expected " << to_string(dtype);
    return Status::invalid(m.str());
  }
  if (t.device != device) {
    m << name << ": on " << to_string(t.device) << ", expected " << to_string(device) << " (as q)";
    return Status::invalid(m.str());
  }
  if (t.numel() > 0) {
    // The element offsets of the view must fit in int64 (every backend's indexing relies on it).
    int64_t last = 0, term = 0;
    for (int i = 0; i < rank; ++i) {
      if (__builtin_mul_overflow(t.shape[i] - 1, t.stride[i], &term) || __builtin_add_overflow(last, term, &last)) {
        m << name << ": shape " << shape_str(t) << " with its strides spans more than 2^63 elements";
        return Status::invalid(m.str());
      }
    }
    if (t.data == nullptr) {
      m << name << ": data pointer is null for shape " << shape_str(t);
      return Status::invalid(m.str());
    }
    if (t.shape[rank - 1] > 1 && t.stride[rank - 1] != 1) {
      m << name << ": last dimension must be contiguous (stride 1), got stride " << t.stride[rank - 1];
      return Status::invalid(m.str());
    }
  }
  return Status::success();
}

Status check_shape(const char* name, const TensorView& t, std::initializer_list<int64_t> want,
                   const char* want_desc) {
  int i = 0;
  for (int64_t w : want) {
    if (t.shape[i] != w) {
      Message m;
      m << name << ": shape " << shape_str(t) << ", expected " << want_desc << " = [";
      int j = 0;
      for (int64_t x : want) m << (j++ ? ", " : "") << x;
      m << "]";
      return Status::invalid(m.str());
    }
    ++i;
  }
  return Status::success();
}

Status check_head_dim(const char* what, int64_t d) {
  if (d < kHeadDimMultiple || d > kMaxHeadDim || d % kHeadDimMultiple != 0) {
    Message m;
    m << what << " = " << d << " is not supported: head dims must be a multiple of " << kHeadDimMultiple
      << " between " << kHeadDimMultiple << " and " << kMaxHeadDim;
    return Status::unsupported(m.str());
  }
  return Status::success();
}

// Row and head strides of a [.., rows, heads, d] view (rank 3 or 4).
void strides_of(const TensorView& t, bool varlen, int64_t* batch, int64_t* row, int64_t* head) {
  int o = varlen ? 0 : 1;
  *batch = varlen ? 0 : t.stride[0];
  *row = t.stride[o];
  *head = t.stride[o + 1];
}

// Reads a host-side cu_seqlens array and checks it: starts ≥ 0, non-decreasing, ends within the
// packed tensor, no sequence longer than the stated maximum.
Status check_cu_seqlens(const char* name, const TensorView& cu, int64_t total, int64_t max_seqlen,
                        const char* max_name) {
  const int32_t* c = static_cast<const int32_t*>(cu.data);
  int64_t n = cu.shape[0];
  Message m;
  if (c[0] < 0) {
    m << name << "[0] = " << c[0] << " is negative";
    return Status::invalid(m.str());
  }
  for (int64_t i = 1; i < n; ++i) {
    int64_t a = c[(i - 1) * cu.stride[0]], b = c[i * cu.stride[0]];
    if (b < a) {
      m << name << " is not non-decreasing: " << name << "[" << i << "] = " << b << " < " << name << "["
        << i - 1 << "] = " << a;
      return Status::invalid(m.str());
    }
    if (b - a > max_seqlen) {
      m << name << ": sequence " << i - 1 << " has length " << b - a << " > " << max_name << " = " << max_seqlen;
      return Status::invalid(m.str());
    }
  }
  if (c[(n - 1) * cu.stride[0]] > total) {
    m << name << "[" << n - 1 << "] = " << c[(n - 1) * cu.stride[0]] << " exceeds the " << total
      << " packed rows of the tensor";
    return Status::invalid(m.str());
  }
  return Status::success();
}

// The options, checked and normalized into p->options (see backend/params.hpp): the default
// scale filled in, causal folded into window_right = 0, and a window side that reaches past every
// sequence made unbounded (−1). That last rule is the one place windows are bounded: a visible
// range needs left < seqlen_k and right < seqlen_q, so afterwards no window exceeds the lengths
// and no backend's mask arithmetic can overflow, whatever the caller passed.
Status normalized_options(const AttentionOptions& o, FwdParams* p) {
  const float scale = o.softmax_scale ? *o.softmax_scale : 1.f / std::sqrt(static_cast<float>(p->hdim_qk));
  if (!std::isfinite(scale)) {
    return Status::invalid("softmax_scale = " + std::to_string(scale) + " is not finite");
  }
  if (!std::isfinite(o.softcap) || o.softcap < 0.f) {
    return Status::invalid("softcap = " + std::to_string(o.softcap) + " must be finite and >= 0 (0: off)");
  }
  if (o.window_left < -1) return Status::invalid("window_left = " + std::to_string(o.window_left) + " must be >= -1 (-1: unbounded)");
  if (o.window_right < -1) return Status::invalid("window_right = " + std::to_string(o.window_right) + " must be >= -1 (-1: unbounded)");
  if (o.causal && o.window_right > 0) {
    return Status::invalid("window_right = " + std::to_string(o.window_right) +
                           " conflicts with causal = true (causal means window_right = 0)");
  }
  AttentionOptions n = o;
  n.softmax_scale = scale;
  if (n.causal) n.window_right = 0;
  if (n.window_left >= p->seqlen_k) n.window_left = -1;
  if (!n.causal && n.window_right >= p->seqlen_q) n.window_right = -1;
  p->options = n;
  return Status::success();
}

// Everything forward and backward share: q, k, v, varlen offsets, options.
Status common_params(const AttentionArgs& a, FwdParams* p) {
  const bool varlen = !a.cu_seqlens_q.empty() || !a.cu_seqlens_k.empty();
  const int rank = varlen ? 3 : 4;
  const DType dt = a.q.dtype;
  const Device dev = a.q.device;
  if (dt != DType::f32 && dt != DType::f16 && dt != DType::bf16) {
    return Status::invalid(std::string("q: dtype ") + to_string(dt) + " is not one of f32, f16, bf16");
  }
  if (a.q.rank != rank) {
    Message m;
    m << "q: rank " << a.q.rank << ", expected " << rank
      << (varlen ? " (varlen: [total_q, heads, d])" : " ([batch, seqlen, heads, d]; set cu_seqlens for varlen)");
    return Status::invalid(m.str());
  }
  FLASHATTN_TRY(check_view("q", a.q, rank, dt, dev));
  FLASHATTN_TRY(check_view("k", a.k, rank, dt, dev));
  FLASHATTN_TRY(check_view("v", a.v, rank, dt, dev));

  const int o = varlen ? 0 : 1;  // index of the rows dimension
  p->dtype = dt;
  p->device = dev;
  p->heads_q = a.q.shape[o + 1];
  p->heads_kv = a.k.shape[o + 1];
  p->hdim_qk = a.q.shape[o + 2];
  p->hdim_v = a.v.shape[o + 2];

  if (varlen) {
    if (a.cu_seqlens_q.empty() || a.cu_seqlens_k.empty()) {
      return Status::invalid(std::string(a.cu_seqlens_q.empty() ? "cu_seqlens_q" : "cu_seqlens_k") +
                             ": missing; varlen needs both cu_seqlens_q and cu_seqlens_k");
    }
    FLASHATTN_TRY(check_view("cu_seqlens_q", a.cu_seqlens_q, 1, DType::i32, dev));
    FLASHATTN_TRY(check_view("cu_seqlens_k", a.cu_seqlens_k, 1, DType::i32, dev));
    if (a.cu_seqlens_q.shape[0] < 1) return Status::invalid("cu_seqlens_q: needs batch + 1 >= 1 entries, got 0");
    if (a.cu_seqlens_k.shape[0] != a.cu_seqlens_q.shape[0]) {
      Message m;
      m << "cu_seqlens_k: " << a.cu_seqlens_k.shape[0] << " entries, expected " << a.cu_seqlens_q.shape[0]
        << " (as cu_seqlens_q)";
      return Status::invalid(m.str());
    }
    if (a.max_seqlen_q < 0) return Status::invalid("max_seqlen_q = " + std::to_string(a.max_seqlen_q) + " is negative");
    if (a.max_seqlen_k < 0) return Status::invalid("max_seqlen_k = " + std::to_string(a.max_seqlen_k) + " is negative");
    p->batch = a.cu_seqlens_q.shape[0] - 1;
    p->seqlen_q = a.max_seqlen_q;
    p->seqlen_k = a.max_seqlen_k;
    p->total_q = a.q.shape[0];
    p->total_k = a.k.shape[0];
    FLASHATTN_TRY(check_shape("k", a.k, {p->total_k, p->heads_kv, p->hdim_qk}, "[total_k, heads_kv, hdim_qk of q]"));
    FLASHATTN_TRY(check_shape("v", a.v, {p->total_k, p->heads_kv, p->hdim_v}, "[total_k of k, heads_kv of k, hdim_v]"));
    if (dev == Device::cpu) {  // host offsets can be checked; device ones are the caller's contract
      FLASHATTN_TRY(check_cu_seqlens("cu_seqlens_q", a.cu_seqlens_q, p->total_q, a.max_seqlen_q, "max_seqlen_q"));
      FLASHATTN_TRY(check_cu_seqlens("cu_seqlens_k", a.cu_seqlens_k, p->total_k, a.max_seqlen_k, "max_seqlen_k"));
    }
    p->cu_seqlens_q = static_cast<const int32_t*>(a.cu_seqlens_q.data);
    p->cu_seqlens_k = static_cast<const int32_t*>(a.cu_seqlens_k.data);
  } else {
    p->batch = a.q.shape[0];
    p->seqlen_q = a.q.shape[1];
    p->seqlen_k = a.k.shape[1];
    // Views may broadcast (stride 0), so the sizes alone can exceed what any memory holds: the
    // row and element counts every backend indexes with must still fit in int64.
    const int64_t dim = std::max(p->hdim_qk, p->hdim_v);
    int64_t row_elems = 0, elems = 0;
    if (__builtin_mul_overflow(p->batch, p->seqlen_q, &p->total_q) ||
        __builtin_mul_overflow(p->batch, p->seqlen_k, &p->total_k) ||
        __builtin_mul_overflow(std::max(p->heads_q, p->heads_kv), dim, &row_elems) ||
        __builtin_mul_overflow(std::max(p->total_q, p->total_k), row_elems, &elems)) {
      Message m;
      m << "q: shape " << shape_str(a.q) << " and k: shape " << shape_str(a.k) << " hold more than 2^63 elements";
      return Status::invalid(m.str());
    }
    FLASHATTN_TRY(check_shape("k", a.k, {p->batch, p->seqlen_k, p->heads_kv, p->hdim_qk},
                       "[batch of q, seqlen_k, heads_kv, hdim_qk of q]"));
    FLASHATTN_TRY(check_shape("v", a.v, {p->batch, p->seqlen_k, p->heads_kv, p->hdim_v},
                       "[batch of q, seqlen_k of k, heads_kv of k, hdim_v]"));
  }

  FLASHATTN_TRY(check_head_dim("hdim_qk (last dimension of q, k)", p->hdim_qk));
  FLASHATTN_TRY(check_head_dim("hdim_v (last dimension of v)", p->hdim_v));
  if (p->heads_kv == 0 || p->heads_q % p->heads_kv != 0) {
    Message m;
    m << "heads: heads_q = " << p->heads_q << " is not a multiple of heads_kv = " << p->heads_kv << " (k, v)";
    return Status::invalid(m.str());
  }

  strides_of(a.q, varlen, &p->q_batch_stride, &p->q_row_stride, &p->q_head_stride);
  strides_of(a.k, varlen, &p->k_batch_stride, &p->k_row_stride, &p->k_head_stride);
  strides_of(a.v, varlen, &p->v_batch_stride, &p->v_row_stride, &p->v_head_stride);
  p->q = a.q.data;
  p->k = a.k.data;
  p->v = a.v.data;

  FLASHATTN_TRY(normalized_options(a.options, p));
  p->stream = a.stream;
  return Status::success();
}

// out-shaped tensors ([.., rows_q, heads_q, hdim_v]) and their strides.
Status out_like(const char* name, const TensorView& t, const FwdParams& p, int64_t d, const char* ddesc,
                int64_t* bs, int64_t* rs, int64_t* hs) {
  const bool varlen = p.is_varlen();
  FLASHATTN_TRY(check_view(name, t, varlen ? 3 : 4, p.dtype, p.device));
  if (varlen) {
    FLASHATTN_TRY(check_shape(name, t, {p.total_q, p.heads_q, d}, ddesc));
  } else {
    FLASHATTN_TRY(check_shape(name, t, {p.batch, p.seqlen_q, p.heads_q, d}, ddesc));
  }
  strides_of(t, varlen, bs, rs, hs);
  return Status::success();
}

Status lse_params(const char* name, const TensorView& t, FwdParams* p) {
  const bool varlen = p->is_varlen();
  FLASHATTN_TRY(check_view(name, t, varlen ? 2 : 3, DType::f32, p->device));
  if (varlen) {
    FLASHATTN_TRY(check_shape(name, t, {p->heads_q, p->total_q}, "[heads_q, total_q]"));
    p->lse_batch_stride = 0;
    p->lse_head_stride = t.stride[0];
  } else {
    FLASHATTN_TRY(check_shape(name, t, {p->batch, p->heads_q, p->seqlen_q}, "[batch, heads_q, seqlen_q]"));
    p->lse_batch_stride = t.stride[0];
    p->lse_head_stride = t.stride[1];
  }
  p->lse = static_cast<float*>(t.data);
  return Status::success();
}

}  // namespace

Status to_params(const ForwardArgs& a, FwdParams* p) {
  *p = FwdParams{};
  FLASHATTN_TRY(common_params(a, p));
  if (a.out.empty()) return Status::invalid("out: missing (the output tensor is required)");
  FLASHATTN_TRY(out_like("out", a.out, *p, p->hdim_v, "[batch, seqlen_q, heads_q, hdim_v]", &p->o_batch_stride,
                  &p->o_row_stride, &p->o_head_stride));
  p->out = a.out.data;
  if (!a.lse.empty()) FLASHATTN_TRY(lse_params("lse", a.lse, p));
  p->workspace = a.workspace;
  p->workspace_bytes = a.workspace_bytes;
  return Status::success();
}

Status to_params(const BackwardArgs& a, BwdParams* p) {
  *p = BwdParams{};
  FLASHATTN_TRY(common_params(a, p));
  const char* out_desc = "[batch, seqlen_q, heads_q, hdim_v]";
  if (a.out.empty()) return Status::invalid("out: missing (the forward's output is required)");
  if (a.dout.empty()) return Status::invalid("dout: missing (the incoming gradient is required)");
  if (a.lse.empty()) return Status::invalid("lse: missing (the forward's lse is required)");
  if (a.dq.empty()) return Status::invalid("dq: missing");
  if (a.dk.empty()) return Status::invalid("dk: missing");
  if (a.dv.empty()) return Status::invalid("dv: missing");
  FLASHATTN_TRY(out_like("out", a.out, *p, p->hdim_v, out_desc, &p->o_batch_stride, &p->o_row_stride, &p->o_head_stride));
  FLASHATTN_TRY(out_like("dout", a.dout, *p, p->hdim_v, out_desc, &p->do_batch_stride, &p->do_row_stride,
                  &p->do_head_stride));
  FLASHATTN_TRY(out_like("dq", a.dq, *p, p->hdim_qk, "[batch, seqlen_q, heads_q, hdim_qk] (as q)", &p->dq_batch_stride,
                  &p->dq_row_stride, &p->dq_head_stride));
  FLASHATTN_TRY(lse_params("lse", a.lse, p));
  const bool varlen = p->is_varlen();
  FLASHATTN_TRY(check_view("dk", a.dk, varlen ? 3 : 4, p->dtype, p->device));
  FLASHATTN_TRY(check_view("dv", a.dv, varlen ? 3 : 4, p->dtype, p->device));
  for (int i = 0; i < a.k.rank; ++i) {
    if (a.dk.shape[i] != a.k.shape[i]) return Status::invalid("dk: shape " + shape_str(a.dk) + ", expected that of k " + shape_str(a.k));
    if (a.dv.shape[i] != a.v.shape[i]) return Status::invalid("dv: shape " + shape_str(a.dv) + ", expected that of v " + shape_str(a.v));
  }
  strides_of(a.dk, varlen, &p->dk_batch_stride, &p->dk_row_stride, &p->dk_head_stride);
  strides_of(a.dv, varlen, &p->dv_batch_stride, &p->dv_row_stride, &p->dv_head_stride);
  p->out = a.out.data;
  p->dout = a.dout.data;
  p->dq = a.dq.data;
  p->dk = a.dk.data;
  p->dv = a.dv.data;
  p->deterministic = a.deterministic;
  p->workspace = a.workspace;
  p->workspace_bytes = a.workspace_bytes;
  return Status::success();
}

// The KV-cache entry's rules: not written yet (the decode issue's first step), so every call is
// refused by name rather than run on unchecked arguments.
Status to_params(const KVCacheArgs&, KVCacheParams*) {
  return Status::unsupported("kvcache_forward: the KV-cache entry is not implemented yet");
}

}  // namespace flashattn
