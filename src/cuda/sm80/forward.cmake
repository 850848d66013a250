target_sources(flashattn PRIVATE ${CMAKE_CURRENT_LIST_DIR}/forward_stub.cu)
