// flashattn: exact attention, computed the IO-aware way (FlashAttention).
//
// Public C++ API. All tensors are non-owning views; the caller owns every buffer. Every entry point
// returns a Status and never throws, aborts or synchronizes a CUDA stream.
//
// Layout (the flash-attn convention, strides in elements, last dimension contiguous):
//   q    [batch, seqlen_q, heads_q,  hdim_qk]      varlen: [total_q, heads_q,  hdim_qk]
//   k    [batch, seqlen_k, heads_kv, hdim_qk]      varlen: [total_k, heads_kv, hdim_qk]
//   v    [batch, seqlen_k, heads_kv, hdim_v ]      varlen: [total_k, heads_kv, hdim_v ]
//   out  [batch, seqlen_q, heads_q,  hdim_v ]      varlen: [total_q, heads_q,  hdim_v ]
//   lse  fp32 [batch, heads_q, seqlen_q]           varlen: [heads_q, total_q]
//   cu_seqlens_q / cu_seqlens_k: int32 [batch + 1] cumulative offsets (varlen only)
//   paged k, v (AttentionArgs::block_table): [num_pages, page_size, heads_kv, hdim_qk / hdim_v]
// Varlen: packed rows outside [cu_seqlens[0], cu_seqlens[batch]) belong to no sequence and are
// neither read nor written: out, lse, dq (query side) and dk, dv (key side) keep whatever those
// rows held. A caller that needs them defined zeroes them (the Python API allocates them zeroed).
//
// Semantics: S = q·kᵀ·softmax_scale; if softcap > 0, S = softcap·tanh(S / softcap); masked entries
// are −inf; P = softmax(S) per row; out = P·v; lse = log Σ exp(S) per row (natural log).
// Masks (flash-attn's): query row i may see key j iff
//   j ≤ i + seqlen_k − seqlen_q + window_right   (causal is window_right = 0)
//   j ≥ i + seqlen_k − seqlen_q − window_left    (window_left = −1: unbounded)
// i.e. causal is aligned bottom-right when seqlen_q ≠ seqlen_k.
// A fully masked row (or a row of an empty key sequence) gets out = 0 and lse = +inf (as flash-attn),
// so that the backward's exp(S − lse) is 0 there; its gradients are 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace flashattn {

enum class DType : int { f32 = 0, f16 = 1, bf16 = 2, i32 = 3 };
enum class Device : int { cpu = 0, cuda = 1 };

const char* to_string(DType dtype);
const char* to_string(Device device);
std::size_t element_size(DType dtype);

enum class StatusCode : int {
  ok = 0,
  invalid_argument = 1,  // the call is malformed: a shape, stride, pointer or option is wrong
  not_supported = 2,     // well-formed, but no backend here implements it (e.g. fp32 on CUDA)
  cuda_error = 3,        // the CUDA runtime reported an error (launch, configuration)
  internal = 4,
};

struct Status {
  StatusCode code = StatusCode::ok;
  std::string message;  // names the argument and the value at fault

  bool ok() const { return code == StatusCode::ok; }
  static Status success() { return {}; }
  static Status invalid(std::string msg) { return {StatusCode::invalid_argument, std::move(msg)}; }
  static Status unsupported(std::string msg) { return {StatusCode::not_supported, std::move(msg)}; }
};

// A non-owning strided view. shape/stride beyond `rank` are ignored.
struct TensorView {
  static constexpr int kMaxRank = 4;
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  int rank = 0;
  int64_t shape[kMaxRank] = {0, 0, 0, 0};
  int64_t stride[kMaxRank] = {0, 0, 0, 0};

  bool empty() const { return data == nullptr && rank == 0; }
  int64_t numel() const;  // 0 for an invalid rank or a size ≤ 0; saturates at INT64_MAX
  // A contiguous (row-major) view of `shape`.
  static TensorView contiguous(void* data, DType dtype, Device device, std::initializer_list<int64_t> shape);
};

// The attention options: what the score and the mask are. One struct, shared by forward and
// backward (and passed whole through every layer of the library); a new option is a field here.
struct AttentionOptions {
  std::optional<float> softmax_scale;  // default 1/sqrt(hdim_qk)
  bool causal = false;                 // window_right = 0, aligned bottom-right
  int64_t window_left = -1, window_right = -1;  // −1: unbounded on that side
  float softcap = 0.f;                          // 0: off
};

