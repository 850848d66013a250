# The sm80 family (mma.sync, ldmatrix, cp.async; sm_80 and later): its host code, the backward's
# pre/postprocess kernels, and one translation unit per (direction, dtype, head dim) instance,
# generated from fwd_instance.cu.in and bwd_instance.cu.in. The registry (family.cu) learns the
# compiled head dims from the generated X-macro list sm80/instances.h. Compiled for every arch of
# FLASHATTN_CUDA_ARCHS. Included from src/cuda/CMakeLists.txt.
set(FLASHATTN_SM80_HEADDIMS 64 96 128 192 256)  # the head dims the sm80 kernels have instances for
foreach(d IN LISTS FLASHATTN_HEADDIMS)
  if(NOT d IN_LIST FLASHATTN_SM80_HEADDIMS)
    message(FATAL_ERROR "FLASHATTN_HEADDIMS: head dim ${d} has no sm80 instance (supported: ${FLASHATTN_SM80_HEADDIMS})")
  endif()
endforeach()

set(FLASHATTN_HEADDIM_XLIST "")
foreach(d IN LISTS FLASHATTN_HEADDIMS)
  string(APPEND FLASHATTN_HEADDIM_XLIST " X(${d})")
endforeach()
configure_file(${CMAKE_CURRENT_LIST_DIR}/instances.h.in ${CMAKE_CURRENT_BINARY_DIR}/sm80/instances.h @ONLY)

flashattn_add_instances(sm80_fwd ${CMAKE_CURRENT_LIST_DIR}/fwd_instance.cu.in "${FLASHATTN_CUDA_ARCHS}")
flashattn_add_instances(sm80_bwd ${CMAKE_CURRENT_LIST_DIR}/bwd_instance.cu.in "${FLASHATTN_CUDA_ARCHS}")
flashattn_add_cuda_sources("${FLASHATTN_CUDA_ARCHS}"
  ${CMAKE_CURRENT_LIST_DIR}/family.cu
  ${CMAKE_CURRENT_LIST_DIR}/fwd_plan.cu
  ${CMAKE_CURRENT_LIST_DIR}/bwd_plan.cu
  ${CMAKE_CURRENT_LIST_DIR}/bwd_prepost.cu)
