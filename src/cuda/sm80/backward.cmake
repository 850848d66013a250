# sm80 backward: one translation unit per (dtype, head dim) instance of the main kernel, generated
# from bwd_instance.cu.in, plus the pre/postprocess kernels and the dispatch, which learns the
# compiled head dims from the generated X-macro list sm80_bwd/bwd_headdims.inc. Included from
# src/cuda/CMakeLists.txt.
flashattn_add_instances(sm80_bwd ${CMAKE_CURRENT_LIST_DIR}/bwd_instance.cu.in)
set(_fa_bwd_xlist "")
foreach(d IN LISTS FLASHATTN_HEADDIMS)
  string(APPEND _fa_bwd_xlist "FLASHATTN_SM80_BWD_HEADDIM(${d})\n")
endforeach()
file(CONFIGURE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/sm80_bwd/bwd_headdims.inc CONTENT "${_fa_bwd_xlist}")
target_sources(flashattn PRIVATE ${CMAKE_CURRENT_LIST_DIR}/bwd_api.cu ${CMAKE_CURRENT_LIST_DIR}/bwd_prepost.cu)
if(FLASHATTN_PTXAS_VERBOSE)
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/bwd_prepost.cu TARGET_DIRECTORY flashattn
                              PROPERTIES COMPILE_OPTIONS "-Xptxas=-v")
endif()
