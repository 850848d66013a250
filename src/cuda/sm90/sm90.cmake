# The sm90 family (Hopper: TMA, mbarrier, wgmma; sm_90a). Its host code (the tensor-map builder,
# the registry and plan in family.cu, no device code) compiles whatever FLASHATTN_CUDA_ARCHS holds,
# so the family is always in the table; its kernel instances compile for 90a alone, and only when
# 90a is among the archs (else the registry is empty and the plan refuses, naming the build).
# Instances: the head dims of FLASHATTN_HEADDIMS among 64, 128, 192, 256 (others round up), f16
# and bf16, one translation unit each holding the unmasked and the masked kernel; the backward's
# (head dims 64, 128, 256) one translation unit per dtype and head dim.
# Included from src/cuda/CMakeLists.txt.
target_sources(flashattn PRIVATE ${CMAKE_CURRENT_LIST_DIR}/tensor_map.cpp)

set(FLASHATTN_SM90_HEADDIMS "")
set(_fa_sm90_supported_headdims 64 128 192 256)
set(_fa_sm90_dir ${CMAKE_CURRENT_LIST_DIR})
if("90a" IN_LIST FLASHATTN_CUDA_ARCHS)
  foreach(d IN LISTS FLASHATTN_HEADDIMS)
    if(d IN_LIST _fa_sm90_supported_headdims)
      list(APPEND FLASHATTN_SM90_HEADDIMS ${d})
    endif()
  endforeach()
endif()
set(FLASHATTN_SM90_HEADDIM_XLIST "")
foreach(d IN LISTS FLASHATTN_SM90_HEADDIMS)
  string(APPEND FLASHATTN_SM90_HEADDIM_XLIST " X(${d})")
endforeach()
# The backward's head dims (bwd_launch.hpp's has_sm90_bwd): 64, 128 and 256 where they are in the list.
set(FLASHATTN_SM90_BWD_HEADDIMS "")
set(FLASHATTN_SM90_BWD_HEADDIM_XLIST "")
foreach(d IN LISTS FLASHATTN_SM90_HEADDIMS)
  if(d EQUAL 64 OR d EQUAL 128 OR d EQUAL 256)
    list(APPEND FLASHATTN_SM90_BWD_HEADDIMS ${d})
    string(APPEND FLASHATTN_SM90_BWD_HEADDIM_XLIST " X(${d})")
  endif()
endforeach()
configure_file(${CMAKE_CURRENT_LIST_DIR}/instances.h.in ${CMAKE_CURRENT_BINARY_DIR}/sm90/instances.h @ONLY)

# flashattn_add_instances reads FLASHATTN_HEADDIMS: a function scope gives it the sm90 list.
function(flashattn_add_sm90_instances)
  set(FLASHATTN_HEADDIMS ${FLASHATTN_SM90_HEADDIMS})
  flashattn_add_instances(sm90_fwd ${_fa_sm90_dir}/fwd_instance.cu.in "90a")
  set(FLASHATTN_HEADDIMS ${FLASHATTN_SM90_BWD_HEADDIMS})
  flashattn_add_instances(sm90_bwd ${_fa_sm90_dir}/bwd_instance.cu.in "90a")
endfunction()
if(FLASHATTN_SM90_HEADDIMS)
  flashattn_add_sm90_instances()
endif()
flashattn_add_cuda_sources("${FLASHATTN_CUDA_ARCHS}" ${CMAKE_CURRENT_LIST_DIR}/family.cu)
