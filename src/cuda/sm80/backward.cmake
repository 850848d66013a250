# sm80 backward: one translation unit per (dtype, head dim) instance of the main kernel, generated
# from bwd_instance.cu.in, plus the pre/postprocess kernels and the dispatch, which learns the
# compiled head dims from the generated X-macro list sm80_bwd/bwd_headdims.inc. Included from
# src/cuda/CMakeLists.txt.
#
# FLASHATTN_SM80_BWD_VARIANT selects a compile-time variant of the main loop for side-by-side
# timing (docs/kernels-sm80-backward.md, "What was tried"); 0 is the default kernel. It reaches
# every backward source (the tile table is shared by host and device code), nothing else.
set(FLASHATTN_SM80_BWD_VARIANT 0 CACHE STRING "sm80 backward main-loop variant (0 = default; see docs/kernels-sm80-backward.md)")
if(NOT FLASHATTN_SM80_BWD_VARIANT MATCHES "^[0-9]+$")
  message(FATAL_ERROR "FLASHATTN_SM80_BWD_VARIANT must be a non-negative integer, got '${FLASHATTN_SM80_BWD_VARIANT}'")
endif()
flashattn_add_instances(sm80_bwd ${CMAKE_CURRENT_LIST_DIR}/bwd_instance.cu.in)
set(_fa_bwd_xlist "")
set(_fa_bwd_sources ${CMAKE_CURRENT_LIST_DIR}/bwd_api.cu ${CMAKE_CURRENT_LIST_DIR}/bwd_prepost.cu)
foreach(d IN LISTS FLASHATTN_HEADDIMS)
  string(APPEND _fa_bwd_xlist "FLASHATTN_SM80_BWD_HEADDIM(${d})\n")
  foreach(dt IN ITEMS f16 bf16)
    list(APPEND _fa_bwd_sources ${CMAKE_CURRENT_BINARY_DIR}/sm80_bwd/sm80_bwd_${dt}_hdim${d}.cu)
  endforeach()
endforeach()
file(CONFIGURE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/sm80_bwd/bwd_headdims.inc CONTENT "${_fa_bwd_xlist}")
target_sources(flashattn PRIVATE ${CMAKE_CURRENT_LIST_DIR}/bwd_api.cu ${CMAKE_CURRENT_LIST_DIR}/bwd_prepost.cu)
set_property(SOURCE ${_fa_bwd_sources} TARGET_DIRECTORY flashattn APPEND
             PROPERTY COMPILE_DEFINITIONS FLASHATTN_SM80_BWD_VARIANT=${FLASHATTN_SM80_BWD_VARIANT})
if(FLASHATTN_PTXAS_VERBOSE)
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/bwd_prepost.cu TARGET_DIRECTORY flashattn
                              PROPERTIES COMPILE_OPTIONS "-Xptxas=-v")
endif()
