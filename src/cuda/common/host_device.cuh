// FLASHATTN_HD marks the small index helpers of src/cuda/common/ that both the host (launch code,
// host-side unit tests) and the kernels call. Under a plain C++ compiler it is just `inline`.
#pragma once

#if defined(__CUDACC__)
#define FLASHATTN_HD __host__ __device__ __forceinline__
#else
#define FLASHATTN_HD inline
#endif

// `#pragma unroll` for loops in FLASHATTN_HD helpers: only in the device pass (a host compiler,
// nvcc's host pass included, would warn about the unknown pragma).
#if defined(__CUDA_ARCH__)
#define FLASHATTN_UNROLL _Pragma("unroll")
#else
#define FLASHATTN_UNROLL
#endif
