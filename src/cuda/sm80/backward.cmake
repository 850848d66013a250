target_sources(flashattn PRIVATE ${CMAKE_CURRENT_LIST_DIR}/backward_stub.cu)
