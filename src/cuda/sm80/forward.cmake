# sm80 forward: one translation unit per (dtype, head dim) instance, generated from
# fwd_instance.cu.in, plus the dispatch, which learns the compiled head dims from the generated
# header sm80_fwd/fwd_instances.h (an X-macro list). Included from src/cuda/CMakeLists.txt.
flashattn_add_instances(sm80_fwd ${CMAKE_CURRENT_LIST_DIR}/fwd_instance.cu.in)

# Build-time forward variants (fwd_traits.cuh), one per build so that scripts/gpu_variants.sh can time
# them side by side; 0 builds the default kernels (the only one at present). The dispatch sees it
# too (tile shapes size the grid). The backward does not read this macro.
set(FLASHATTN_SM80_FWD_VARIANT 0 CACHE STRING "sm80 forward build variant (0 = default; see fwd_traits.cuh)")
if(NOT FLASHATTN_SM80_FWD_VARIANT MATCHES "^[0-9]+$")
  message(FATAL_ERROR "FLASHATTN_SM80_FWD_VARIANT: expected a non-negative integer, got '${FLASHATTN_SM80_FWD_VARIANT}'")
endif()
target_compile_definitions(flashattn PRIVATE FLASHATTN_SM80_FWD_VARIANT=${FLASHATTN_SM80_FWD_VARIANT})
set(FLASHATTN_FWD_HEADDIM_XLIST "")
foreach(d IN LISTS FLASHATTN_HEADDIMS)
  string(APPEND FLASHATTN_FWD_HEADDIM_XLIST " X(${d})")
endforeach()
configure_file(${CMAKE_CURRENT_LIST_DIR}/fwd_instances.h.in ${CMAKE_CURRENT_BINARY_DIR}/sm80_fwd/fwd_instances.h @ONLY)
target_sources(flashattn PRIVATE ${CMAKE_CURRENT_LIST_DIR}/fwd_dispatch.cu)
