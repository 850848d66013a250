/* flashattn C ABI: one flat argument struct for forward and backward (and one for the KV-cache
 * call), for ctypes/FFI callers.
 * Mirrors the C++ API (flashattn.hpp); return value is the StatusCode (0 = ok) and the message is
 * copied into msg (NUL-terminated, truncated to msg_cap). Nothing here throws or aborts.
 *
 * Versioning: fa_args, fa_kvcache_args and fa_options start with struct_size, the sizeof the caller compiled
 * (fa_args_init / fa_kvcache_args_init / fa_options_init set it, with every default). New fields are only ever appended,
 * so the library reads the fields a caller knows and gives every later field its default; a
 * caller newer than the library may pass a larger struct whose unknown tail is all zero bytes. */
#ifndef FLASHATTN_C_H
#define FLASHATTN_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dtype: 0 f32, 1 f16, 2 bf16, 3 i32. device: 0 cpu, 1 cuda. rank 0 with data NULL = absent. */
typedef struct fa_tensor {
  void* data;
  int32_t dtype;
  int32_t device;
  int32_t rank;
  int32_t pad_;
  int64_t shape[4];
  int64_t stride[4];
} fa_tensor;

/* The attention options (flashattn::AttentionOptions). */
typedef struct fa_options {
  size_t struct_size;
  float softmax_scale;                    /* used when has_softmax_scale != 0; else 1/sqrt(hdim_qk) */
  int32_t has_softmax_scale;
  int32_t causal;
  int32_t pad_;
  int64_t window_left, window_right;      /* -1: unbounded */
  float softcap;                          /* 0: off */
} fa_options;

typedef struct fa_args {
  size_t struct_size;
  fa_tensor q, k, v, out, lse;
  fa_tensor dout, dq, dk, dv;             /* backward only */
  fa_tensor cu_seqlens_q, cu_seqlens_k;   /* varlen only */
  int64_t max_seqlen_q, max_seqlen_k;
  const fa_options* options;              /* NULL: the defaults */
  int32_t deterministic;                  /* backward only */
  int32_t pad_;
  void* stream;
  void* workspace;
  size_t workspace_bytes;
  /* -- end of layout 1 (FA_ARGS_SIZE_V1) -- */
  const char* path;                       /* NULL or "auto": any kernel family; else its name */
  /* -- end of layout 2 (FA_ARGS_SIZE_V2) -- */
  fa_tensor block_table;                  /* int32 [batch, max_pages]: paged k, v (varlen forward only) */
  /* -- end of layout 3 (FA_ARGS_SIZE_V3) -- */
  int32_t zero_rows_outside_sequences;    /* varlen: != 0 writes 0 to the packed rows of no sequence */
  int32_t pad2_;
} fa_args;

/* The KV-cache call (flashattn::KVCacheArgs, flash-attn's flash_attn_with_kvcache): q against a
 * contiguous or paged (block_table) cache, k_new/v_new appended in place at cache_seqlens, optional
 * rotary tables. Versioned by struct_size like fa_args. */
typedef struct fa_kvcache_args {
  size_t struct_size;
  fa_tensor q, k_cache, v_cache;
  fa_tensor cache_seqlens, block_table, cache_batch_idx;  /* int32; absent: see flashattn.hpp */
  fa_tensor k_new, v_new;                 /* both or neither */
  fa_tensor rotary_cos, rotary_sin;       /* both or neither */
  fa_tensor out, lse;                     /* lse optional */
  const fa_options* options;              /* NULL: the defaults */
  int32_t rotary_interleaved;
  /* Splits of the decode kernel; 0: chosen from the shapes (a given value keeps the decode kernel). */
  int32_t num_splits;
  const char* path;                       /* NULL or "auto": any kernel family; else its name */
  void* stream;
  void* workspace;
  size_t workspace_bytes;
  /* -- end of layout 1 (FA_KVCACHE_ARGS_SIZE_V1) -- */
  fa_tensor cache_leftpad;                /* int32 [batch], contiguous caches: first key row (flashattn.hpp) */
} fa_kvcache_args;

/* The smallest struct_size each struct accepts: its first layout. */
#define FA_ARGS_SIZE_V1 offsetof(fa_args, path)
#define FA_ARGS_SIZE_V2 offsetof(fa_args, block_table)
#define FA_ARGS_SIZE_V3 offsetof(fa_args, zero_rows_outside_sequences)
#define FA_OPTIONS_SIZE_V1 sizeof(fa_options)
#define FA_KVCACHE_ARGS_SIZE_V1 offsetof(fa_kvcache_args, cache_leftpad)

/* Fill with the defaults (no tensors, default options, path "auto") and this header's struct_size. */
void fa_args_init(fa_args* args);
void fa_options_init(fa_options* options);
void fa_kvcache_args_init(fa_kvcache_args* args);

int fa_forward(const fa_args* args, char* msg, size_t msg_cap);
int fa_backward(const fa_args* args, char* msg, size_t msg_cap);
int fa_forward_workspace_size(const fa_args* args, size_t* bytes, char* msg, size_t msg_cap);
int fa_backward_workspace_size(const fa_args* args, size_t* bytes, char* msg, size_t msg_cap);
int fa_kvcache_forward(const fa_kvcache_args* args, char* msg, size_t msg_cap);
int fa_kvcache_workspace_size(const fa_kvcache_args* args, size_t* bytes, char* msg, size_t msg_cap);
/* Kernel family that would run ("cpu", "sm80", ...), or "" when none; static storage per thread. */
const char* fa_forward_path(const fa_args* args);
const char* fa_backward_path(const fa_args* args);
const char* fa_kvcache_path(const fa_kvcache_args* args);
/* The kernel families of this build, comma-separated, in the order "auto" tries them. */
const char* fa_families(void);
int fa_cuda_available(void);

#ifdef __cplusplus
}
#endif

#endif /* FLASHATTN_C_H */