// Scratch on demand. When a call needs workspace and its `workspace` is null, the library asks
// `allocate` for exactly the bytes of the call's one plan (on the tensors' device) and runs on it:
// one plan per call, instead of *_workspace_size() and then the call, which plans twice. The memory
// must stay valid until the call's work on `stream` has finished (a stream-ordered or caching
// allocator such as PyTorch's gives that); the library never frees it. A null return fails the call
// (cuda_error for CUDA tensors, internal on the CPU) before anything runs.
struct WorkspaceAllocator {
  void* (*allocate)(std::size_t bytes, void* context) = nullptr;
  void* context = nullptr;
  explicit operator bool() const { return allocate != nullptr; }
};

// The backward's gradients on demand. With `allocate` set, dq, dk and dv come with their shapes and
// strides but null data, and the library asks for their memory once per call: after the call has
// been validated and its first kernel launched (which reads only out, dout and lse), before anything
// writes a gradient. `allocate` stores the three base pointers (each 16-byte aligned, as an
// allocator gives; the views' shapes and strides describe them) and returns true; false fails the
// call, with only the workspace written. Why: a caller on a slow host thread (PyTorch's autograd
// engine runs a backward on a thread that wakes for it) moves three allocations out of the time
// the GPU waits for its first work.
struct GradientAllocator {
  bool (*allocate)(void* context, void** dq, void** dk, void** dv) = nullptr;
  void* context = nullptr;
  explicit operator bool() const { return allocate != nullptr; }
};

// What forward and backward share: the inputs, the options, and where to run.
struct AttentionArgs {
  TensorView q, k, v;

  // Variable-length batches: set both (int32 [batch + 1], on the same device as q) and the maxima.
  TensorView cu_seqlens_q, cu_seqlens_k;
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;

  // Paged K/V (flash-attn's varlen forward with block_table, "paged prefill"): int32 [batch,
  // max_pages_per_sequence], varlen only, forward only (the backward refuses it). k and v are then
  // a page pool [num_pages, page_size, heads_kv, hdim], any page_size ≥ 1, and sequence b's key t
  // is row t % page_size of page block_table[b][t / page_size]; cu_seqlens_k[b + 1] − cu_seqlens_k[b]
  // is its length (≤ max_pages_per_sequence · page_size), the keys are not packed. Entries past a
  // sequence's ⌈length / page_size⌉ pages are never read.
  TensorView block_table;

  AttentionOptions options;

  // Which kernel family may run the call: "auto" (or empty: the fastest family that supports it,
  // see families()), or one family's name ("cpu", "sm80", ...) to run that one or fail saying why.
  std::string path = "auto";

  void* stream = nullptr;  // cudaStream_t for CUDA tensors; ignored on the CPU

  // Varlen: also write 0 to the packed rows no sequence covers (rows before cu_seqlens[0] and from
  // cu_seqlens[batch] on) of out (forward), dq, dk and dv (backward), read from the offsets where
  // they live (on the GPU, without synchronizing). Off: those rows are never written, so whatever
  // the caller keeps there survives the call.
  bool zero_rows_outside_sequences = false;
};

struct ForwardArgs : AttentionArgs {
  TensorView out;
  TensorView lse;  // optional: may be left empty when not needed (the backward needs it)
  void* workspace = nullptr;  // see forward_workspace_size, or leave null and set workspace_allocator
  std::size_t workspace_bytes = 0;
  WorkspaceAllocator workspace_allocator;
};

struct BackwardArgs : AttentionArgs {
  TensorView out, lse, dout;  // from the forward, and the incoming gradient
  TensorView dq, dk, dv;      // written (overwritten, not accumulated); null data with gradient_allocator
  bool deterministic = false;  // bitwise reproducible dq (and GQA dk, dv), at some speed cost
  void* workspace = nullptr;   // see backward_workspace_size, or leave null and set workspace_allocator
  std::size_t workspace_bytes = 0;
  WorkspaceAllocator workspace_allocator;
  GradientAllocator gradient_allocator;  // optional: dq, dk, dv allocated after the first launch
};

// Attention of new query tokens against a KV cache, for inference: flash-attn's
// flash_attn_with_kvcache. On the GPU a few tokens per sequence run on the decode family's split-KV
// kernel; from 128 tokens (64 on a wide batch), as in chunked prefill, the same family runs the
// forward kernels over the cache as pages (docs/kvcache.md). Sequence b attends to the first cache_seqlens[b] + seqlen_new keys of its
// cache (seqlen_new = rows of k_new, 0 without), after k_new/v_new have been written into the cache
// at positions [cache_seqlens[b], cache_seqlens[b] + seqlen_new) -- the cache is updated in place.
// Causal and windows align bottom-right against that length (query i of seqlen_q sees key j iff
// j ≤ i + seqlen_k(b) − seqlen_q, with seqlen_k(b) = cache_seqlens[b] + seqlen_new).
struct KVCacheArgs {
  TensorView q;  // [batch, seqlen_q, heads_q, hdim_qk]

