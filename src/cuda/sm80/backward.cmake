# sm80 backward: one translation unit per (dtype, head dim) instance of the main kernel, generated
# from bwd_instance.cu.in for each head dim in FLASHATTN_HEADDIMS, plus the pre/postprocess kernels
# and the dispatch, which learns the compiled head dims from the generated X-macro list
# sm80_bwd/bwd_headdims.inc. Included from src/cuda/CMakeLists.txt (CMAKE_CURRENT_LIST_DIR is
# this folder). -DFLASHATTN_PTXAS_VERBOSE=ON prints ptxas resource usage for the instances.
option(FLASHATTN_PTXAS_VERBOSE "Print ptxas resource usage (-Xptxas -v) for the sm80 kernel instances" OFF)

set(_fa_bwd_supported 64 96 128 192 256)
set(_fa_bwd_gen ${CMAKE_CURRENT_BINARY_DIR}/sm80_bwd)
set(_fa_bwd_xlist "")
set(_fa_bwd_sources "")
foreach(FLASHATTN_BWD_HEADDIM IN LISTS FLASHATTN_HEADDIMS)
  if(NOT FLASHATTN_BWD_HEADDIM IN_LIST _fa_bwd_supported)
    message(FATAL_ERROR "FLASHATTN_HEADDIMS: head dim ${FLASHATTN_BWD_HEADDIM} has no sm80 backward instance "
                        "(supported: ${_fa_bwd_supported})")
  endif()
  foreach(FLASHATTN_BWD_DTYPE IN ITEMS f16 bf16)
    string(TOUPPER ${FLASHATTN_BWD_DTYPE} FLASHATTN_BWD_TAG)
    set(_fa_bwd_tu ${_fa_bwd_gen}/bwd_${FLASHATTN_BWD_DTYPE}_hdim${FLASHATTN_BWD_HEADDIM}.cu)
    configure_file(${CMAKE_CURRENT_LIST_DIR}/bwd_instance.cu.in ${_fa_bwd_tu} @ONLY)
    list(APPEND _fa_bwd_sources ${_fa_bwd_tu})
  endforeach()
  string(APPEND _fa_bwd_xlist "FLASHATTN_SM80_BWD_HEADDIM(${FLASHATTN_BWD_HEADDIM})\n")
endforeach()
file(CONFIGURE OUTPUT ${_fa_bwd_gen}/bwd_headdims.inc CONTENT "${_fa_bwd_xlist}")

target_sources(flashattn PRIVATE ${_fa_bwd_sources} ${CMAKE_CURRENT_LIST_DIR}/bwd_api.cu
                                 ${CMAKE_CURRENT_LIST_DIR}/bwd_prepost.cu)
target_include_directories(flashattn PRIVATE ${CMAKE_CURRENT_BINARY_DIR})
if(FLASHATTN_PTXAS_VERBOSE)
  set_source_files_properties(${_fa_bwd_sources} ${CMAKE_CURRENT_LIST_DIR}/bwd_prepost.cu TARGET_DIRECTORY flashattn
                              PROPERTIES COMPILE_OPTIONS "-Xptxas=-v")
endif()
