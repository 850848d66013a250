# The sm90 family (Hopper: TMA, mbarrier, wgmma; sm_90a). So far its host-side tensor-map builder
# (plain C++, no device code, so compiled whatever FLASHATTN_CUDA_ARCHS holds; it reaches the driver
# through the runtime's entry-point lookup, no libcuda link). Its kernel instances will compile for
# 90a only. Included from src/cuda/CMakeLists.txt.
target_sources(flashattn PRIVATE ${CMAKE_CURRENT_LIST_DIR}/tensor_map.cpp)
