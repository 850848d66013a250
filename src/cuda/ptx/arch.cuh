// Architecture guards for the PTX wrappers: a wrapper compiled for an arch that lacks its
// instruction traps loudly at run time (and the host-side select() never launches it there).
#pragma once

#include <cassert>
#include <type_traits>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define FLASHATTN_PTX_SM80 1
#else
#define FLASHATTN_PTX_SM80 0
#endif

// Hopper: TMA, mbarrier transaction counts, fence.proxy.async and named barriers need sm_90; wgmma
// and setmaxnreg exist only in the arch-specific target sm_90a (-gencode arch=compute_90a,code=sm_90a),
// which nvcc marks with __CUDA_ARCH_FEAT_SM90_ALL.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FLASHATTN_PTX_SM90 1
#else
#define FLASHATTN_PTX_SM90 0
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FLASHATTN_PTX_SM90A 1
#else
#define FLASHATTN_PTX_SM90A 0
#endif

#if defined(__CUDA_ARCH__)
#define FLASHATTN_PTX_UNSUPPORTED(what) \
  do {                                  \
    assert(!what);                      \
    __trap();                           \
  } while (0)
#else
#define FLASHATTN_PTX_UNSUPPORTED(what) \
  do {                                  \
  } while (0)
#endif
