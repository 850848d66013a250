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
