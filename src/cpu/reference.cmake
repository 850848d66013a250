# The float64 naive reference (src/cpu/reference.hpp): the oracle of the tests and of the CLI's
# check. A library of its own so the flashattn library never carries it. Included from the top
# CMakeLists, so paths are spelled from this file's directory.
add_library(flashattn_reference STATIC ${CMAKE_CURRENT_LIST_DIR}/reference.cpp)
target_include_directories(flashattn_reference PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(flashattn_reference PUBLIC flashattn OpenMP::OpenMP_CXX)
target_compile_options(flashattn_reference PRIVATE ${FLASHATTN_WARNINGS})
if(FLASHATTN_NATIVE)
  # The reference's loops are the heaviest host code of a test run.
  target_compile_options(flashattn_reference PRIVATE -march=native)
endif()
