#include "api/validate.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/status_try.hpp"

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

// Whether a view's memory comes with the call (now) or from the gradient allocator after the first
// launch (later: its data must then be null).
enum class Data { now, later };

// Checks what every tensor argument must satisfy: rank, non-negative sizes, a data pointer when
// it holds elements, dtype, device, last dimension contiguous, non-negative strides.
Status check_view(const char* name, const TensorView& t, int rank, DType dtype, Device device, Data data = Data::now) {
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
    if (t.data == nullptr && data == Data::now) {
      m << name << ": data pointer is null for shape " << shape_str(t);
      return Status::invalid(m.str());
    }
    if (t.data != nullptr && data == Data::later) {
      m << name << ": data given with gradient_allocator (which allocates dq, dk and dv: leave their data null)";
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

// Stride i of a view as the params carry it: 0 for an empty view. An empty view addresses nothing, so
// check_view does not bound its strides, and a backend that forms b · stride for every batch or head
// (touching no element) must not overflow on a stride that no element needed.
int64_t addressed_stride(const TensorView& t, int i) { return t.numel() == 0 ? 0 : t.stride[i]; }

// Row and head strides of a [.., rows, heads, d] view (rank 3 or 4).
void strides_of(const TensorView& t, bool varlen, int64_t* batch, int64_t* row, int64_t* head) {
  int o = varlen ? 0 : 1;
  *batch = varlen ? 0 : addressed_stride(t, 0);
  *row = addressed_stride(t, o);
  *head = addressed_stride(t, o + 1);
}

// Reads a host-side cu_seqlens array and checks it: starts ≥ 0, non-decreasing, no sequence longer
// than the stated maximum.
Status check_cu_seqlens(const char* name, const TensorView& cu, int64_t max_seqlen, const char* max_name) {
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
  return Status::success();
}

// A host-side cu_seqlens array of a packed tensor: its last offset lies within the `total` rows.
Status check_cu_seqlens_end(const char* name, const TensorView& cu, int64_t total) {
  const int32_t* c = static_cast<const int32_t*>(cu.data);
  const int64_t n = cu.shape[0];
  Message m;
  if (c[(n - 1) * cu.stride[0]] > total) {
    m << name << "[" << n - 1 << "] = " << c[(n - 1) * cu.stride[0]] << " exceeds the " << total
      << " packed rows of the tensor";
    return Status::invalid(m.str());
  }
  return Status::success();
}

// A paged K/V, the KV-cache call's and the paged forward's alike: k and v page pools [num_pages,
// page_size, heads_kv, d] (d: p->hdim_qk for k) and an int32 block_table [batch, max_pages]. Sets
// heads_kv, hdim_v, k, v and their strides (batch stride = page stride) and the paged geometry
// (params.hpp); *capacity = max_pages · page_size, the most keys a sequence can hold.
Status paged_kv_params(const char* k_name, const TensorView& k, const char* v_name, const TensorView& v,
                       const TensorView& block_table, FwdParams* p, int64_t* capacity) {
  FLASHATTN_TRY(check_view(k_name, k, 4, p->dtype, p->device));
  FLASHATTN_TRY(check_view(v_name, v, 4, p->dtype, p->device));
  p->heads_kv = k.shape[2];
  p->hdim_v = v.shape[3];
  const std::string v_desc = std::string("[num_pages, page_size, heads_kv of ") + k_name + ", hdim_v]";
  FLASHATTN_TRY(check_shape(k_name, k, {k.shape[0], k.shape[1], p->heads_kv, p->hdim_qk},
                            "[num_pages, page_size, heads_kv, hdim_qk of q]"));
  FLASHATTN_TRY(check_shape(v_name, v, {k.shape[0], k.shape[1], p->heads_kv, p->hdim_v}, v_desc.c_str()));
  strides_of(k, false, &p->k_batch_stride, &p->k_row_stride, &p->k_head_stride);
  strides_of(v, false, &p->v_batch_stride, &p->v_row_stride, &p->v_head_stride);
  p->k = k.data;
  p->v = v.data;

  FLASHATTN_TRY(check_view("block_table", block_table, 2, DType::i32, p->device));
  if (block_table.shape[0] != p->batch) {
    Message m;
    m << "block_table: shape " << shape_str(block_table) << ", expected [batch = " << p->batch
      << ", max_pages_per_sequence]";
    return Status::invalid(m.str());
  }
  p->num_pages = k.shape[0];
  p->page_size = k.shape[1];
  p->max_pages = block_table.shape[1];
  p->block_table = static_cast<const int32_t*>(block_table.data);
  p->block_table_batch_stride = addressed_stride(block_table, 0);
  if (p->page_size < 1) {
    return Status::invalid(std::string(k_name) + ": page_size = " + std::to_string(p->page_size) +
                           " (dimension 1 of a paged " + k_name + " " + shape_str(k) + ") must be >= 1");
  }
  if (__builtin_mul_overflow(p->max_pages, p->page_size, capacity)) {
    Message m;
    m << "block_table: " << p->max_pages << " pages of page_size " << p->page_size << " hold more than 2^63 keys";
    return Status::invalid(m.str());
  }
  return Status::success();
}

// The pages sequence b reads with len_k keys (its first ⌈len_k / page_size⌉ block_table entries;
// the rest may hold anything) lie in the pool. Host block tables only: CUDA kernels clamp instead.
Status check_pages_of_sequence(const FwdParams& p, int64_t b, int64_t len_k) {
  const int64_t used = (len_k + p.page_size - 1) / p.page_size;
  for (int64_t j = 0; j < used; ++j) {
    const int64_t page = p.block_table[b * p.block_table_batch_stride + j];
    if (page < 0 || page >= p.num_pages) {
      Message m;
      m << "block_table[" << b << "][" << j << "] = " << page << " is outside the pages [0, " << p.num_pages
        << ") (sequence " << b << " uses its first " << used << " entries)";
      return Status::invalid(m.str());
    }
  }
  return Status::success();
}

// The paged forward's host values: every sequence's cu_seqlens_k length fits its block_table row,
// and the pages it reads lie in the pool.
Status check_paged_keys(const FwdParams& p) {
  const int64_t capacity = p.max_pages * p.page_size;  // no overflow: paged_kv_params checked it
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t len_k = int64_t{p.cu_seqlens_k[b + 1]} - p.cu_seqlens_k[b];
    if (len_k > capacity) {
      Message m;
      m << "cu_seqlens_k: sequence " << b << " has length " << len_k << " > max_pages * page_size = " << capacity
        << " (block_table holds " << p.max_pages << " pages of " << p.page_size << " keys per sequence)";
      return Status::invalid(m.str());
    }
    FLASHATTN_TRY(check_pages_of_sequence(p, b, len_k));
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

// A varlen batch: rows from cu_seqlens_q and cu_seqlens_k; k and v packed [total_k, heads_kv, d]
// or page pools.
Status varlen_rows(const AttentionArgs& a, bool paged, FwdParams* p) {
  const Device dev = p->device;
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
  if (paged) {
    int64_t capacity = 0;
    FLASHATTN_TRY(paged_kv_params("k", a.k, "v", a.v, a.block_table, p, &capacity));
    if (__builtin_mul_overflow(p->num_pages, p->page_size, &p->total_k)) {
      return Status::invalid("k: shape " + shape_str(a.k) + " holds more than 2^63 rows");
    }
  } else {
    p->total_k = a.k.shape[0];
    FLASHATTN_TRY(check_shape("k", a.k, {p->total_k, p->heads_kv, p->hdim_qk}, "[total_k, heads_kv, hdim_qk of q]"));
    FLASHATTN_TRY(check_shape("v", a.v, {p->total_k, p->heads_kv, p->hdim_v}, "[total_k of k, heads_kv of k, hdim_v]"));
  }
  p->cu_seqlens_q = static_cast<const int32_t*>(a.cu_seqlens_q.data);
  p->cu_seqlens_k = static_cast<const int32_t*>(a.cu_seqlens_k.data);
  if (dev == Device::cpu) {  // host offsets can be checked; device ones are the caller's contract
    FLASHATTN_TRY(check_cu_seqlens("cu_seqlens_q", a.cu_seqlens_q, a.max_seqlen_q, "max_seqlen_q"));
    FLASHATTN_TRY(check_cu_seqlens_end("cu_seqlens_q", a.cu_seqlens_q, p->total_q));
    FLASHATTN_TRY(check_cu_seqlens("cu_seqlens_k", a.cu_seqlens_k, a.max_seqlen_k, "max_seqlen_k"));
    FLASHATTN_TRY(paged ? check_paged_keys(*p) : check_cu_seqlens_end("cu_seqlens_k", a.cu_seqlens_k, p->total_k));
  }
  return Status::success();
}

// A padded batch's row counts (total_q, total_k) from batch and the sequence lengths, and whether they
// and the element counts every backend indexes with fit in int64: views may broadcast (stride 0),
// so the sizes alone can exceed what any memory holds.
bool padded_counts_fit(FwdParams* p) {
  const int64_t dim = std::max(p->hdim_qk, p->hdim_v);
  int64_t row_elems = 0, elems = 0;
  return !(__builtin_mul_overflow(p->batch, p->seqlen_q, &p->total_q) ||
           __builtin_mul_overflow(p->batch, p->seqlen_k, &p->total_k) ||
           __builtin_mul_overflow(std::max(p->heads_q, p->heads_kv), dim, &row_elems) ||
           __builtin_mul_overflow(std::max(p->total_q, p->total_k), row_elems, &elems));
}

// A padded batch: q [batch, seqlen_q, heads_q, d], k and v [batch, seqlen_k, heads_kv, d].
Status padded_rows(const AttentionArgs& a, FwdParams* p) {
  p->batch = a.q.shape[0];
  p->seqlen_q = a.q.shape[1];
  p->seqlen_k = a.k.shape[1];
  if (!padded_counts_fit(p)) {
    Message m;
    m << "q: shape " << shape_str(a.q) << " and k: shape " << shape_str(a.k) << " hold more than 2^63 elements";
    return Status::invalid(m.str());
  }
  FLASHATTN_TRY(check_shape("k", a.k, {p->batch, p->seqlen_k, p->heads_kv, p->hdim_qk},
                            "[batch of q, seqlen_k, heads_kv, hdim_qk of q]"));
  FLASHATTN_TRY(check_shape("v", a.v, {p->batch, p->seqlen_k, p->heads_kv, p->hdim_v},
                            "[batch of q, seqlen_k of k, heads_kv of k, hdim_v]"));
  return Status::success();
}

// Everything forward and backward share: q, k, v (packed, padded or paged), varlen offsets, options.
Status common_params(const AttentionArgs& a, FwdParams* p) {
  const bool varlen = !a.cu_seqlens_q.empty() || !a.cu_seqlens_k.empty();
  const bool paged = !a.block_table.empty();
  const int rank = varlen ? 3 : 4;
  const DType dt = a.q.dtype;
  const Device dev = a.q.device;
  if (dt != DType::f32 && dt != DType::f16 && dt != DType::bf16) {
    return Status::invalid(std::string("q: dtype ") + to_string(dt) + " is not one of f32, f16, bf16");
  }
  if (paged && !varlen) {
    return Status::invalid("block_table: given without cu_seqlens_q, cu_seqlens_k; paged K/V needs a varlen batch "
                           "(cu_seqlens_k gives each sequence's length, its keys live in the pages)");
  }
  if (a.q.rank != rank) {
    Message m;
    m << "q: rank " << a.q.rank << ", expected " << rank
      << (varlen ? " (varlen: [total_q, heads, d])" : " ([batch, seqlen, heads, d]; set cu_seqlens for varlen)");
    return Status::invalid(m.str());
  }
  FLASHATTN_TRY(check_view("q", a.q, rank, dt, dev));

  const int o = varlen ? 0 : 1;  // index of the rows dimension
  p->dtype = dt;
  p->device = dev;
  p->heads_q = a.q.shape[o + 1];
  p->hdim_qk = a.q.shape[o + 2];
  if (!paged) {
    FLASHATTN_TRY(check_view("k", a.k, rank, dt, dev));
    FLASHATTN_TRY(check_view("v", a.v, rank, dt, dev));
    p->heads_kv = a.k.shape[o + 1];
    p->hdim_v = a.v.shape[o + 2];
  }

  FLASHATTN_TRY(varlen ? varlen_rows(a, paged, p) : padded_rows(a, p));

  FLASHATTN_TRY(check_head_dim("hdim_qk (last dimension of q, k)", p->hdim_qk));
  FLASHATTN_TRY(check_head_dim("hdim_v (last dimension of v)", p->hdim_v));
  if (p->heads_kv == 0 || p->heads_q % p->heads_kv != 0) {
    Message m;
    m << "heads: heads_q = " << p->heads_q << " is not a multiple of heads_kv = " << p->heads_kv << " (k, v)";
    return Status::invalid(m.str());
  }

  strides_of(a.q, varlen, &p->q_batch_stride, &p->q_row_stride, &p->q_head_stride);
  p->q = a.q.data;
  if (!paged) {  // paged_kv_params set the pools' strides
    strides_of(a.k, varlen, &p->k_batch_stride, &p->k_row_stride, &p->k_head_stride);
    strides_of(a.v, varlen, &p->v_batch_stride, &p->v_row_stride, &p->v_head_stride);
    p->k = a.k.data;
    p->v = a.v.data;
  }

  FLASHATTN_TRY(normalized_options(a.options, p));
  p->stream = a.stream;
  p->zero_rows_outside_sequences = a.zero_rows_outside_sequences && p->is_varlen();
  return Status::success();
}

// out-shaped tensors ([.., rows_q, heads_q, hdim_v]) and their strides.
Status out_like(const char* name, const TensorView& t, const FwdParams& p, int64_t d, const char* ddesc,
                int64_t* bs, int64_t* rs, int64_t* hs, Data data = Data::now) {
  const bool varlen = p.is_varlen();
  FLASHATTN_TRY(check_view(name, t, varlen ? 3 : 4, p.dtype, p.device, data));
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
    p->lse_head_stride = addressed_stride(t, 0);
  } else {
    FLASHATTN_TRY(check_shape(name, t, {p->batch, p->heads_q, p->seqlen_q}, "[batch, heads_q, seqlen_q]"));
    p->lse_batch_stride = addressed_stride(t, 0);
    p->lse_head_stride = addressed_stride(t, 1);
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
  if (!a.block_table.empty()) {
    return Status::unsupported("block_table: the backward does not take paged K/V (only the forward does, as "
                               "flash-attn's); pass the keys packed (varlen) to differentiate");
  }
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
  const Data gradients = a.gradient_allocator ? Data::later : Data::now;
  FLASHATTN_TRY(out_like("dq", a.dq, *p, p->hdim_qk, "[batch, seqlen_q, heads_q, hdim_qk] (as q)", &p->dq_batch_stride,
                  &p->dq_row_stride, &p->dq_head_stride, gradients));
  FLASHATTN_TRY(lse_params("lse", a.lse, p));
  const bool varlen = p->is_varlen();
  FLASHATTN_TRY(check_view("dk", a.dk, varlen ? 3 : 4, p->dtype, p->device, gradients));
  FLASHATTN_TRY(check_view("dv", a.dv, varlen ? 3 : 4, p->dtype, p->device, gradients));
  for (int i = 0; i < a.k.rank; ++i) {
    if (a.dk.shape[i] != a.k.shape[i]) return Status::invalid("dk: shape " + shape_str(a.dk) + ", expected that of k " + shape_str(a.k));
    if (a.dv.shape[i] != a.v.shape[i]) return Status::invalid("dv: shape " + shape_str(a.dv) + ", expected that of v " + shape_str(a.v));
  }
  strides_of(a.dk, varlen, &p->dk_batch_stride, &p->dk_row_stride, &p->dk_head_stride);
  strides_of(a.dv, varlen, &p->dv_batch_stride, &p->dv_row_stride, &p->dv_head_stride);
  p->out = a.out.data;
  p->dout = a.dout.data;
  p->dq = a.dq.data;  // null with gradient_allocator: api.cpp sets late_gradients
  p->dk = a.dk.data;
  p->dv = a.dv.data;
  p->deterministic = a.deterministic;
  p->workspace = a.workspace;
  p->workspace_bytes = a.workspace_bytes;
  return Status::success();
}

// ---- the KV-cache entry (KVCacheArgs → KVCacheParams) ----

namespace {

// k_cache / v_cache: contiguous [batch_cache, seqlen_cache, heads_kv, d] or paged [num_pages,
// page_size, heads_kv, d] (block_table given). Sets heads, head dims, the cache's strides, its
// capacity per sequence (p->seqlen_k) and the paged geometry.
Status kvcache_cache_params(const KVCacheArgs& a, KVCacheParams* p) {
  if (!a.block_table.empty()) {
    FLASHATTN_TRY(paged_kv_params("k_cache", a.k_cache, "v_cache", a.v_cache, a.block_table, p, &p->seqlen_k));
    p->k_cache = a.k_cache.data;
    p->v_cache = a.v_cache.data;
    if (!a.cache_batch_idx.empty()) {
      return Status::invalid("cache_batch_idx: given with block_table; a paged cache is addressed by block_table alone");
    }
    if (a.cache_seqlens.empty()) {
      return Status::invalid("cache_seqlens: missing; a paged cache (block_table given) needs the cached length of each sequence");
    }
    return Status::success();
  }
  FLASHATTN_TRY(check_view("k_cache", a.k_cache, 4, p->dtype, p->device));
  FLASHATTN_TRY(check_view("v_cache", a.v_cache, 4, p->dtype, p->device));
  p->heads_kv = a.k_cache.shape[2];
  p->hdim_v = a.v_cache.shape[3];
  FLASHATTN_TRY(check_shape("k_cache", a.k_cache, {a.k_cache.shape[0], a.k_cache.shape[1], p->heads_kv, p->hdim_qk},
                            "[batch_cache, seqlen_cache, heads_kv, hdim_qk of q]"));
  FLASHATTN_TRY(check_shape("v_cache", a.v_cache, {a.k_cache.shape[0], a.k_cache.shape[1], p->heads_kv, p->hdim_v},
                            "[batch_cache, seqlen_cache, heads_kv of k_cache, hdim_v]"));
  strides_of(a.k_cache, false, &p->k_batch_stride, &p->k_row_stride, &p->k_head_stride);
  strides_of(a.v_cache, false, &p->v_batch_stride, &p->v_row_stride, &p->v_head_stride);
  p->k = p->k_cache = a.k_cache.data;
  p->v = p->v_cache = a.v_cache.data;
  if (a.cache_batch_idx.empty() && a.k_cache.shape[0] < p->batch) {
    Message m;
    m << "k_cache: batch_cache = " << a.k_cache.shape[0] << " (shape " << shape_str(a.k_cache)
      << ") is below batch = " << p->batch << " of q (without cache_batch_idx, sequence b uses cache row b)";
    return Status::invalid(m.str());
  }
  p->batch_cache = a.k_cache.shape[0];
  p->seqlen_k = a.k_cache.shape[1];
  return Status::success();
}

// Two views that come as a pair: invalid_argument naming the missing one when only one is given.
Status both_or_neither(const char* first, const TensorView& a, const char* second, const TensorView& b, const char* why) {
  if (a.empty() == b.empty()) return Status::success();
  return Status::invalid(std::string(a.empty() ? first : second) + ": missing; " + why + " (give both " + first +
                         " and " + second + ", or neither)");
}

// k_new / v_new: both or neither, [batch, seqlen_new, heads_kv, hdim_qk] and [.., hdim_v].
Status kvcache_new_params(const KVCacheArgs& a, KVCacheParams* p) {
  FLASHATTN_TRY(both_or_neither("k_new", a.k_new, "v_new", a.v_new, "new keys and values are appended together"));
  if (a.k_new.empty()) return Status::success();
  FLASHATTN_TRY(check_view("k_new", a.k_new, 4, p->dtype, p->device));
  FLASHATTN_TRY(check_view("v_new", a.v_new, 4, p->dtype, p->device));
  p->seqlen_new = a.k_new.shape[1];
  FLASHATTN_TRY(check_shape("k_new", a.k_new, {p->batch, p->seqlen_new, p->heads_kv, p->hdim_qk},
                            "[batch of q, seqlen_new, heads_kv of k_cache, hdim_qk of q]"));
  FLASHATTN_TRY(check_shape("v_new", a.v_new, {p->batch, p->seqlen_new, p->heads_kv, p->hdim_v},
                            "[batch of q, seqlen_new of k_new, heads_kv of k_cache, hdim_v of v_cache]"));
  if (p->seqlen_new > p->seqlen_k) {
    Message m;
    m << "k_new: seqlen_new = " << p->seqlen_new << " exceeds the cache's capacity of " << p->seqlen_k
      << " keys per sequence";
    return Status::invalid(m.str());
  }
  if (p->seqlen_new > 0 && a.cache_seqlens.empty()) {
    return Status::invalid("cache_seqlens: missing; appending k_new needs it (without it every sequence fills its "
                           "whole cache, leaving no room)");
  }
  strides_of(a.k_new, false, &p->kn_batch_stride, &p->kn_row_stride, &p->kn_head_stride);
  strides_of(a.v_new, false, &p->vn_batch_stride, &p->vn_row_stride, &p->vn_head_stride);
  p->k_new = a.k_new.data;
  p->v_new = a.v_new.data;
  return Status::success();
}

// rotary_cos / rotary_sin: both or neither, [seqlen_rotary, rotary_dim / 2] of q's dtype, rows
// contiguous and of one stride, rotary_dim ≤ hdim_qk.
Status kvcache_rotary_params(const KVCacheArgs& a, KVCacheParams* p) {
  FLASHATTN_TRY(both_or_neither("rotary_cos", a.rotary_cos, "rotary_sin", a.rotary_sin, "the rotary tables come together"));
  if (a.rotary_cos.empty()) return Status::success();
  FLASHATTN_TRY(check_view("rotary_cos", a.rotary_cos, 2, p->dtype, p->device));
  FLASHATTN_TRY(check_view("rotary_sin", a.rotary_sin, 2, p->dtype, p->device));
  FLASHATTN_TRY(check_shape("rotary_sin", a.rotary_sin, {a.rotary_cos.shape[0], a.rotary_cos.shape[1]},
                            "the shape of rotary_cos"));
  p->seqlen_rotary = a.rotary_cos.shape[0];
  p->rotary_dim = 2 * a.rotary_cos.shape[1];
  if (p->rotary_dim == 0 || p->rotary_dim > p->hdim_qk) {
    Message m;
    m << "rotary_cos: shape " << shape_str(a.rotary_cos) << " gives rotary_dim = " << p->rotary_dim
      << "; it must be between 2 and hdim_qk = " << p->hdim_qk << " (rotary_dim = 2 * shape[1])";
    return Status::invalid(m.str());
  }
  if (p->seqlen_rotary > 1 && a.rotary_sin.stride[0] != a.rotary_cos.stride[0]) {
    Message m;
    m << "rotary_sin: row stride " << a.rotary_sin.stride[0] << " differs from rotary_cos's " << a.rotary_cos.stride[0]
      << " (the tables share one row stride)";
    return Status::invalid(m.str());
  }
  p->rotary_row_stride = addressed_stride(a.rotary_cos, 0);
  p->rotary_cos = a.rotary_cos.data;
  p->rotary_sin = a.rotary_sin.data;
  p->rotary_interleaved = a.rotary_interleaved;
  return Status::success();
}

// cache_seqlens (int32 [batch], required when paged or appending) and cache_batch_idx (int32
// [batch], contiguous only).
Status kvcache_index_params(const KVCacheArgs& a, KVCacheParams* p) {
  if (!a.cache_seqlens.empty()) {
    FLASHATTN_TRY(check_view("cache_seqlens", a.cache_seqlens, 1, DType::i32, p->device));
    FLASHATTN_TRY(check_shape("cache_seqlens", a.cache_seqlens, {p->batch}, "[batch of q]"));
    if (p->batch > 1 && a.cache_seqlens.stride[0] != 1) {
      return Status::invalid("cache_seqlens: stride " + std::to_string(a.cache_seqlens.stride[0]) + ", expected 1 (contiguous)");
    }
    p->cache_seqlens = static_cast<const int32_t*>(a.cache_seqlens.data);
  }
  if (!a.cache_batch_idx.empty()) {
    FLASHATTN_TRY(check_view("cache_batch_idx", a.cache_batch_idx, 1, DType::i32, p->device));
    FLASHATTN_TRY(check_shape("cache_batch_idx", a.cache_batch_idx, {p->batch}, "[batch of q]"));
    if (p->batch > 1 && a.cache_batch_idx.stride[0] != 1) {
      return Status::invalid("cache_batch_idx: stride " + std::to_string(a.cache_batch_idx.stride[0]) + ", expected 1 (contiguous)");
    }
    p->cache_batch_idx = static_cast<const int32_t*>(a.cache_batch_idx.data);
  }
  if (!a.cache_leftpad.empty()) {
    if (p->is_paged()) {
      return Status::unsupported("cache_leftpad: given with block_table; left padding applies to contiguous caches "
                                 "only (as in flash-attn)");
    }
    FLASHATTN_TRY(check_view("cache_leftpad", a.cache_leftpad, 1, DType::i32, p->device));
    FLASHATTN_TRY(check_shape("cache_leftpad", a.cache_leftpad, {p->batch}, "[batch of q]"));
    if (p->batch > 1 && a.cache_leftpad.stride[0] != 1) {
      return Status::invalid("cache_leftpad: stride " + std::to_string(a.cache_leftpad.stride[0]) + ", expected 1 (contiguous)");
    }
    p->cache_leftpad = static_cast<const int32_t*>(a.cache_leftpad.data);
  }
  return Status::success();
}

// The values inside the index arrays, readable only for host tensors (CUDA kernels clamp instead,
// see params.hpp): lengths ≥ 0 and within the capacity with the appended keys, cache rows within
// the cache, and every page a sequence uses within the cache's pages (check_pages_of_sequence).
// The rotary tables must hold every position the call rotates.
Status check_kvcache_host_values(const KVCacheParams& p) {
  for (int64_t b = 0; b < p.batch; ++b) {
    Message m;
    const int64_t cached = p.cache_seqlens ? p.cache_seqlens[b] : p.seqlen_k;
    if (cached < 0) {
      m << "cache_seqlens[" << b << "] = " << cached << " is negative";
      return Status::invalid(m.str());
    }
    const int64_t len_k = cached + p.seqlen_new;
    if (len_k > p.seqlen_k) {
      m << "cache_seqlens[" << b << "] = " << cached << " + seqlen_new = " << p.seqlen_new << " exceeds the cache's capacity of "
        << p.seqlen_k << " keys per sequence" << (p.is_paged() ? " (max_pages * page_size)" : " (seqlen_cache)");
      return Status::invalid(m.str());
    }
    if (p.cache_leftpad && (p.cache_leftpad[b] < 0 || p.cache_leftpad[b] > cached)) {
      m << "cache_leftpad[" << b << "] = " << p.cache_leftpad[b] << " is outside [0, cache_seqlens[" << b << "] = "
        << cached << "] (the padding precedes the cached keys)";
      return Status::invalid(m.str());
    }
    if (p.cache_batch_idx && (p.cache_batch_idx[b] < 0 || p.cache_batch_idx[b] >= p.batch_cache)) {
      m << "cache_batch_idx[" << b << "] = " << p.cache_batch_idx[b] << " is outside the cache's rows [0, "
        << p.batch_cache << ")";
      return Status::invalid(m.str());
    }
    if (p.is_paged()) FLASHATTN_TRY(check_pages_of_sequence(p, b, len_k));
    const int64_t q_positions = p.seqlen_q == 0 ? 0 : (p.rotary_per_query() ? p.seqlen_q : 1);
    const int64_t rotated = std::max(p.seqlen_new, q_positions);  // positions from cached on
    if (p.rotary_cos && rotated > 0 && cached + rotated > p.seqlen_rotary) {
      m << "rotary_cos: " << p.seqlen_rotary << " positions, but sequence " << b << " rotates positions up to "
        << cached + rotated - 1 << " (cache_seqlens[" << b << "] = " << cached << ")";
      return Status::invalid(m.str());
    }
  }
  return Status::success();
}

}  // namespace

// The KV-cache entry's rules (flashattn.hpp's KVCacheArgs; the params' contract in params.hpp).
Status to_params(const KVCacheArgs& a, KVCacheParams* p) {
  *p = KVCacheParams{};
  const DType dt = a.q.dtype;
  if (dt != DType::f32 && dt != DType::f16 && dt != DType::bf16) {
    return Status::invalid(std::string("q: dtype ") + to_string(dt) + " is not one of f32, f16, bf16");
  }
  p->dtype = dt;
  p->device = a.q.device;
  FLASHATTN_TRY(check_view("q", a.q, 4, dt, p->device));
  p->batch = a.q.shape[0];
  p->seqlen_q = a.q.shape[1];
  p->heads_q = a.q.shape[2];
  p->hdim_qk = a.q.shape[3];
  FLASHATTN_TRY(kvcache_cache_params(a, p));
  FLASHATTN_TRY(check_head_dim("hdim_qk (last dimension of q, k_cache)", p->hdim_qk));
  FLASHATTN_TRY(check_head_dim("hdim_v (last dimension of v_cache)", p->hdim_v));
  if (p->heads_kv == 0 || p->heads_q % p->heads_kv != 0) {
    Message m;
    m << "heads: heads_q = " << p->heads_q << " is not a multiple of heads_kv = " << p->heads_kv << " (k_cache, v_cache)";
    return Status::invalid(m.str());
  }
  if (!padded_counts_fit(p)) {
    Message m;
    m << "q: shape " << shape_str(a.q) << " and a cache of " << p->seqlen_k << " keys per sequence hold more than 2^63 elements";
    return Status::invalid(m.str());
  }
  strides_of(a.q, false, &p->q_batch_stride, &p->q_row_stride, &p->q_head_stride);
  p->q = a.q.data;
  FLASHATTN_TRY(kvcache_index_params(a, p));
  FLASHATTN_TRY(kvcache_new_params(a, p));
  FLASHATTN_TRY(kvcache_rotary_params(a, p));
  if (a.out.empty()) return Status::invalid("out: missing (the output tensor is required)");
  FLASHATTN_TRY(out_like("out", a.out, *p, p->hdim_v, "[batch, seqlen_q, heads_q, hdim_v]", &p->o_batch_stride,
                         &p->o_row_stride, &p->o_head_stride));
  p->out = a.out.data;
  if (!a.lse.empty()) FLASHATTN_TRY(lse_params("lse", a.lse, p));
  FLASHATTN_TRY(normalized_options(a.options, p));
  if (a.num_splits < 0) return Status::invalid("num_splits = " + std::to_string(a.num_splits) + " must be >= 0 (0: chosen from the shapes)");
  p->num_splits = a.num_splits;
  if (p->device == Device::cpu) FLASHATTN_TRY(check_kvcache_host_values(*p));
  p->stream = a.stream;
  p->workspace = a.workspace;
  p->workspace_bytes = a.workspace_bytes;
  return Status::success();
}

}  // namespace flashattn
