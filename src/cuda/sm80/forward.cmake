# sm80 forward: one translation unit per (dtype, head dim) instance, generated from
# fwd_instance.cu.in for each head dim in FLASHATTN_HEADDIMS, plus the dispatch, which learns the
# compiled head dims from the generated header sm80_fwd/fwd_instances.h (an X-macro list).
# Included from src/cuda/CMakeLists.txt (CMAKE_CURRENT_LIST_DIR is this folder).
option(FLASHATTN_PTXAS_VERBOSE "Print ptxas resource usage (-Xptxas -v) for the sm80 forward instances" OFF)

set(_fa_fwd_supported 64 96 128 192 256)
set(_fa_fwd_gen ${CMAKE_CURRENT_BINARY_DIR}/sm80_fwd)
set(FLASHATTN_FWD_HEADDIM_XLIST "")
set(_fa_fwd_sources "")
foreach(FLASHATTN_FWD_HEADDIM IN LISTS FLASHATTN_HEADDIMS)
  if(NOT FLASHATTN_FWD_HEADDIM IN_LIST _fa_fwd_supported)
    message(FATAL_ERROR "FLASHATTN_HEADDIMS: head dim ${FLASHATTN_FWD_HEADDIM} has no sm80 forward instance "
                        "(supported: ${_fa_fwd_supported})")
  endif()
  foreach(FLASHATTN_FWD_DTYPE IN ITEMS f16 bf16)
    string(TOUPPER ${FLASHATTN_FWD_DTYPE} FLASHATTN_FWD_TAG)
    set(_fa_fwd_tu ${_fa_fwd_gen}/fwd_${FLASHATTN_FWD_DTYPE}_hdim${FLASHATTN_FWD_HEADDIM}.cu)
    configure_file(${CMAKE_CURRENT_LIST_DIR}/fwd_instance.cu.in ${_fa_fwd_tu} @ONLY)
    list(APPEND _fa_fwd_sources ${_fa_fwd_tu})
  endforeach()
  string(APPEND FLASHATTN_FWD_HEADDIM_XLIST " X(${FLASHATTN_FWD_HEADDIM})")
endforeach()
configure_file(${CMAKE_CURRENT_LIST_DIR}/fwd_instances.h.in ${_fa_fwd_gen}/fwd_instances.h @ONLY)

target_sources(flashattn PRIVATE ${_fa_fwd_sources} ${CMAKE_CURRENT_LIST_DIR}/fwd_dispatch.cu)
target_include_directories(flashattn PRIVATE ${CMAKE_CURRENT_BINARY_DIR})
if(FLASHATTN_PTXAS_VERBOSE)
  set_source_files_properties(${_fa_fwd_sources} TARGET_DIRECTORY flashattn PROPERTIES COMPILE_OPTIONS "-Xptxas=-v")
endif()
