# mla_disagg: the two-process prefill/decode example (included by
# src/transfer/transfer_nccl.cmake when NCCL is found; it compiles on CI, runs
# on a machine with two GPUs: docs/multi-gpu.md).
add_executable(mla_disagg ${CMAKE_SOURCE_DIR}/examples/disagg/disagg.cpp)
set_target_properties(mla_disagg PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
# Public headers only (include/, through the mla target), plus examples/common.
target_include_directories(mla_disagg PRIVATE ${CMAKE_SOURCE_DIR} ${MLA_NCCL_INCLUDE_DIR})
target_compile_options(mla_disagg PRIVATE -Wall -Wextra -Wno-unused-parameter)
target_link_libraries(mla_disagg PRIVATE mla_transfer_nccl mla CUDA::cudart ${MLA_NCCL_LIBRARY}
                                         CLI11::CLI11 fmt::fmt)
