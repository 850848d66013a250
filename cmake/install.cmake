# `cmake --install`: the library (libflashattn.a, the C++ API), the C ABI (libflashattn_c.so), the
# public headers, and a CMake package so that another project can write
#   find_package(flashattn CONFIG REQUIRED)
#   target_link_libraries(app PRIVATE flashattn::flashattn)   # or flashattn::flashattn_c
# Included from the top CMakeLists when FLASHATTN_INSTALL is on. examples/consumer/ is such a
# project; scripts/consumer_check.sh installs to a temporary prefix and builds it.
include(CMakePackageConfigHelpers)

set(FLASHATTN_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/flashattn)

# The C ABI library finds libcudart where it was linked (the toolkit's folder) after installation.
set_target_properties(flashattn_c PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)

install(TARGETS flashattn flashattn_c EXPORT flashattnTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/flashattn DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")

# flashattn::flashattn's link interface names OpenMP::OpenMP_CXX (and CUDA::cudart with CUDA):
# flashattnConfig.cmake finds them before it loads the targets.
install(EXPORT flashattnTargets NAMESPACE flashattn:: DESTINATION ${FLASHATTN_INSTALL_CMAKEDIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/flashattnConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/flashattnConfig.cmake
  INSTALL_DESTINATION ${FLASHATTN_INSTALL_CMAKEDIR})
# 0.x: a minor version may change the API, so a request for 0.1 accepts 0.1.* only.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/flashattnConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/flashattnConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/flashattnConfigVersion.cmake
  DESTINATION ${FLASHATTN_INSTALL_CMAKEDIR})