  // The cache, written where k_new/v_new are appended. Contiguous: [batch_cache, seqlen_cache,
  // heads_kv, hdim] (batch_cache ≥ batch; row b, or cache_batch_idx[b] when given). Paged (with
  // block_table): [num_pages, page_size, heads_kv, hdim], any page_size ≥ 1; sequence b's key t is
  // row t % page_size of page block_table[b][t / page_size].
  TensorView k_cache, v_cache;
  TensorView cache_seqlens;    // int32 [batch]: keys already cached per sequence; empty: seqlen_cache (contiguous only)
  TensorView block_table;      // int32 [batch, max_pages_per_sequence]: a paged cache when given
  TensorView cache_batch_idx;  // int32 [batch]: the cache row of each sequence (contiguous only); empty: b
  // int32 [batch], contiguous caches only (flash-attn's cache_leftpad): sequence b's keys start at
  // cache row cache_leftpad[b] (rows before it are padding, never read), so it attends to the rows
  // [cache_leftpad[b], cache_seqlens[b] + seqlen_new): cache_seqlens still counts rows from 0, new
  // keys are appended at cache_seqlens[b], rotary positions are cache rows, and masks align against
  // its own length cache_seqlens[b] − cache_leftpad[b] + seqlen_new. 0 ≤ cache_leftpad[b] ≤
  // cache_seqlens[b]. Empty: 0.
  TensorView cache_leftpad;

  // New keys and values, appended to the cache before attention (both or neither):
  // [batch, seqlen_new, heads_kv, hdim_qk] and [..., hdim_v].
  TensorView k_new, v_new;

  // Rotary embedding (both or neither): [seqlen_rotary, rotary_dim / 2] tables of q's dtype (f32 on
  // the CPU for f32), rotary_dim = 2 · shape[1] ≤ hdim_qk, even. Applied to k_new at its positions
  // cache_seqlens[b] + t before it is cached, and to q: at cache_seqlens[b] + i (query i) when the
  // call is causal or windowed (a window side reaching past the cache's capacity counts as none),
  // else at cache_seqlens[b] for every query; the tables must hold every position rotated.
  // Interleaved: pairs (0,1), (2,3), ...; else pairs (i, i + rotary_dim / 2) (GPT-NeoX).
  // Sequences must not append into cache rows (or pages) another sequence uses: on the GPU the
  // result is then undefined (the CPU appends in batch order, then attends).
  TensorView rotary_cos, rotary_sin;
  bool rotary_interleaved = false;

  TensorView out;  // [batch, seqlen_q, heads_q, hdim_v]
  TensorView lse;  // optional f32 [batch, heads_q, seqlen_q]

  AttentionOptions options;
  int num_splits = 0;  // key-range splits of the decode kernel (Flash-Decoding); 0: chosen from the
                       // shapes; a given value keeps the call on the decode kernel at any seqlen_q

  std::string path = "auto";  // as AttentionArgs::path
  void* stream = nullptr;
  void* workspace = nullptr;  // see kvcache_workspace_size, or leave null and set workspace_allocator
  std::size_t workspace_bytes = 0;
  WorkspaceAllocator workspace_allocator;
};

// The kernel families this build knows, in the order "auto" tries them ("sm80", "cpu", ...), and
// the one that would run a call ("" when none).
std::vector<std::string> families();
// The device whose tensors family `name` runs (cpu or cuda); empty for a name this build lacks.
std::optional<Device> family_device(const std::string& name);
std::string forward_path(const ForwardArgs& args);
std::string backward_path(const BackwardArgs& args);
std::string kvcache_path(const KVCacheArgs& args);

// supports(): ok when forward()/backward() would run these arguments; else the reason. It calls
// the same selection as the run path, so the two cannot disagree.
Status supports(const ForwardArgs& args);
Status supports(const BackwardArgs& args);
Status supports(const KVCacheArgs& args);

// Scratch each call needs in `workspace` (bytes, on the tensors' device); 0 when none.
Status forward_workspace_size(const ForwardArgs& args, std::size_t* bytes);
Status backward_workspace_size(const BackwardArgs& args, std::size_t* bytes);
Status kvcache_workspace_size(const KVCacheArgs& args, std::size_t* bytes);

Status forward(const ForwardArgs& args);
Status backward(const BackwardArgs& args);
Status kvcache_forward(const KVCacheArgs& args);  // writes k_new/v_new into the cache, then out (and lse)

// True when the library was built with CUDA and a CUDA device is visible.
bool cuda_available();

}  // namespace flashattn
