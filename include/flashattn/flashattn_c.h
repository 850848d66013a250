/* flashattn C ABI: one flat argument struct for forward and backward, for ctypes/FFI callers.
 * Mirrors the C++ API (flashattn.hpp); return value is the StatusCode (0 = ok) and the message is
 * copied into msg (NUL-terminated, truncated to msg_cap). Nothing here throws or aborts. */
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

typedef struct fa_args {
  fa_tensor q, k, v, out, lse;
  fa_tensor dout, dq, dk, dv;             /* backward only */
  fa_tensor cu_seqlens_q, cu_seqlens_k;   /* varlen only */
  int64_t max_seqlen_q, max_seqlen_k;
  float softmax_scale;                    /* used when has_softmax_scale != 0 */
  int32_t has_softmax_scale;
  int32_t causal;
  int32_t deterministic;
  int64_t window_left, window_right;
  float softcap;
  int32_t pad_;
  void* stream;
  void* workspace;
  size_t workspace_bytes;
} fa_args;

int fa_forward(const fa_args* args, char* msg, size_t msg_cap);
int fa_backward(const fa_args* args, char* msg, size_t msg_cap);
int fa_forward_workspace_size(const fa_args* args, size_t* bytes, char* msg, size_t msg_cap);
int fa_backward_workspace_size(const fa_args* args, size_t* bytes, char* msg, size_t msg_cap);
/* Kernel family that would run ("cpu", "sm80", ...), or "" when none; static storage per thread. */
const char* fa_forward_path(const fa_args* args);
const char* fa_backward_path(const fa_args* args);
int fa_cuda_available(void);

#ifdef __cplusplus
}
#endif

#endif /* FLASHATTN_C_H */
