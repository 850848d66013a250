# The decode family (the KV-cache call on the GPU: split-KV attention over contiguous or paged
# caches, on mma.sync / cp.async, sm_80 and later): the plan and registry (family.cu), the route of
# long query calls through the forward (forward_route.cu), the append and rotary kernels
# (prepare.cu), the split combine (combine.cu), and one attention translation unit per (dtype, head dim) of FLASHATTN_HEADDIMS among 64, 128, 256 (smaller ones round up),
# compiled for every arch of FLASHATTN_CUDA_ARCHS. Included from src/cuda/CMakeLists.txt.
set(FLASHATTN_DECODE_HEADDIMS "")
set(_fa_decode_supported_headdims 64 128 256)
foreach(d IN LISTS FLASHATTN_HEADDIMS)
  if(d IN_LIST _fa_decode_supported_headdims)
    list(APPEND FLASHATTN_DECODE_HEADDIMS ${d})
  endif()
endforeach()
set(FLASHATTN_DECODE_HEADDIM_XLIST "")
foreach(d IN LISTS FLASHATTN_DECODE_HEADDIMS)
  string(APPEND FLASHATTN_DECODE_HEADDIM_XLIST " X(${d})")
endforeach()
configure_file(${CMAKE_CURRENT_LIST_DIR}/instances.h.in ${CMAKE_CURRENT_BINARY_DIR}/decode/instances.h @ONLY)

set(_fa_decode_dir ${CMAKE_CURRENT_LIST_DIR})
# flashattn_add_instances reads FLASHATTN_HEADDIMS: a function scope gives it the decode list.
function(flashattn_add_decode_instances)
  set(FLASHATTN_HEADDIMS ${FLASHATTN_DECODE_HEADDIMS})
  flashattn_add_instances(decode_attend ${_fa_decode_dir}/attend_instance.cu.in "${FLASHATTN_CUDA_ARCHS}")
endfunction()
if(FLASHATTN_DECODE_HEADDIMS)
  flashattn_add_decode_instances()
endif()
flashattn_add_cuda_sources("${FLASHATTN_CUDA_ARCHS}"
  ${CMAKE_CURRENT_LIST_DIR}/family.cu
  ${CMAKE_CURRENT_LIST_DIR}/forward_route.cu
  ${CMAKE_CURRENT_LIST_DIR}/prepare.cu
  ${CMAKE_CURRENT_LIST_DIR}/combine.cu)
