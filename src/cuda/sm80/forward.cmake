# sm80 forward: one translation unit per (dtype, head dim) instance, generated from
# fwd_instance.cu.in, plus the dispatch, which learns the compiled head dims from the generated
# header sm80_fwd/fwd_instances.h (an X-macro list). Included from src/cuda/CMakeLists.txt.
flashattn_add_instances(sm80_fwd ${CMAKE_CURRENT_LIST_DIR}/fwd_instance.cu.in)
set(FLASHATTN_FWD_HEADDIM_XLIST "")
foreach(d IN LISTS FLASHATTN_HEADDIMS)
  string(APPEND FLASHATTN_FWD_HEADDIM_XLIST " X(${d})")
endforeach()
configure_file(${CMAKE_CURRENT_LIST_DIR}/fwd_instances.h.in ${CMAKE_CURRENT_BINARY_DIR}/sm80_fwd/fwd_instances.h @ONLY)
target_sources(flashattn PRIVATE ${CMAKE_CURRENT_LIST_DIR}/fwd_dispatch.cu)
